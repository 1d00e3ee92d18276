"""A run as one self-contained HTML page: the leaderboard, the status breakdown per
repository, every instance with links to its patch, log and report, and where the time
went. No script, font or image is fetched at view time (inline CSS and SVG), so the file
can be mailed, archived or opened from a CI artifact as it is.

A plain function of the stored run: ``swegreen run`` writes it at the end of a run and
``swegreen report --html`` renders any stored run again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from html import escape
from typing import TYPE_CHECKING

from swegreen.core.classify import Status
from swegreen.core.dataset import public_dataset_name
from swegreen.core.intervals import as_text, wilson
from swegreen.core.metrics import RunMetrics
from swegreen.core.ports import RunRecord
from swegreen.core.results import InstanceResult
from swegreen.stores import artifacts as art

if TYPE_CHECKING:
    from swegreen.core.compare import Comparison

STATUS_ORDER = [
    Status.RESOLVED,
    Status.BREAKING_RESOLVED,
    Status.PARTIALLY_RESOLVED,
    Status.WORK_IN_PROGRESS,
    Status.REGRESSION,
    Status.NO_OP,
    Status.ERROR,
]
COLOURS = {
    Status.RESOLVED: "#1a7f37",
    Status.BREAKING_RESOLVED: "#9a6700",
    Status.PARTIALLY_RESOLVED: "#bf8700",
    Status.WORK_IN_PROGRESS: "#8250df",
    Status.REGRESSION: "#cf222e",
    Status.NO_OP: "#6e7781",
    Status.ERROR: "#a40e26",
}
CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;
max-width:72rem;padding:0 1rem;color:#1f2328}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:2rem}
.meta{color:#656d76}table{border-collapse:collapse;width:100%;margin:.5rem 0}
th,td{border-bottom:1px solid #d0d7de;padding:.3rem .5rem;text-align:left;
vertical-align:top}th{background:#f6f8fa}td.n,th.n{text-align:right}
.status{font-weight:600;white-space:nowrap}.cards{display:flex;flex-wrap:wrap;gap:.6rem}
.card{border:1px solid #d0d7de;border-radius:6px;padding:.5rem .8rem;min-width:8rem}
.note{color:#57606a;font-size:.85rem;margin:.3rem 0}
.card b{display:block;font-size:1.3rem}.bar{display:flex;height:1.1rem;border-radius:4px;
overflow:hidden;margin:.6rem 0}.bar span{display:block}a{color:#0969da}
td:first-child,td.n{white-space:nowrap}.detail{color:#656d76;font-size:.9em;max-width:28rem;overflow-wrap:anywhere}
"""


def render_html(
    record: RunRecord,
    results: Sequence[InstanceResult],
    metrics: RunMetrics,
    exists: Callable[[str, str], bool] | None = None,
    comparison: Comparison | None = None,
) -> str:
    """The page for ``record``; links are relative to the run's directory (where
    ``report.html`` is written beside ``results.json``). ``exists(instance_id, name)``
    says which of a row's files are there to link (a row that never ran its tests has no
    log); without it every file is linked. ``comparison``: this run against another on
    the rows both ran (``swegreen compare A B --html``)."""
    title = f"swegreen run {record.run_id}"
    dataset = public_dataset_name(record.dataset)  # no host paths in what is shared
    state = "finished" if record.state == "finished" else "not finished"
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        '<meta name="viewport" content="width=device-width,initial-scale=1">',
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="meta">{escape(state)} · dataset {escape(dataset)} · patches '
        f"{escape(record.patch_source)} · {len(results)} of {len(record.instance_ids)} "
        f"instances · started {escape(record.created_at)}</p>",
        _leaderboard(metrics),
        _comparison(comparison) if comparison is not None else "",
        _by_repository(results),
        _timing(results),
        _instances(results, exists or (lambda _id, _name: True)),
        "</body></html>",
    ]
    return "\n".join(parts)


