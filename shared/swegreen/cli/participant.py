"""`swegreen participant`: a reference participant (A2A server)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swegreen.cli.common import card_url
from swegreen.core.errors import ConfigError

if TYPE_CHECKING:
    from swegreen.evaluation.engine import LocalSettings


def participant_command(args: argparse.Namespace, settings: LocalSettings) -> int:
    from swegreen.agent.server import serve
    from swegreen.participants.server import failing_app, participant_app

    url = card_url(args)
    if args.kind == "scripted" and args.mode == "http500":
        serve(failing_app(url), args.host, args.port)
        return 0
    solver: Any
    if args.kind == "empty":
        from swegreen.participants.solvers import empty_solver

        solver = empty_solver
    elif args.kind == "predictions":
        from swegreen.participants.solvers import PredictionsSolver

        if args.predictions is None:
            raise ConfigError("participant predictions needs --predictions FILE")
        solver = PredictionsSolver(args.predictions)
    elif args.kind == "agent":
        from swegreen.participants.agent_loop import BashAgent

        solver = BashAgent(args.model, mock_responses=mock_responses(args.llm_mock_responses))
    elif args.kind == "llm":
        from swegreen.participants.llm import LlmSolver

        solver = LlmSolver(
            args.model,
            settings.cache_dir / "llm-participant",
            mock_response=args.llm_mock_response,
            url_template=args.repo_url_template,
        )
    else:
        from swegreen.core.config import EvalConfig
        from swegreen.core.dataset import load_dataset
        from swegreen.participants.solvers import GoldSolver, ScriptedShellSolver, ScriptedSolver
        from swegreen.sample import resolve_sample

        dataset = None
        if args.kind == "gold" or args.mode in ("fenced", "slow", "explore"):  # others: none
            config = resolve_sample(EvalConfig(dataset=args.dataset), settings.cache_dir)
            dataset = load_dataset(
                config.dataset,
                parsed_cache=settings.parsed_datasets,
                snapshots=settings.dataset_snapshots,
            )
        if args.kind == "gold":
            solver = GoldSolver(dataset)
        elif args.mode in ScriptedShellSolver.MODES:
            solver = ScriptedShellSolver(args.mode, dataset, args.snoop_path)
        else:
            solver = ScriptedSolver(args.mode, dataset)
    serve(participant_app(f"{args.kind} participant", solver, url), args.host, args.port)
    return 0


def mock_responses(path: Path | None) -> list[str]:
    if path is None:
        return []
    try:
        answers = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--llm-mock-responses {path}: {exc}") from None
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise ConfigError(f"--llm-mock-responses {path}: expected a JSON list of strings")
    return answers
