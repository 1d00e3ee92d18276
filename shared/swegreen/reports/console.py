"""What people see in a terminal: a live progress bar with per-status counts, and the
leaderboard table at the end. Not used by the servers or the Lambdas."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column, Table
from rich.text import Text

from swegreen.core.classify import REASON_WORDS, Status
from swegreen.core.intervals import WILSON, as_text
from swegreen.core.metrics import RunMetrics
from swegreen.core.ports import ProgressEvent
from swegreen.core.results import InstanceResult

STATUS_STYLE = {
    Status.RESOLVED: "green",
    Status.BREAKING_RESOLVED: "yellow",
    Status.PARTIALLY_RESOLVED: "cyan",
    Status.WORK_IN_PROGRESS: "blue",
    Status.REGRESSION: "magenta",
    Status.NO_OP: "white",
    Status.ERROR: "red",
}


def counts_text(counts: dict[str, int]) -> str:
    parts = [
        f"[{STATUS_STYLE[s]}]{s.value} {counts[s.value]}[/]" for s in Status if counts.get(s.value)
    ]
    return "  ".join(parts) or "starting"


class ProgressView:
    """A rich progress bar when attached to a terminal, one line per row otherwise."""

    def __init__(self, console: Console, total: int, title: str, live: bool) -> None:
        self.console = console
        self.live = live and console.is_terminal
        # At 80 columns the count, the rate and the time left must stay: they never wrap
        # or shrink; the title and the per-status counts give way (ellipsis) first.
        fixed = {"no_wrap": True}
        self.progress = Progress(
            TextColumn(
                "[bold]{task.description}",
                table_column=Column(no_wrap=True, overflow="ellipsis", max_width=16),
            ),
            BarColumn(bar_width=16),
            MofNCompleteColumn(table_column=Column(**fixed)),
            TextColumn("{task.fields[rate]}", table_column=Column(**fixed)),
            TimeElapsedColumn(table_column=Column(**fixed)),
            TextColumn("ETA", table_column=Column(**fixed)),
            TimeRemainingColumn(table_column=Column(**fixed)),
            TextColumn(
                "{task.fields[counts]}",
                table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1, min_width=1),
            ),
            console=console,
            transient=False,
            expand=True,
        )
        self.task = self.progress.add_task(title, total=total, counts="starting", rate="")
        self._started = time.monotonic()

    def __enter__(self) -> ProgressView:
        if self.live:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.progress.stop()

    def __call__(self, event: ProgressEvent) -> None:
        if event.kind in ("finished", "skipped"):
            minutes = (time.monotonic() - self._started) / 60
            rate = f"{event.done / minutes:.1f}/min" if minutes > 0 and event.done else ""
            self.progress.update(
                self.task, completed=event.done, counts=counts_text(event.counts), rate=rate
            )
            r = event.result
            if r is not None:
                mark = "(stored) " if event.kind == "skipped" else ""
                self.console.print(
                    Text.assemble(
                        f"  {mark}{r.instance_id}: ",
                        (r.status.value, STATUS_STYLE[r.status]),
                        f" ({r.reason}; F2P {r.f2p_passed}/{r.f2p_total}, "
                        f"P2P {r.p2p_passed}/{r.p2p_total}, {r.durations.total:.1f}s)",
                    ),
                    highlight=False,
                )
        elif event.kind == "note":  # a message may hold anything, brackets included
            self.console.print(
                Text(f"  {event.instance_id}: {event.message}", style="dim"), highlight=False
            )


def leaderboard_table(metrics: RunMetrics, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("status")
    table.add_column("rows", justify="right")
    table.add_column("share [95% interval]", justify="right")
    for status in Status:
        n = metrics.counts.get(status.value, 0)
        share = f"{metrics.share(status):.1%} {as_text(metrics.interval(status))}"
        table.add_row(f"[{STATUS_STYLE[status]}]{status.value}[/]", str(n), share)
    table.add_section()
    table.add_row("total instances", str(metrics.total_instances), "")
    # no rate over rows whose tests never ran: with none run, there is no rate to show
    ran = metrics.tests_ran_instances
    f2p = f"{metrics.f2p_rate:.1%} {as_text(metrics.f2p_interval)}" if ran else "n/a"
    p2p = f"{metrics.p2p_rate:.1%} {as_text(metrics.p2p_interval)}" if ran else "n/a"
    table.add_row("F2P tests passing", f"{metrics.f2p_passed}/{metrics.f2p_total}", f2p)
    table.add_row("P2P tests passing", f"{metrics.p2p_passed}/{metrics.p2p_total}", p2p)
    table.add_row("infrastructure errors", str(metrics.infrastructure_errors), "")
    table.add_row("participant failures", str(metrics.participant_failures), "")
    table.add_row("rows whose tests ran", f"{ran} of {metrics.total_instances}", "")
    table.add_row("P2P kept without running", str(metrics.p2p_passed_unrun), "")
    if metrics.environment_limited:
        table.add_row("environment-limited (base validation)", str(metrics.environment_limited), "")
    rate = metrics.resolved_validated_rate
    if rate is not None and metrics.validated_instances < metrics.total_instances:
        table.add_row(
            "resolved, gold-validated rows",
            f"{metrics.validated_resolved} of {metrics.validated_instances}",
            f"{rate:.1%} {as_text(metrics.resolved_validated_interval)}",
        )
    if metrics.regression_checked:
        table.add_row(
            "resolved with regressions",
            f"{metrics.resolved_with_regressions} of {metrics.regression_checked} checked",
            "",
        )
    methods = metrics.interval_methods()
    table.caption = f"intervals: resolved, {methods['resolved_pct_ci']}; the others, {WILSON}"
    table.caption_justify = "left"
    return table


def error_fixes(results: Sequence[InstanceResult]) -> list[tuple[str, str]]:
    """For each reason of the run's error rows, once: ``to fix:`` (the evaluator's own
    failures) or ``why:`` (a time or memory limit the patch's code ran into), which rows,
    and the first row's own words (its detail names the missing commit, file or
    interpreter and the fix)."""
    by_reason: dict[str, list[InstanceResult]] = {}
    for row in sorted(results, key=lambda r: r.instance_id):
        if row.status is Status.ERROR:
            by_reason.setdefault(row.reason, []).append(row)
    lines: list[tuple[str, str]] = []
    for reason, rows in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        ids = ", ".join(r.instance_id for r in rows[:SHOWN_IDS])
        if len(rows) > SHOWN_IDS:
            ids += f" and {len(rows) - SHOWN_IDS} more"
        said = " ".join(rows[0].detail.split(LOG_TAIL)[0].split())
        if len(said) > FIX_CHARS:
            said = said[: FIX_CHARS - 3] + "..."
        label = "to fix:" if rows[0].error_kind == "infrastructure" else "why:"
        lines.append((label, f"{reason} ({len(rows)}: {ids}): {said}"))
    return lines


SHOWN_IDS = 3
FIX_CHARS = 700
LOG_TAIL = "\n--- log tail ---"


def reasons_line(metrics: RunMetrics) -> str:
    """The reasons in words, with their codes (what results.json and filters use)."""
    return "; ".join(
        f"{v} {REASON_WORDS.get(k, k)} ({k})"
        for k, v in sorted(metrics.reasons.items(), key=lambda kv: -kv[1])
    )


def describe_paths(paths: dict[str, Any]) -> str:
    return "\n".join(f"  {k}: {v}" for k, v in paths.items())
