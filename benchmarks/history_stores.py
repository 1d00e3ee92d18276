"""What history stores cost on a real repository: time and disk for its Verified bases.

Builds the stores (``swegreen.repositories.history``) of every Verified base commit of
``--repo`` (or the first ``--bases``) from a local bare mirror into a fresh directory, one
base after the other as an engine would, and prints per base the seconds it took and the chain it
borrows from, then the whole directory's size against the mirror's (what a per-instance
copy of the history, as upstream's images hold, would cost instead).

    python benchmarks/history_stores.py --repo sympy/sympy \\
        --mirror /mirrors/sympy+sympy/repo --dataset ../shared/data/swebench_verified.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from swegreen.repositories.history import HistoryStores
from swegreen.repositories.repo_cache import git_env


def du(path: Path) -> int:
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


async def build(repo: str, mirror: Path, bases: list[str], root: Path) -> list[float]:
    stores = HistoryStores(root, git_env(root / ".home"))
    seconds = []
    for base in bases:
        start = time.perf_counter()
        cut = await stores.cut(repo, mirror, base)
        seconds.append(time.perf_counter() - start)
        print(f"| {base[:10]} | {seconds[-1]:.2f} | {len(cut.objects)} | {len(cut.tags)} |")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", required=True)
    parser.add_argument("--mirror", type=Path, required=True, help="a bare clone of it")
    parser.add_argument("--dataset", type=Path, required=True, help="Verified as JSONL")
    parser.add_argument("--bases", type=int, default=0, help="only the first N (0: all)")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.dataset.read_text().splitlines() if line]
    bases = list(dict.fromkeys(r["base_commit"] for r in rows if r["repo"] == args.repo))
    bases = bases[: args.bases] if args.bases else bases
    root = Path(tempfile.mkdtemp(prefix="history-bench-"))
    try:
        print(f"{args.repo}: {len(bases)} base commits\n")
        print("| base | seconds | stores in its chain | tags |\n|---|---:|---:|---:|")
        seconds = asyncio.run(build(args.repo, args.mirror, bases, root))
        size, mirror = du(root), du(args.mirror)
        per_base = mirror * len(bases)
        later = statistics.median(seconds[1:] or [0])
        print(
            f"\nfirst base {seconds[0]:.1f} s, then median {later:.2f}"
            f" s per base; stores {size / 1e6:.0f} MB for {len(bases)} bases, the mirror"
            f" {mirror / 1e6:.0f} MB (a copy per base: {per_base / 1e9:.1f} GB)"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
