"""What each integrity defence costs, in time (docs/security.md keeps the figures).

Each figure is the median of ``--rounds`` repetitions:
  * a sandboxed run of an empty script, under bubblewrap, Landlock (where the kernel has
    it) and in ``process`` mode (every evaluation pays it twice: the prepare and the test
    phase);
  * whole evaluations of the sample with gold patches (warm caches) in each mode: the
    difference is what the sandbox costs an evaluation; all pay the two phases, the
    guard's git checks and the pytest recorder.

    python benchmarks/integrity_cost.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from swegreen.core.config import EvalConfig
from swegreen.core.dataset import load_dataset, select_instances
from swegreen.core.sources import GoldPatches
from swegreen.evaluation.engine import LocalSettings, build_engine
from swegreen.evaluation.settings import host_environment
from swegreen.sample import build_sample
from swegreen.sandbox import confine
from swegreen.sandbox.isolation import Isolation, Mounts, SandboxPolicy
from swegreen.sandbox.local import LocalSandbox


def median_time(fn: Callable[[], Awaitable[object]], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        asyncio.run(fn())  # type: ignore[arg-type]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def empty_run(iso: Isolation, work: Path) -> Callable[[], Awaitable[object]]:
    script = work.parent / "empty.sh"
    script.write_text("true\n")
    sandbox = LocalSandbox(iso)
    sandbox.lend([work])

    async def go() -> object:
        return await sandbox.run_script(
            script,
            cwd=work,
            env={"PATH": "/usr/bin:/bin"},
            policy=SandboxPolicy(timeout=60),
            log_path=work.parent / "empty.log",
            mounts=Mounts(writable=(work,)),
        )

    return go


def evaluate(root: Path, mode: str, rounds: int) -> float:
    sample = build_sample(root / "sample")
    config = EvalConfig(
        dataset=str(sample.dataset),
        repo_url_template=sample.url_template,
        max_rows=-1,
        isolation=mode,  # type: ignore[arg-type]
    )
    settings = LocalSettings(output_dir=root / f"out-{mode}", cache_dir=root / "cache")
    dataset = load_dataset(config.dataset)
    instances = select_instances(dataset, config.selection())
    walls = []
    for k in range(rounds + 1):  # the first run builds the environment: not counted
        engine = build_engine(settings, config, host_environment())
        start = time.perf_counter()
        try:
            outcome = asyncio.run(
                engine.runner.run(
                    run_id=f"{mode}-{k}",
                    dataset=dataset,
                    instances=instances,
                    source=GoldPatches(),
                    config=config,
                )
            )
        finally:
            engine.close()
        if k:
            walls.append((time.perf_counter() - start) / len(outcome.results))
    return statistics.median(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="swegreen-integrity-", dir="/tmp"))
    root.chmod(0o711)
    try:
        work = root / "work"
        work.mkdir()
        modes = ["bwrap", *(["landlock"] if confine.abi() else []), "process"]
        rows = []
        for mode in modes:
            took = median_time(empty_run(Isolation.probe(mode), work), args.rounds)  # type: ignore[arg-type]
            rows.append((f"empty sandboxed run, {mode}", took))
        for mode in modes:
            rows.append(
                (f"gold evaluation per sample instance, {mode}", evaluate(root, mode, args.rounds))
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    machine = f"{platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"\nMachine: {machine}\n\n| what | seconds (median) |\n|---|---|")
    for label, seconds in rows:
        print(f"| {label} | {seconds:.3f} |")


if __name__ == "__main__":
    main()