def _pct(value: float) -> str:
    return f"{value:.1%}"


def _ci(interval: list[float]) -> str:
    """A 95% interval beside its rate."""
    return " " + as_text(interval)


def _leaderboard(metrics: RunMetrics) -> str:
    row = metrics.result_row("")
    counts = Counter({s: 0 for s in STATUS_ORDER})
    counts.update({Status(k): v for k, v in row["counts"].items()})
    total = max(1, metrics.total_instances)
    ran = metrics.tests_ran_instances
    cards = [
        ("instances", str(metrics.total_instances)),
        ("resolved", _pct(row["resolved_pct"]) + _ci(row["resolved_pct_ci"])),
        # no rate over rows whose tests never ran
        (
            "F2P pass rate",
            _pct(row["fail_to_pass_passed_pct"]) + _ci(row["fail_to_pass_passed_pct_ci"])
            if ran
            else "n/a",
        ),
        (
            "P2P pass rate",
            _pct(row["pass_to_pass_passed_pct"]) + _ci(row["pass_to_pass_passed_pct_ci"])
            if ran
            else "n/a",
        ),
        ("rows whose tests ran", f"{metrics.tests_ran_instances} of {metrics.total_instances}"),
        # counted as kept: those rows' code stayed as it was (docs/results.md)
        ("P2P kept without running", f"{metrics.p2p_passed_unrun} of {metrics.p2p_passed}"),
        ("infrastructure errors", str(metrics.infrastructure_errors)),
        ("participant failures", str(metrics.participant_failures)),
    ]
    validated = row["resolved_pct_validated"]
    if validated is not None and metrics.validated_instances < metrics.total_instances:
        cards.append(
            (
                f"resolved, {metrics.validated_instances} gold-validated rows",
                _pct(validated) + _ci(row["resolved_pct_validated_ci"]),
            )
        )
    if metrics.regression_checked:
        cards.append(
            (
                "resolved with regressions",
                f"{metrics.resolved_with_regressions} of {metrics.regression_checked} checked",
            )
        )
    if metrics.mean_steps_per_resolved is not None:
        cards.append(("steps per resolved", f"{metrics.mean_steps_per_resolved:g}"))
    if metrics.mean_tokens_per_resolved is not None:
        cards.append(("tokens per resolved", f"{metrics.mean_tokens_per_resolved:,.0f}"))
    bar = "".join(
        f'<span style="width:{100 * counts[s] / total:.3f}%;background:{COLOURS[s]}" '
        f'title="{s.value}: {counts[s]}"></span>'
        for s in STATUS_ORDER
        if counts[s]
    )
    lines = "".join(
        f'<tr><td class=status style="color:{COLOURS[s]}">{s.value}</td>'
        f"<td class=n>{counts[s]}</td><td class=n>{_pct(counts[s] / total)}</td></tr>"
        for s in STATUS_ORDER
    )
    methods = row["intervals"]
    said = (
        f"Bracketed: 95% intervals. Resolved: {methods['resolved_pct_ci']}; the other rates: "
        f"{methods['others']}. P2P kept without running: P2P tests of rows whose patch was "
        "empty, did not apply or was refused, counted as passing because the code they test "
        "stayed at the base commit, where they pass by definition (they are shown apart "
        "from the P2P tests that ran)."
    )
    return (
        '<h2 id="leaderboard">Leaderboard</h2><div class=cards>'
        + "".join(f"<div class=card>{escape(k)}<b>{escape(v)}</b></div>" for k, v in cards)
        + f"</div><p class=note>{escape(said)}</p><div class=bar>{bar}</div>"
        + "<table><tr><th>status</th><th class=n>rows</th><th class=n>share</th></tr>"
        + lines
        + "</table>"
    )


