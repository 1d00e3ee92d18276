"""The whole command line on warm rows, against the test command it exists to run.

    python benchmarks/warm_cli.py --cache-dir DIR --dataset FILE \\
        --repo-url-template '/mirrors/{owner}+{name}/repo' --instance ID [--instance ID ...]

For each instance: one run to warm its environment and prepared workspace (if the cache
lacks them), then ``--rounds`` runs of ``swegreen run --patches gold`` under new run ids.
Per instance, medians: the CLI's wall time; the row's own time (``durations.total``);
its test command (``test_command_seconds``); the engine's share (row - test command); the
CLI's share around the row (CLI - row); the CLI's start (from the process's start to its
"Run ..." line, printed when its imports are done, the dataset is loaded and the rows are
chosen); and CLI / test command. ``--settle`` runs each command alone: it first waits
for the deletion the previous one left beside it (reported as the median wait).
``--phases`` adds the engine's share split by phase
(the row's ``durations``): setup (the prepared workspace's seal check, the copy-on-write
mount, the environment view), apply, and the sandbox around the test command (its launch,
upstream's git steps, the test files' checkout; the tests phase less the test command).
Compiles the package's bytecode first, as an installed package has it. Prints a markdown
table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import swegreen
from swegreen.evaluation.trash import TRASH


def settle(cache_dir: str, limit: float = 300.0) -> float:
    """Wait until what earlier runs left to delete beside them (``evaluation/trash.py``:
    a detached ``rm`` the command line does not wait for) is gone; returns the wait. A
    command run by itself does not compete with the previous one's deletion; back to back,
    it does."""
    trash = Path(cache_dir) / "work" / TRASH  # the engine's work root in the cache
    started = time.perf_counter()
    while trash.is_dir() and any(trash.iterdir()):
        if time.perf_counter() - started > limit:
            raise SystemExit(f"{trash} still holds files after {limit:g} s")
        time.sleep(0.05)
    return time.perf_counter() - started


def run_once(args: argparse.Namespace, instance: str, out: Path) -> tuple[float, dict]:
    waited = settle(args.cache_dir) if args.settle else 0.0
    run_id = f"warm-{uuid.uuid4().hex[:8]}"
    argv = [
        sys.executable, "-m", "swegreen", "run", "--dataset", args.dataset,
        "--instance-ids", instance, "--patches", "gold", "--run-id", run_id,
        "--repo-url-template", args.repo_url_template, "--cache-dir", args.cache_dir,
        "--output-dir", str(out), "--no-progress", *args.extra,
    ]  # fmt: skip
    started = time.perf_counter()
    start = None
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if start is None and line.startswith(b"Run "):  # printed as the rows begin
                start = time.perf_counter() - started
    wall = time.perf_counter() - started
    row = json.loads((out / run_id / "instances.jsonl").read_text().splitlines()[0])
    row["cli_start"] = start if start is not None else float("nan")
    row["settled"] = waited
    return wall, row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--repo-url-template", required=True)
    ap.add_argument("--instance", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--extra", nargs="*", default=["--env-files-at-base"], help="more flags")
    ap.add_argument("--phases", action="store_true", help="split the engine's share")
    ap.add_argument(
        "--settle",
        action="store_true",
        help="before each run, wait for the previous one's deletion (a command run alone)",
    )
    args = ap.parse_args()
    # The bytecode an installed package has: a shell with PYTHONDONTWRITEBYTECODE set
    # would otherwise compile every changed module in every measured command.
    compileall.compile_dir(Path(swegreen.__file__).parent, quiet=1)
    machine = f"{platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    waits: list[float] = []
    print(f"Machine: {machine}; median of {args.rounds} warm runs each\n")
    phases = " setup (s) | apply (s) | sandbox around the test (s) |" if args.phases else ""
    print(
        "| instance | verdict | CLI (s) | row (s) | test command (s) | engine: row - test (s) "
        f"|{phases} CLI around the row (s) | CLI start (s) | CLI / test command |"
    )
    print("|---|---|" + "---:|" * (10 if args.phases else 7))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for instance in args.instance:
            run_once(args, instance, out)  # warm-up
            walls, rows, tests, starts, split = [], [], [], [], []
            for _ in range(args.rounds):
                wall, row = run_once(args, instance, out)
                walls.append(wall)
                took = row["durations"]
                rows.append(took["total"])
                tests.append(row["test_command_seconds"])
                starts.append(row["cli_start"])
                waits.append(row["settled"])
                split.append((took["setup"], took["apply"], took["tests"] - tests[-1]))
            cli, own, test, start = (statistics.median(x) for x in (walls, rows, tests, starts))
            shares = "".join(f" {statistics.median(s[i] for s in split):.2f} |" for i in range(3))
            print(
                f"| {instance} | {row['status']} | {cli:.2f} | {own:.2f} | {test:.2f} "
                f"| {own - test:.2f} |{shares if args.phases else ''} {cli - own:.2f} "
                f"| {start:.2f} | {cli / test:.2f}x |"
            )
    if args.settle:
        print(f"\nMedian wait for the previous run's deletion: {statistics.median(waits):.2f} s")


if __name__ == "__main__":
    main()
