"""Measure the AWS build phase's artifacts on real instances: their compressed size, and
how long an evaluate task takes to unpack what one row starts from.

For each prepared workspace in a local cache (one made by ``swegreen run`` or
benchmarks/overhead.py, with ``--cache-dir``), the artifacts are packed as the build
phase packs them (swegreen.aws.prebuilt: the repository's mirror, the environment, the
prepared workspace with its hard links into the environment left out) and unpacked into
an empty directory in the evaluate task's order. The figures feed benchmarks/aws_cost.py
(``--row-start-seconds``).

    python benchmarks/artifacts.py --cache-dir /work/validation/bench-cache

Prints a markdown table (docs/aws.md keeps the latest, with its date and machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from swegreen.aws import prebuilt


@dataclass
class Row:
    instance_id: str
    sizes_mb: dict[str, float]  # artifact -> compressed MB
    unpack_seconds: float

    @property
    def total_mb(self) -> float:
        return sum(self.sizes_mb.values())


def measure(cache: Path, workspace: Path, scratch: Path) -> Row:
    info = json.loads((workspace / "prepared.json").read_text())
    instance_id = workspace.name.rsplit(".", 1)[0]
    mirrors = sorted((cache / "repos").glob("*.git"))
    # The instance's repository is the mirror whose name prefixes the instance id.
    owner_name = instance_id.rsplit("-", 1)[0]
    mirror = next(m for m in mirrors if m.name == f"{owner_name}.git")
    parts = {
        "repo": [mirror.relative_to(cache).as_posix()],
        "env": [f"envs/{info['env_key']}"],
        "prepared": [workspace.relative_to(cache).as_posix()],
    }
    archives = {}
    sizes = {}
    for name, paths in parts.items():
        archive = scratch / f"{name}.tar.zst"
        prebuilt.pack(cache, paths, archive)
        archives[name] = archive
        sizes[name] = archive.stat().st_size / 1e6
    target = scratch / "task-cache"
    started = time.perf_counter()
    for name in ("repo", "env", "prepared"):  # the evaluate task's order
        prebuilt.unpack(archives[name], target)
    seconds = time.perf_counter() - started
    shutil.rmtree(target)
    for archive in archives.values():
        archive.unlink()
    return Row(instance_id, sizes, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, required=True, help="a local swegreen cache")
    parser.add_argument("--instance", action="append", default=[], help="only these (repeatable)")
    args = parser.parse_args()
    cache = args.cache_dir.resolve()
    workspaces = sorted(p for p in (cache / "prepared").iterdir() if (p / "prepared.json").exists())
    if args.instance:
        workspaces = [w for w in workspaces if w.name.rsplit(".", 1)[0] in args.instance]
    if not workspaces:
        parser.error(f"no prepared workspace under {cache / 'prepared'}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="swegreen-artifacts-") as tmp:
        for workspace in workspaces:
            rows.append(measure(cache, workspace, Path(tmp)))
            print(f"measured {rows[-1].instance_id}", flush=True)
    machine = f"{platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"\nMachine: {machine}\n")
    print(
        "| instance | mirror (MB) | environment (MB) | prepared workspace (MB) "
        "| a row downloads (MB) | unpack (s) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        s = r.sizes_mb
        print(
            f"| {r.instance_id} | {s['repo']:.0f} | {s['env']:.0f} | {s['prepared']:.0f} "
            f"| {r.total_mb:.0f} | {r.unpack_seconds:.1f} |"
        )
    print(
        f"| **median** | | | | **{statistics.median(r.total_mb for r in rows):.0f}** "
        f"| **{statistics.median(r.unpack_seconds for r in rows):.1f}** |"
    )


if __name__ == "__main__":
    main()