def _comparison(c: Comparison) -> str:
    """This run (B) against another (A), as ``swegreen compare`` prints it."""
    low, high = c.interval
    lines = [
        f"<h2>Against run {escape(c.a)}</h2>",
        f"<p>On the {c.rows} rows both ran: resolved {c.b_resolved} here, {c.a_resolved} "
        f"in {escape(c.a)}; difference <b>{c.difference:+.1%}</b>, 95% interval "
        f"[{low:+.1%}, {high:+.1%}] ({escape(c.method)}); McNemar exact p = "
        f"{c.mcnemar_p:.3g}.</p>",
        "<table><tr><th>repository</th><th>rows</th><th>resolved here only</th>"
        "<th>resolved in the other only</th></tr>",
    ]
    for repo, flips in c.by_repo.items():
        lines.append(
            f"<tr><td>{escape(repo)}</td><td class=n>{flips.rows}</td>"
            f"<td>{escape(', '.join(flips.gained)) or '-'}</td>"
            f"<td>{escape(', '.join(flips.lost)) or '-'}</td></tr>"
        )
    lines.append("</table>")
    return "\n".join(lines)


def _by_repository(results: Sequence[InstanceResult]) -> str:
    repos = sorted({r.repo for r in results})
    head = "".join(f"<th class=n>{s.value}</th>" for s in STATUS_ORDER)
    body = []
    for repo in repos:
        mine = [r for r in results if r.repo == repo]
        counts = Counter(r.status for r in mine)
        resolved = counts[Status.RESOLVED]
        rate = _pct(resolved / len(mine)) + _ci(list(wilson(resolved, len(mine))))
        cells = "".join(f"<td class=n>{counts[s] or ''}</td>" for s in STATUS_ORDER)
        body.append(
            f"<tr><td>{escape(repo)}</td><td class=n>{len(mine)}</td>"
            f"<td class=n>{rate}</td>{cells}</tr>"
        )
    return (
        '<h2 id="repositories">By repository</h2><table><tr><th>repository</th>'
        f"<th class=n>rows</th><th class=n>resolved [95% interval]</th>{head}</tr>"
        f"{''.join(body)}</table><p class=note>Per repository: Wilson's score interval.</p>"
    )


def _timing(results: Sequence[InstanceResult]) -> str:
    """A horizontal bar per instance, slowest first: the test command's own time, and the
    rest of the row (setup, patch, the eval script's install, grading)."""
    rows = sorted(results, key=lambda r: -r.durations.total)
    if not rows:
        return ""
    longest = max(r.durations.total for r in rows) or 1.0
    height, label, width = 16, 240, 460
    svg = [
        f'<svg width="{label + width + 60}" '
        f'height="{height * len(rows) + 24}" role="img" aria-label="time per instance">'
    ]
    for k, r in enumerate(rows):
        y = k * height
        total = r.durations.total / longest * width
        tests = min(r.test_command_seconds, r.durations.total) / longest * width
        svg.append(
            f'<text x="{label - 6}" y="{y + 12}" font-size="11" text-anchor="end">'
            f"{escape(r.instance_id)}</text>"
            f'<rect x="{label}" y="{y + 2}" width="{total:.1f}" height="{height - 4}" '
            f'fill="#afb8c1"><title>{escape(r.instance_id)}: {r.durations.total:.1f} s'
            "</title></rect>"
            f'<rect x="{label}" y="{y + 2}" width="{tests:.1f}" height="{height - 4}" '
            f'fill="#0969da"><title>test command: {r.test_command_seconds:.1f} s</title></rect>'
            f'<text x="{label + total + 4:.1f}" y="{y + 12}" font-size="11">'
            f"{r.durations.total:.1f} s</text>"
        )
    y = height * len(rows) + 16
    svg.append(
        f'<rect x="{label}" y="{y - 9}" width="10" height="10" fill="#0969da"/>'
        f'<text x="{label + 14}" y="{y}" font-size="11">test command</text>'
        f'<rect x="{label + 110}" y="{y - 9}" width="10" height="10" fill="#afb8c1"/>'
        f'<text x="{label + 124}" y="{y}" font-size="11">the rest of the row</text></svg>'
    )
    return '<h2 id="timing">Time per instance</h2>' + "".join(svg)


