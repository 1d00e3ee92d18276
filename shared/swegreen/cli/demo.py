"""`swegreen demo` and `swegreen sample`: the sample benchmark, built and evaluated with
gold, empty and crafted patches, each verdict checked against the expected one."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from swegreen.cli.common import EXIT_INTERRUPTED, EXIT_UNEXPECTED, said
from swegreen.cli.run import evaluate

if TYPE_CHECKING:
    from rich.console import Console

    from swegreen.core.scrub import Scrubber
    from swegreen.evaluation.engine import LocalSettings


def demo(
    args: argparse.Namespace,
    settings: LocalSettings,
    env: dict[str, str],
    console: Console,
    scrubber: Scrubber,
) -> int:
    from swegreen.core.config import build_config, config_from_env
    from swegreen.sample import build_sample

    sample = build_sample(settings.cache_dir / "sample")
    console.print(said("Sample benchmark", "bold", f"built in {sample.root}"))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    mismatches = 0
    for patches, expect in (("gold", "resolved"), ("empty", "no_op"), (str(sample.crafted), None)):
        # how this host runs evaluations (SWEGREEN_ISOLATION, ...; --isolation above
        # them); the benchmark and its rows are the demo's own
        config = build_config(
            ("environment", config_from_env(env)),
            ("command line", {"isolation": args.isolation}),
            (
                "the demo",
                {
                    "dataset": str(sample.dataset),
                    "repo_url_template": sample.url_template,
                    "max_rows": -1,
                    "max_concurrent_rows": args.max_concurrent_rows,
                },
            ),
        )
        label = "crafted" if expect is None else patches
        outcome = evaluate(
            config,
            patches,
            f"demo-{stamp}-{label}",
            settings,
            env,
            console,
            False,
            live=not args.no_progress,
            scrubber=scrubber,
        )
        if outcome is None:
            return EXIT_INTERRUPTED
        for r in outcome.results:
            want = expect or sample.expected[r.instance_id]["status"]
            if r.status.value != want:
                mismatches += 1
                console.print(
                    said(
                        "unexpected:",
                        "red",
                        f"{label} {r.instance_id} is {r.status.value}, expected {want}",
                    )
                )
    if mismatches:
        console.print(f"[red]{mismatches} row(s) did not get the expected verdict[/]")
        return EXIT_UNEXPECTED
    console.print(
        "[green]All sample verdicts are as expected:[/] gold resolves every task, empty is "
        "no_op everywhere, crafted predictions cover every status."
    )
    return 0


def sample_command(settings: LocalSettings, console: Console) -> int:
    from swegreen.sample import build_sample

    s = build_sample(settings.cache_dir / "sample")
    console.print(
        f"dataset: {s.dataset}\ncrafted predictions: {s.crafted}\n"
        f"repo_url_template: {s.url_template}\n"
        f"participant_repo_url_template: {s.participant_url_template}",
        markup=False,
    )
    return 0
