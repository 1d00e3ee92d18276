"""Command line: run evaluations, the demo, re-grading and reports; one module per command.

``main(argv) -> int`` is the whole program; exceptions of the project's family become a
one-line message and exit code 2, an interrupted run exits 130 and says how to resume.
Everything heavier than the parser is imported by the command that needs it.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Sequence

from swegreen.cli.common import (
    EXIT_CANNOT_START,
    EXIT_INTERRUPTED,
    LOCAL_ENV_KEYS,
    SERVE_ENV_KEYS,
    checked_run_id,
    local_settings,
    said,
)
from swegreen.cli.parser import parser
from swegreen.core.errors import ConfigError, SweGreenError

__all__ = ["entry", "main", "parser"]


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from rich.console import Console

    from swegreen.cli.cache import cache_command
    from swegreen.cli.compare import compare_command
    from swegreen.cli.demo import demo, sample_command
    from swegreen.cli.participant import participant_command
    from swegreen.cli.plan import plan_command
    from swegreen.cli.pythons import pythons_command
    from swegreen.cli.regrade import regrade
    from swegreen.cli.report import report
    from swegreen.cli.run import run_command
    from swegreen.cli.serve import serve_command
    from swegreen.cli.upload import upload_dataset_command, upload_predictions_command
    from swegreen.core.config import unknown_env
    from swegreen.core.scrub import Scrubber
    from swegreen.evaluation.settings import host_environment

    # piped, lines are not wrapped at 80 columns (a path stays on its line)
    console = Console(stderr=False, highlight=False)
    console.soft_wrap = not console.is_terminal
    env = host_environment()
    if (unknown := unknown_env(env, LOCAL_ENV_KEYS | SERVE_ENV_KEYS)) is not None:
        Console(stderr=True, highlight=False).print(said("warning:", "yellow", unknown))
    scrubber = Scrubber.from_env(env)  # the host's secrets, kept out of everything stored
    try:
        if args.command == "upload-dataset":
            return upload_dataset_command(args, console)
        if args.command == "upload-predictions":
            return upload_predictions_command(args, env, console)
        if args.command == "plan":
            return plan_command(args, console)
        settings = local_settings(args, env)
        if args.command == "run":
            return run_command(args, settings, env, console, scrubber)
        if args.command == "demo":
            return demo(args, settings, env, console, scrubber)
        if args.command == "regrade":
            return asyncio.run(
                regrade(checked_run_id(args.run_id), settings, env, console, scrubber)
            )
        if args.command == "report":
            run_id = checked_run_id(args.run_id) if args.run_id else None
            if args.html is not None and run_id is None:
                raise ConfigError("report --html needs --run-id (which run to render)")
            return report(run_id, settings, env, console, args.html)
        if args.command == "serve":
            return serve_command(args, settings, env, scrubber)
        if args.command == "participant":
            return participant_command(args, settings)
        if args.command == "sample":
            return sample_command(settings, console)
        if args.command == "pythons":
            return pythons_command(args, settings, env, console)
        if args.command == "cache":
            return cache_command(args, settings, console)
        if args.command == "compare":
            runs = [checked_run_id(r) for r in args.runs]
            return compare_command(runs, settings, console, args.html)
    except SweGreenError as exc:
        console.print(said("error:", "red", str(exc)))
        return EXIT_CANNOT_START
    raise AssertionError(args.command)


def entry() -> None:
    try:
        code = main()
    except KeyboardInterrupt:  # before a run set its own handlers (imports, the dataset)
        print("\ninterrupted.", file=sys.stderr)
        code = EXIT_INTERRUPTED
    # What the command made is closed by now. The interpreter's exit would still walk
    # every object for cycles (some 470 modules, the dataset's 500 rows: 40 ms of every
    # command); frozen, they are left to the operating system, as on any exit.
    gc.freeze()
    sys.exit(code)