def _regressions(r: InstanceResult) -> str:
    """The regression check's flag under a resolved row's reason (a flag, not a verdict)."""
    check = r.regression_check
    if not check:
        return ""
    if not check.get("ran"):
        return f"<div class=detail>regression check not run: {escape(check.get('why', ''))}</div>"
    if not r.resolved_with_regressions:
        return (
            f"<div class=detail>regression check: none of {check['tests_gold_passes']} "
            "tests gold passes fails</div>"
        )
    shown = ", ".join(check["regressions"][:5])
    more = check["regression_count"] - min(5, len(check["regressions"]))
    return (
        f"<div class=detail>resolved with regressions: {check['regression_count']} test(s) "
        f"gold passes fail: {escape(shown)}" + (f" and {more} more" if more > 0 else "") + "</div>"
    )


SHOWN_FAILING = 5  # failing tests named per list (all are in the row's report.json)


def _failing(r: InstanceResult) -> str:
    """Which listed tests failed, where the verdict rests on them: the P2P tests a patch
    broke, the F2P tests it left failing."""
    parts = []
    for label, tests, shown in (
        ("P2P broken", r.p2p_failing, r.status in BROKE_P2P),
        ("F2P still failing", r.f2p_failing, r.status in PARTIAL_F2P),
    ):
        if shown and tests:
            more = len(tests) - SHOWN_FAILING
            parts.append(
                f"<div class=detail>{label} ({len(tests)}): "
                + escape(", ".join(tests[:SHOWN_FAILING]))
                + (f" and {more} more" if more > 0 else "")
                + "</div>"
            )
    return "".join(parts)


BROKE_P2P = frozenset({Status.BREAKING_RESOLVED, Status.WORK_IN_PROGRESS, Status.REGRESSION})
PARTIAL_F2P = frozenset({Status.PARTIALLY_RESOLVED, Status.WORK_IN_PROGRESS})


def _instances(results: Sequence[InstanceResult], exists: Callable[[str, str], bool]) -> str:
    body = []
    for r in sorted(results, key=lambda r: r.instance_id):
        base = f"instances/{escape(r.instance_id)}/"
        links = " · ".join(
            f'<a href="{base}{name}">{label}</a>'
            for name, label in (
                (art.PATCH, "patch"),
                (art.TEST_OUTPUT, "log"),
                (art.REGRESSION_OUTPUT, "wider log"),
                (art.REPORT, "report"),
                (art.RESULT, "row"),
                (art.TRANSCRIPT, "commands"),
            )
            if exists(r.instance_id, name) and (name != art.TRANSCRIPT or r.interaction)
        )
        body.append(
            f'<tr id="{escape(r.instance_id)}"><td>{escape(r.instance_id)}</td>'
            f'<td class=status style="color:{COLOURS[r.status]}">{r.status.value}</td>'
            f"<td>{escape(r.reason)}"
            + (f"<div class=detail>{escape(r.detail[:300])}</div>" if r.detail else "")
            + (
                f"<div class=detail>{r.interaction.get('steps', 0)} command(s)</div>"
                if r.interaction
                else ""
            )
            + _failing(r)
            + _regressions(r)
            + f"</td><td class=n>{r.f2p_passed}/{r.f2p_total}</td>"
            f"<td class=n>{r.p2p_passed}/{r.p2p_total}</td>"
            f"<td class=n>{r.durations.total:.1f} s</td><td>{links}</td></tr>"
        )
    return (
        '<h2 id="instances">Instances</h2><table><tr><th>instance</th><th>status</th>'
        "<th>reason</th><th class=n>F2P</th><th class=n>P2P</th><th class=n>time</th>"
        f"<th>files</th></tr>{''.join(body)}</table>"
    )
