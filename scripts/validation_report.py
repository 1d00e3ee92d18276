"""Summarise validation runs (gold and empty patches per repository) as markdown tables.

    python scripts/validation_report.py RESULTS_DIR GOLD_RUN[,GOLD_RUN...] EMPTY_RUN[,...] [REPO]

Later runs override earlier ones for the same instance (a re-run after a fix); a run may
also be given as an absolute directory. Prints, per
instance: the gold verdict with F2P/P2P counts, base validation, wall time, and the empty
patch's verdict; then totals.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def load(results: Path, runs: str) -> dict[str, dict]:
    rows: dict[str, dict] = {}
    for run in runs.split(","):
        path = results / run / "instances.jsonl"  # an absolute run directory works too
        found = (
            [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        )
        # each row's own record is its latest (a run resumed or still going)
        found += [
            json.loads(p.read_text())
            for p in sorted((results / run / "instances").glob("*/result.json"))
        ]
        for row in found:
            rows[row["instance_id"]] = {**row, "_run": run}
    return rows


def base(row: dict) -> str:
    bv = row.get("base_validation")
    if not bv:
        return "-"
    if bv.get("ok"):
        return "ok"
    bad = len(bv.get("p2p_failing_on_base", []) or bv.get("p2p_failing", []) or [])
    return f"P2P failing on base: {bad}" if bad else "not ok"


def note(row: dict) -> str:
    """What sets the row apart: how its environment was made, or why it did not resolve."""
    parts = []
    env = row.get("environment") or {}
    if env.get("files_read_at"):
        parts.append("env files at base")
    if env.get("interpreter", {}).get("given_by_user"):
        parts.append(f"given Python {env['interpreter']['python']}")
    taken = env.get("build_sources") or []
    if isinstance(taken, dict):  # rows of an earlier format: what was served to wget
        taken = [{"file": f} for f in taken.get("served_to_wget", [])]
    if taken:
        parts.append("offline sources: " + ", ".join(d["file"] for d in taken))
    if row.get("status") == "error":
        parts.append(row.get("reason", ""))
    return "; ".join(p for p in parts if p)


def main() -> None:
    results, gold_runs, empty_runs = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    gold, empty = load(results, gold_runs), load(results, empty_runs)
    if len(sys.argv) > 4:  # one repository of runs that cover several
        repo = sys.argv[4]
        gold = {k: v for k, v in gold.items() if v.get("repo") == repo}
        empty = {k: v for k, v in empty.items() if v.get("repo") == repo}
    print("| instance | gold | F2P | P2P | base | time | empty | note |")
    print("|---|---|---:|---:|---|---:|---|---|")
    for iid in sorted(set(gold) | set(empty)):
        if iid not in gold:
            print(f"| {iid} | not run | | | | | {empty[iid]['status']} | |")
            continue
        g, e = gold[iid], empty.get(iid, {})
        seconds = g.get("durations", {}).get("total", 0.0)
        print(
            f"| {iid} | {g['status']} | {g['f2p_passed']}/{g['f2p_total']} "
            f"| {g['p2p_passed']}/{g['p2p_total']} | {base(g)} | {seconds:.0f} s "
            f"| {e.get('status', 'not run')} | {note(g)} |"
        )
    resolved = sum(r["status"] == "resolved" for r in gold.values())
    no_op = sum(r["status"] == "no_op" for r in empty.values())
    total = sum(r.get("durations", {}).get("total", 0.0) for r in gold.values())
    print(
        f"\ngold: {resolved}/{len(gold)} resolved; empty: {no_op}/{len(empty)} no_op; "
        f"total gold time {total:.0f} s"
    )


if __name__ == "__main__":
    main()
