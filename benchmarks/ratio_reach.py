"""Which rows a fixed cost per row keeps within a ratio of their test command.

    python benchmarks/ratio_reach.py --fixed 0.85 [--target 1.5] RUN_DIR [RUN_DIR ...]

A warm row costs its test command plus a fixed part (the command line around the row and
the engine's share: ``benchmarks/warm_cli.py``), so ``CLI / test command`` is within
``target`` exactly when the test command takes at least ``fixed / (target - 1)``. For the
resolved rows of each run (``RUN_DIR/instances.jsonl``, their ``test_command_seconds``),
per repository: how many rows, their test commands' quartiles, and how many are long
enough. Prints a markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders (holding instances.jsonl)")
    ap.add_argument("--fixed", type=float, required=True, help="seconds a warm row adds")
    ap.add_argument("--target", type=float, default=1.5, help="CLI / test command wanted")
    args = ap.parse_args()
    if args.target <= 1:
        ap.error("--target must be above 1: no row runs in less than its test command")
    floor = args.fixed / (args.target - 1)
    times: dict[str, list[float]] = defaultdict(list)
    for run in args.runs:
        for line in (run / "instances.jsonl").read_text().splitlines():
            row = json.loads(line)
            if row["status"] == "resolved" and row.get("test_command_seconds"):
                repo = row["instance_id"].split("__")[1].rsplit("-", 1)[0]  # psf__requests-1
                times[repo].append(row["test_command_seconds"])
    print(
        f"Fixed cost {args.fixed:.2f} s per warm row: within {args.target:g}x from a test "
        f"command of {floor:.2f} s\n"
    )
    print("| repository | rows | test command p25 / median / p75 (s) | within | share |")
    print("|---|---:|---|---:|---:|")
    every: list[float] = []
    for repo, values in sorted(times.items()):
        every += values
        within = sum(t >= floor for t in values)
        spread = " / ".join(f"{quantile(values, q):.2f}" for q in (0.25, 0.5, 0.75))
        print(f"| {repo} | {len(values)} | {spread} | {within} | {within / len(values):.0%} |")
    if every:
        within = sum(t >= floor for t in every)
        print(
            f"| all | {len(every)} | median {statistics.median(every):.2f} | {within} "
            f"| {within / len(every):.0%} |"
        )


if __name__ == "__main__":
    main()
