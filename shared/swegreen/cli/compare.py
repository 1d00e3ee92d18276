"""`swegreen compare`: stored runs on the rows they share."""

from __future__ import annotations

from typing import TYPE_CHECKING

from swegreen.core.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console

    from swegreen.evaluation.engine import LocalSettings

SHOWN = 10  # flipped rows listed per direction (all are counted)


def compare_command(
    run_ids: list[str], settings: LocalSettings, console: Console, html: str | None = None
) -> int:
    from swegreen.cli.report import write_html_report
    from swegreen.core.classify import Status
    from swegreen.core.compare import compare, repeated
    from swegreen.stores.sqlite import SqliteStore

    if len(run_ids) < 2:
        raise ConfigError("compare needs two run ids (or more, for repeated runs)")
    if html and len(run_ids) > 2:
        raise ConfigError(
            "--html PATH names one page: with more than two runs, give --html alone (each "
            "later run's report.html, in its run's directory, gets its section)"
        )
    if not settings.store_path.exists():
        raise ConfigError(f"{settings.output_dir} holds no runs")
    store = SqliteStore(settings.store_path)
    try:
        resolved: list[tuple[str, dict[str, bool]]] = []
        repo_of: dict[str, str] = {}
        reports = {}  # run id -> its record and rows, for its HTML report
        participants: dict[str, set[str]] = {}
        for run_id in run_ids:
            record = store.get_run(run_id)
            if record is None:
                raise ConfigError(f"no run {run_id!r} in {settings.store_path}")
            wanted = set(record.instance_ids)
            rows = {i: r for i, r in store.get_results(run_id).items() if i in wanted}
            repo_of.update({i: r.repo for i, r in rows.items()})
            resolved.append((run_id, {i: r.status is Status.RESOLVED for i, r in rows.items()}))
            reports[run_id] = (record, list(rows.values()))
            participants[run_id] = {r.model_name_or_path or "" for r in rows.values()} - {""}
    finally:
        store.close()
    out = console.print
    a, ra = resolved[0]
    for b, rb in resolved[1:]:
        c = compare(a, b, ra, rb, repo_of)
        if c.rows == 0:
            raise ConfigError(f"runs {a!r} and {b!r} share no rows: nothing to compare")
        out(f"{b} against {a} on the {c.rows} rows both ran", markup=False)
        if c.only_a or c.only_b:
            out(
                f"  (left out: {c.only_a} rows only {a} ran, {c.only_b} only {b} ran)",
                markup=False,
            )
        out(
            f"  resolved: {a} {c.a_resolved} ({c.a_resolved / c.rows:.1%}), "
            f"{b} {c.b_resolved} ({c.b_resolved / c.rows:.1%})",
            markup=False,
        )
        low, high = c.interval
        out(
            f"  difference ({b} - {a}): {c.difference:+.1%}, 95% interval [{low:+.1%}, "
            f"{high:+.1%}] ({c.method}); McNemar exact p = {c.mcnemar_p:.3g}",
            markup=False,
        )
        for label, ids in ((f"resolved by {b} only", c.gained), (f"resolved by {a} only", c.lost)):
            listed = ", ".join(ids[:SHOWN]) + (
                f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else ""
            )
            out(f"  {label}: {len(ids)}" + (f": {listed}" if ids else ""), markup=False)
        out("  per repository (rows, gained, lost):", markup=False)
        for repo, flips in c.by_repo.items():
            out(f"    {repo}: {flips.rows}, +{len(flips.gained)}, -{len(flips.lost)}", markup=False)
        if html is not None:
            write_html_report(*reports[b], settings, html, console, comparison=c)
    # repeated runs of one participant: every run's rows name the same model
    names = set.union(*participants.values())
    if len(names) != 1 or any(p != names for p in participants.values()):
        shown = ", ".join(sorted(names)[:4]) or "none named"
        out(
            f"(pass@k and pass^k are for repeated runs of one participant; these runs' rows "
            f"name different ones: {shown})",
            markup=False,
        )
        return 0
    r = repeated(resolved)
    k = len(r.runs)
    out(
        f"as {k} runs of one participant ({next(iter(names))}), on the {r.rows} rows all "
        f"ran: mean resolved {r.mean:.1%} (sd {r.stdev:.1%}; runs "
        f"{', '.join(f'{x:.1%}' for x in r.rates)})",
        markup=False,
    )
    out(
        "  " + ", ".join(f"pass@{n} {r.pass_at_k[n]:.1%}" for n in r.pass_at_k)
        + "; " + ", ".join(f"pass^{n} {r.pass_all_k[n]:.1%}" for n in r.pass_all_k),
        markup=False,
    )  # fmt: skip
    return 0
