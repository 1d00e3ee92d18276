"""What an environment view costs, hard-linked (the sandbox has a uid of its own) or
symbolic (it shares the engine's: docs/security.md, "Views for the engine's own uid"),
and the environment seal's walk that the symbolic case adds before each use.

Each figure is the median of ``--rounds`` repetitions over ``--env`` (default: this
interpreter's own prefix, a virtualenv, standing in for a built environment):

    python benchmarks/views.py [--env PREFIX] [--work DIR] [--rounds 5]

``--work``: where the views are made (default: beside the environment; it must be on the
same filesystem, for the hard links), as an engine makes them under its cache.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from swegreen.environments.views import make_view
from swegreen.sandbox import seal


def entries(root: Path) -> int:
    return sum(1 for _ in root.rglob("*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", type=Path, default=Path(sys.prefix))
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    source = args.env.resolve()
    print(f"environment: {source} ({entries(source)} entries)")
    work = args.work or source.parent
    with tempfile.TemporaryDirectory(prefix="swegreen-views-", dir=work) as tmp:
        for links in ("hard", "symbolic"):
            times = []
            for n in range(args.rounds):
                dest = Path(tmp) / f"{links}-{n}"
                start = time.monotonic()
                make_view(source, dest, links=links)  # type: ignore[arg-type]
                times.append(time.monotonic() - start)
                shutil.rmtree(dest)
            print(f"view ({links}): median {statistics.median(times):.3f} s")
        # the seal walks what an environment build keeps under py/: here, the prefix
        holder = Path(tmp) / "env"
        holder.mkdir()
        (holder / seal.ENV_PART).symlink_to(source, target_is_directory=True)
        times = []
        for _ in range(args.rounds):
            start = time.monotonic()
            seal.env_digest(holder)
            times.append(time.monotonic() - start)
        print(f"environment seal, checked: median {statistics.median(times):.3f} s")


if __name__ == "__main__":
    main()
