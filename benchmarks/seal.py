"""What the prepared workspace's seal costs (sandbox/seal.py): the check every reuse pays.

For each prepared workspace in a cache (one made by ``swegreen run --cache-dir``), the
seal's digest is taken ``--rounds`` times (the directory walk of its checkout and its
environment view, no file read); prints a markdown table of entries and the median time
(docs/benchmarks.md keeps the latest, with its date and machine).

    python benchmarks/seal.py --cache-dir /work/validation/cache [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

from swegreen.sandbox import seal


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    roots = sorted(p for p in (args.cache_dir / "prepared").iterdir() if (p / "repo").is_dir())
    if not roots:
        raise SystemExit(f"no prepared workspace under {args.cache_dir / 'prepared'}")
    print(f"{time.strftime('%Y-%m-%d')}, {platform.node()}, {os.cpu_count()} cores")
    print("\n| prepared workspace | entries | seal check (median) |\n|---|---:|---:|")
    for root in roots:
        times, count = [], 0
        for _ in range(args.rounds):
            start = time.perf_counter()
            _, count = seal.digest(root)
            times.append(time.perf_counter() - start)
        print(f"| {root.name} | {count} | {statistics.median(times):.3f} s |")


if __name__ == "__main__":
    main()
