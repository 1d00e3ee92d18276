"""`swegreen report`: a stored run's leaderboard (and HTML report), or the list of runs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from swegreen.core.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console

    from swegreen.core.compare import Comparison
    from swegreen.core.ports import RunRecord
    from swegreen.core.results import InstanceResult
    from swegreen.evaluation.engine import LocalSettings


def report(
    run_id: str | None,
    settings: LocalSettings,
    env: dict[str, str],
    console: Console,
    html: str | None = None,
) -> int:
    from swegreen.core.metrics import RunMetrics
    from swegreen.reports.console import leaderboard_table, reasons_line
    from swegreen.stores.sqlite import SqliteStore

    if not settings.store_path.exists():  # nothing to show, and nothing made to show it
        if run_id is not None:
            raise ConfigError(f"no run {run_id!r}: {settings.output_dir} holds no runs")
        console.print(
            f"no runs in {settings.output_dir} (start one: swegreen run --sample --patches gold)",
            markup=False,
        )
        return 0
    store = SqliteStore(settings.store_path)
    try:
        if run_id is None:
            for rec in store.list_runs():
                if rec.state == "finished":
                    total = (rec.summary or {}).get("total_instances", "?")
                    resolved = (rec.summary or {}).get("resolved_pct")
                    share = f"{resolved:.1%}" if isinstance(resolved, float) else "-"
                    line = f"{rec.run_id}  finished  {rec.patch_source}  {total} rows  "
                    line += f"resolved {share}"
                else:  # killed, or still running in another process
                    done = len(set(store.get_results(rec.run_id)) & set(rec.instance_ids))
                    line = f"{rec.run_id}  not finished  {rec.patch_source}  {done} of "
                    line += f"{len(rec.instance_ids)} rows stored  {resume_hint(rec)}"
                console.print(line, markup=False)
            return 0
        record = store.get_run(run_id)
        if record is None:
            raise ConfigError(f"no run {run_id!r} in {settings.store_path}")
        results = [r for i, r in store.get_results(run_id).items() if i in set(record.instance_ids)]
        metrics = RunMetrics.from_results(results)
        state = record.state if record.state == "finished" else "not finished"
        console.print(leaderboard_table(metrics, f"Leaderboard: {run_id} ({state})"))
        console.print(f"reasons: {reasons_line(metrics)}", markup=False)
        if record.state != "finished":
            console.print(
                f"{len(results)} of {len(record.instance_ids)} rows stored; " + resume_hint(record),
                markup=False,
            )
        if html is not None:
            write_html_report(record, results, settings, html, console)
        return 0
    finally:
        store.close()


def resume_hint(record: RunRecord) -> str:
    """How to finish a run that did not (a kill leaves it so; its rows are kept)."""
    if record.patch_source.startswith("a2a:"):
        return "resume: send the same assessment to the green agent again"
    if record.local_config is not None:  # the run knows its patches and selection
        return f"resume: swegreen run --run-id {record.run_id}"
    patches = record.patch_source
    if patches.startswith("predictions:"):  # --patches takes the file's path
        patches = record.patches_path or f"<the path of {patches.split(':', 1)[1]}>"
    return (
        f"resume: swegreen run --run-id {record.run_id} --patches {shlex.quote(patches)} "
        "(with the dataset and selection flags it was started with)"
    )


COMPARISON = "comparison.json"  # `compare --html`'s section, kept with run B


def write_html_report(
    record: RunRecord,
    results: list[InstanceResult],
    settings: LocalSettings,
    html: str,
    console: Console,
    comparison: Comparison | None = None,
) -> None:
    """A stored run's report.html (``html``: a path, or "" for the run's directory),
    with a section against another run when ``comparison`` is given; prints where."""
    from swegreen.core.compare import Comparison
    from swegreen.core.metrics import RunMetrics
    from swegreen.reports.html import render_html
    from swegreen.stores.artifacts import REPORT_HTML, atomic_write

    run_dir = settings.output_dir / record.run_id
    target = Path(html) if html else run_dir / REPORT_HTML
    target.parent.mkdir(parents=True, exist_ok=True)
    # the section against another run is kept beside the run, and rendered again with it
    kept = run_dir / COMPARISON
    if comparison is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(kept, json.dumps(comparison.to_json(), indent=1).encode())
    elif kept.is_file():
        comparison = Comparison.from_json(json.loads(kept.read_text()))
    page = render_html(
        record,
        results,
        RunMetrics.from_results(results),
        lambda iid, name: (run_dir / "instances" / iid / name).exists(),
        comparison=comparison,
    )
    atomic_write(target, page.encode())
    console.print(f"HTML report: {target}", markup=False)
