"""How long the command line takes to answer when it does no work: ``--version``,
``--help`` and a bad flag (the cost of its imports), median of several runs.

    python benchmarks/cli_start.py

Prints a markdown table (docs/benchmarks.md keeps the latest, with the date).
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time

COMMANDS = [
    ["--version"],
    ["--help"],
    ["run", "--help"],
    ["run", "--no-such-flag"],
]


def measure(args: list[str], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "swegreen", *args], capture_output=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    baseline = statistics.median(_time([sys.executable, "-c", "pass"]) for _ in range(rounds))
    machine = f"{platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"Machine: {machine}; median of {rounds} runs\n")
    print("| command | wall (s) |\n|---|---:|")
    print(f"| `python -c pass` (the interpreter alone) | {baseline:.2f} |")
    for args in COMMANDS:
        print(f"| `swegreen {' '.join(args)}` | {measure(args, rounds):.2f} |")


def _time(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, capture_output=True)
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
