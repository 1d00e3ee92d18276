"""What getting an interpreter from conda packages costs: for each version, the time of a
fresh install (solve, download, hash check, link) into an empty pythons directory, and
the disk it takes (the prefix, and the package cache beside it).

    python benchmarks/pythons.py [--channels URL[,URL]] [--stand-in] [VERSION ...]

``--channels``: default the official ones (SWE-bench's images' own). ``--stand-in``: a
channel served on 127.0.0.1 of this machine's pyenv builds packaged as conda-build
packages CPython (tests/conda_channel.py), where conda's channels are out of reach (this
machine): the figures are then this machine's packaging and a loopback download, not
conda's archives over the internet.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from swegreen.environments.conda_pythons import (  # noqa: E402
    OFFICIAL_CHANNELS,
    VERIFIED_VERSIONS,
    CondaPythons,
)


def size(root: Path) -> int:
    """Bytes under ``root``, each inode once (the prefix hard-links the package cache)."""
    seen: set[int] = set()
    total = 0
    for path in root.rglob("*"):
        st = path.lstat()
        if st.st_ino not in seen and not path.is_dir():
            seen.add(st.st_ino)
            total += st.st_size
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--channels", default=",".join(OFFICIAL_CHANNELS))
    parser.add_argument("--stand-in", action="store_true")
    parser.add_argument("versions", nargs="*", default=list(VERIFIED_VERSIONS))
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        channels = tuple(c for c in args.channels.split(",") if c)
        versions = args.versions
        if args.stand_in:
            from tests.conda_channel import index, package_python, pyenv_tree, served

            trees = {v: pyenv_tree(v) for v in versions}
            versions = [v for v, tree in trees.items() if tree is not None]
            for v in versions:
                package_python(trees[v], work / "channel")  # type: ignore[arg-type]
            index(work / "channel")
            channels = (stack.enter_context(served(work / "channel")),)
        print(f"channels: {', '.join(channels)}")
        print("| version | package | install | prefix | with the package cache |")
        print("|---|---|---|---|---|")
        for version in versions:
            pythons = CondaPythons(work / version, channels)
            start = time.monotonic()
            asyncio.run(pythons.install(version))
            seconds = time.monotonic() - start
            mark = pythons.provenance(version) or {}
            prefix = size(pythons.prefix(version)) / 1e6
            whole = size(work / version) / 1e6
            print(
                f"| {mark.get('version')} | {mark.get('package')} | {seconds:.1f} s "
                f"| {prefix:.0f} MB | {whole:.0f} MB |"
            )


if __name__ == "__main__":
    main()
