"""What every command shares: exit codes, the machine's settings, the config layers from
flags, run ids, and how messages and outcomes are printed."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swegreen.core.errors import ConfigError
from swegreen.core.ids import check_id, safe_id_suggestion

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from swegreen.evaluation.runner import RunOutcome
    from swegreen.evaluation.settings import LocalSettings

LOCAL_ENV_KEYS = frozenset(
    {
        "output_dir",
        "cache_dir",
        "memory_mb",
        "disk_mb",
        "max_processes",
        "offline_sources",
        "pythons",
        "python_downloads",
        "python_channels",
        "pythons_dir",
        "disk_reserve_gb",
    }
)
# What `swegreen serve` reads for its aws backend (cli/serve.py: front_door_settings).
SERVE_ENV_KEYS = frozenset({"backend", "api_url", "api_auth", "api_region", "api_key", "exchange"})
# Exit codes (docs/usage.md): scripts tell a run that could not start from one that
# finished with error rows, and both from an interrupted one.
EXIT_OK = 0
EXIT_UNEXPECTED = 1  # demo: a verdict other than the expected one
EXIT_CANNOT_START = 2  # bad config, dataset or input; unavailable sandbox; nothing ran
EXIT_ROWS_ERRORED = 3  # the run finished, but some rows are `error` (see the reasons)
EXIT_INTERRUPTED = 130  # resumable with the same --run-id


def said(label: str, style: str, message: str) -> Text:
    """``label`` styled, then ``message`` as it is: a message is never read as markup (a
    ``[config]`` in it would vanish, a ``[/x]`` would raise)."""
    from rich.text import Text

    return Text.assemble((label, style), " ", message)


def local_settings(args: argparse.Namespace, env: dict[str, str]) -> LocalSettings:
    from swegreen.evaluation.settings import LocalSettings, default_cache_dir

    output = args.output_dir or Path(env.get("SWEGREEN_OUTPUT_DIR", "results"))
    cache = args.cache_dir or Path(env.get("SWEGREEN_CACHE_DIR") or default_cache_dir(env))
    limits = {}
    for key in SANDBOX_LIMITS:
        raw = env.get(f"SWEGREEN_{key.upper()}")
        if raw is None or not raw.strip():
            continue
        if not raw.strip().isdigit() or int(raw) < 1:
            raise ConfigError(
                f"SWEGREEN_{key.upper()}={raw!r} is not a limit: give a whole number above 0 "
                f"({SANDBOX_LIMITS[key]})"
            )
        limits[key] = int(raw)
    return LocalSettings(
        output_dir=output,
        cache_dir=cache,
        keep_workspaces=getattr(args, "keep_workspaces", False),
        **python_sources(args, env),
        rebuild_envs=getattr(args, "rebuild_envs", False),
        pythons=pythons(getattr(args, "pythons", None), env),
        offline_sources=getattr(args, "offline_sources", None)
        or (Path(raw) if (raw := env.get("SWEGREEN_OFFLINE_SOURCES", "").strip()) else None),
        dataset_snapshots=Path(raw)
        if (raw := env.get("SWEGREEN_DATASET_SNAPSHOTS", "").strip())
        else None,
        **disk_reserve(getattr(args, "disk_reserve_gb", None), env),
        **limits,
    )


def disk_reserve(flag: float | None, env: dict[str, str]) -> dict[str, float]:
    """The flag, else the environment's value; neither: LocalSettings' default."""
    from swegreen.cli.parser import nonnegative_float

    raw = env.get("SWEGREEN_DISK_RESERVE_GB", "").strip()
    if flag is not None:
        return {"disk_reserve_gb": flag}
    if not raw:
        return {}
    try:
        return {"disk_reserve_gb": nonnegative_float(raw)}
    except argparse.ArgumentTypeError:
        raise ConfigError(
            f"SWEGREEN_DISK_RESERVE_GB={raw!r} is not a size: give GiB of free disk a new "
            "build must leave (a number, 0 for no check)"
        ) from None


def python_sources(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    """Where interpreters come from (settings.interpreter_settings), and the flag that
    turns downloads off."""
    from swegreen.evaluation.settings import interpreter_settings

    given = interpreter_settings(env)
    if getattr(args, "no_python_downloads", False):
        given["python_downloads"] = False
    return given


def pythons(flags: list[str] | None, env: dict[str, str]) -> dict[str, Path]:
    from swegreen.environments.interpreters import parse_given

    try:
        given = parse_given(env.get("SWEGREEN_PYTHONS", ""))
        given.update(parse_given(",".join(flags or [])))
    except ValueError as exc:
        raise ConfigError(f"--python / SWEGREEN_PYTHONS: {exc}") from None
    return given


# The sandbox's limits, settings of the machine (an assessment request cannot change them).


# The sandbox's limits, settings of the machine (an assessment request cannot change them).
SANDBOX_LIMITS = {
    "memory_mb": "MB of memory for one sandbox, and of address space for each process",
    "disk_mb": "MB one sandboxed run may add to its workspace and temp dirs",
    "max_processes": "processes in one sandbox",
}


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    keys = [
        "dataset",
        "split",
        "dataset_revision",
        "max_rows",
        "instance_ids",
        "repos",
        "shard_index",
        "num_shards",
        "max_concurrent_rows",
        "eval_timeout",
        "max_attempts",
        "repo_url_template",
        "green_agent_model",
        "base_validation",
        "regression_check",
        "env_files_at_base",
        "network_instances",
        "isolation",
        "environments",
        "docker_images",
    ]
    return {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}


def scenario_path(args: argparse.Namespace) -> Path | None:
    if args.scenario is not None:
        return args.scenario
    default = Path("scenario.toml")
    return default if default.exists() else None


def print_outcome(console: Console, outcome: RunOutcome, settings: LocalSettings) -> None:
    from swegreen.reports.console import error_fixes, leaderboard_table, reasons_line

    run_id = outcome.record.run_id
    console.print(leaderboard_table(outcome.metrics, f"Leaderboard: {run_id}"))
    console.print(f"reasons: {reasons_line(outcome.metrics)}", markup=False)
    for label, line in error_fixes(outcome.results):
        console.print(said(label, "yellow", line))
    if outcome.resumed:
        console.print(
            f"resumed: {outcome.resumed} row(s) were already stored, "
            f"{outcome.evaluated} evaluated now"
        )
    run_dir = settings.output_dir / run_id
    console.print(f"results: {run_dir / 'results.json'}", markup=False)
    console.print(f"report:  {run_dir / 'report.html'}", markup=False)
    console.print(f"rows:    {run_dir / 'instances.jsonl'}\n", markup=False)


def card_url(args: argparse.Namespace) -> str:
    return args.card_url or f"http://{args.host}:{args.port}/"


def new_run_id(patches: str) -> str:
    label = Path(patches).stem if patches not in ("gold", "empty") else patches
    label = safe_id_suggestion(label)[:100]  # a file's name may hold anything
    return f"{label}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}"


def checked_run_id(value: str) -> str:
    """``--run-id``, which names directories: checked before anything is written."""
    try:
        return check_id(value, "--run-id")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
