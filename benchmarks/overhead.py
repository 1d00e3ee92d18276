"""Measure the engine's own cost per evaluated instance.

For the sample benchmark (unless --skip-sample), as a set:
  * cold build: a fresh cache, first evaluation (environment and prepared workspace);
  * warm evaluation: caches filled, wall time per instance, and the time spent inside
    the test command itself (read from the eval script's clock stamps);
  * overhead = warm wall time - test command time, and the ratio of the two,
    at concurrency 1 and 2.

For real instances (--instance), one line each: the build its first evaluation paid
for, and its best warm evaluation (the whole row: workspace copy, patch, eval script with
its install, grading) against its test command, at concurrency 1, with issue 9's target
(within 1.2x of a test command over 10 s, else under 3 s of overhead).

    python benchmarks/overhead.py                      # the sample benchmark
    python benchmarks/overhead.py --dataset ../shared/data/swebench_verified.jsonl \\
        --instance psf__requests-2931 --repo-url-template '/mirrors/{owner}+{name}/repo'

Prints markdown tables (paste them into docs/benchmarks.md with the date and machine).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from swegreen.core.config import EvalConfig
from swegreen.core.dataset import load_dataset, select_instances
from swegreen.core.sources import GoldPatches
from swegreen.evaluation.engine import LocalSettings, build_engine
from swegreen.evaluation.runner import RunOutcome
from swegreen.evaluation.settings import host_environment
from swegreen.sample import build_sample


@dataclass
class Measure:
    label: str
    concurrency: int
    rows: int
    wall: float
    test_seconds: float
    cold_build: float | None = None

    @property
    def per_instance(self) -> float:
        return self.wall * self.concurrency / self.rows

    @property
    def test_per_instance(self) -> float:
        return self.test_seconds / self.rows

    @property
    def overhead(self) -> float:
        return self.per_instance - self.test_per_instance

    @property
    def ratio(self) -> float:
        return (
            self.per_instance / self.test_per_instance if self.test_per_instance else float("nan")
        )


def run_once(settings: LocalSettings, config: EvalConfig, run_id: str) -> tuple[RunOutcome, float]:
    dataset = load_dataset(config.dataset)
    instances = select_instances(dataset, config.selection())
    engine = build_engine(settings, config, host_environment())
    try:
        start = time.monotonic()
        outcome = asyncio.run(
            engine.runner.run(
                run_id=run_id,
                dataset=dataset,
                instances=instances,
                source=GoldPatches(),
                config=config,
            )
        )
        return outcome, time.monotonic() - start
    finally:
        engine.close()


def measure(label: str, base: EvalConfig, cache: Path, out: Path, rounds: int) -> list[Measure]:
    settings = LocalSettings(output_dir=out, cache_dir=cache)
    cold_cfg = base.model_copy(update={"max_concurrent_rows": 1})
    first, _ = run_once(settings, cold_cfg, f"{label}-cold")
    unresolved = [r.instance_id for r in first.results if r.status.value != "resolved"]
    if unresolved:
        print(f"warning: {label}: not resolved with gold patches: {', '.join(unresolved)}")
    # the build a cold cache pays: environment and prepared workspace (0 if already cached)
    cold = max((r.durations.env_build for r in first.results), default=0.0)
    results = []
    for concurrency in (1, 2):
        cfg = base.model_copy(update={"max_concurrent_rows": concurrency})
        walls, tests = [], []
        for k in range(rounds):
            outcome, wall = run_once(settings, cfg, f"{label}-c{concurrency}-{k}")
            walls.append(wall)
            tests.append(sum(r.test_command_seconds for r in outcome.results))
        best = min(range(rounds), key=lambda i: walls[i])
        results.append(
            Measure(
                label, concurrency, len(first.results), walls[best], tests[best], cold_build=cold
            )
        )
    return results


@dataclass
class InstanceMeasure:
    instance_id: str
    cold_build: float
    warm: float  # the row's whole evaluation, best of the rounds
    test_seconds: float
    script_seconds: float  # the eval script's wall time (upstream's install included)

    @property
    def upstream(self) -> float:
        """What the eval script itself does besides the tests (the recipe's install, git)."""
        return self.script_seconds - self.test_seconds

    @property
    def engine(self) -> float:
        """The rest: workspace copy, patch, grading, bookkeeping."""
        return self.warm - self.script_seconds

    @property
    def overhead(self) -> float:
        return self.warm - self.test_seconds

    @property
    def ratio(self) -> float:
        return self.warm / self.test_seconds if self.test_seconds else float("nan")

    @property
    def target_met(self) -> bool:
        if self.test_seconds > 10:
            return self.ratio <= 1.2
        return self.overhead < 3


def measure_instances(
    label: str, base: EvalConfig, cache: Path, out: Path, rounds: int, compile_cache: bool
) -> list[InstanceMeasure]:
    settings = LocalSettings(output_dir=out, cache_dir=cache, compile_cache=compile_cache)
    cfg = base.model_copy(update={"max_concurrent_rows": 1})
    first, _ = run_once(settings, cfg, f"{label}-cold")
    cold = {r.instance_id: r.durations.env_build for r in first.results}
    warm: dict[str, tuple[float, float, float]] = {}
    for k in range(rounds):
        outcome, _ = run_once(settings, cfg, f"{label}-warm-{k}")
        for r in outcome.results:
            if r.status.value != "resolved":
                print(f"warning: {label}: {r.instance_id} is {r.status.value} ({r.reason})")
            best = warm.get(r.instance_id)
            if best is None or r.durations.total < best[0]:
                warm[r.instance_id] = (
                    r.durations.total,
                    r.test_command_seconds,
                    r.durations.tests,
                )
    return [
        InstanceMeasure(i, cold.get(i, 0.0), total, test, script)
        for i, (total, test, script) in sorted(warm.items())
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", help="a dataset with the real instances to measure")
    parser.add_argument("--instance", action="append", default=[], help="instance id (repeatable)")
    parser.add_argument("--repo-url-template")
    parser.add_argument(
        "--rounds", type=int, default=3, help="warm runs per concurrency (best kept)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary caches")
    parser.add_argument(
        "--cache-dir", type=Path, help="cache for the real instances (default: a fresh one)"
    )
    parser.add_argument("--label", default="real", help="the real set's name in the table")
    parser.add_argument("--skip-sample", action="store_true", help="measure the real set only")
    parser.add_argument(
        "--no-compile-cache", action="store_true", help="compile in every evaluation (to compare)"
    )
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="swegreen-bench-"))
    root.chmod(0o711)  # the sandbox's uid passes through to the caches below
    rows: list[Measure] = []
    instances: list[InstanceMeasure] = []
    try:
        if not args.skip_sample:
            sample = build_sample(root / "sample")
            cfg = EvalConfig(
                dataset=str(sample.dataset), repo_url_template=sample.url_template, max_rows=-1
            )
            rows += measure("sample", cfg, root / "cache-sample", root / "out", args.rounds)
        if args.dataset and args.instance:
            extra = {"repo_url_template": args.repo_url_template} if args.repo_url_template else {}
            cfg = EvalConfig(
                dataset=args.dataset, instance_ids=tuple(args.instance), max_rows=-1, **extra
            )
            cache = args.cache_dir or root / "cache-real"
            instances = measure_instances(
                args.label, cfg, cache, root / "out", args.rounds, not args.no_compile_cache
            )
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    machine = f"{platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"\nMachine: {machine}")
    if instances:
        print(
            "\n| instance | cold build: env + prepared (s) | warm evaluation (s) "
            "| test command (s) | overhead (s) | of which eval script's install etc. (s) "
            "| of which engine (s) | eval / test | target |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for i in instances:
            print(
                f"| {i.instance_id} | {i.cold_build:.1f} | {i.warm:.1f} | {i.test_seconds:.1f} "
                f"| {i.overhead:.1f} | {i.upstream:.1f} | {i.engine:.1f} | {i.ratio:.2f} "
                f"| {'met' if i.target_met else 'NOT met'} |"
            )
    if not rows:
        return
    print(
        "\n| set | rows | concurrency | cold build: env + prepared (s) | wall per instance (s) "
        "| test command (s) | overhead per instance (s) | wall / test |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for m in rows:
        cold = f"{m.cold_build:.1f}" if m.cold_build is not None else "-"
        print(
            f"| {m.label} | {m.rows} | {m.concurrency} | {cold} | {m.per_instance:.2f} | "
            f"{m.test_per_instance:.2f} | {m.overhead:.2f} | {m.ratio:.2f} |"
        )
    print(
        "\nwall per instance = run wall time x concurrency / rows; overhead = that minus the "
        "mean time inside the test command."
    )


if __name__ == "__main__":
    main()
