"""Measure the interactive mode's own cost: making a participant's workbench (copying the
prepared workspace and cutting its history) and running one command in it.

Per instance (its prepared workspace is built first if the cache lacks it, not counted):
  * open: the copy, the environment view, the shallow .git, the exclusions;
  * command: the median wall time of `true` over --commands runs (the sandbox's start-up
    and teardown, what every step costs beyond the command itself);
  * git status: the median of `git status --short` (the command agents run most, on the
    whole tree);
  * close: removing the copy.

    python benchmarks/workbench.py                      # the sample benchmark
    python benchmarks/workbench.py --dataset ../shared/data/swebench_verified.jsonl \\
        --cache-dir /path/to/cache --repo-url-template '/mirrors/{owner}+{name}/repo' \\
        --instance sympy__sympy-13615 --instance psf__requests-2931

Prints a markdown table (paste it into docs/benchmarks.md with the date and machine).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from swegreen.core.config import EvalConfig
from swegreen.core.dataset import Instance, load_dataset, select_instances
from swegreen.evaluation.engine import LocalSettings, build_engine
from swegreen.evaluation.settings import host_environment
from swegreen.evaluation.workbench import Workbenches
from swegreen.sample import build_sample


async def measure(workbenches: Workbenches, instance: Instance, commands: int) -> list[float]:
    recipe = workbenches.testbeds.recipes.for_instance(instance)
    await workbenches.testbeds.prepared(instance, recipe, [])  # built once, not counted
    t0 = time.monotonic()
    async with workbenches.open("bench-workbench", instance) as bench:
        opened = time.monotonic() - t0
        steps = [(await bench.run("true", 60)).duration for _ in range(commands)]
        status = [(await bench.run("git status --short", 120)).duration for _ in range(3)]
        t1 = time.monotonic()
    closed = time.monotonic() - t1
    return [opened, statistics.median(steps), statistics.median(status), closed]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", help="a dataset file (default: the sample benchmark)")
    parser.add_argument("--instance", action="append", default=[], help="repeatable")
    parser.add_argument("--repo-url-template", help="where repositories are cloned from")
    parser.add_argument("--cache-dir", type=Path, help="default: a fresh temporary one")
    parser.add_argument("--commands", type=int, default=10, help="runs of `true` per instance")
    args = parser.parse_args()

    cache = args.cache_dir or Path(tempfile.mkdtemp(prefix="swegreen-bench-"))
    os.chmod(cache, 0o755)
    if args.dataset:
        config = EvalConfig(
            dataset=args.dataset,
            instance_ids=tuple(args.instance),
            repo_url_template=args.repo_url_template or "https://github.com/{repo}.git",
        )
    else:
        sample = build_sample(cache / "sample")
        config = EvalConfig(
            dataset=str(sample.dataset),
            repo_url_template=sample.url_template,
            instance_ids=tuple(args.instance) or ("sample__calculator-1",),
        )
    dataset = load_dataset(config.dataset)
    instances = select_instances(dataset, config.selection())
    settings = LocalSettings(output_dir=cache / "bench-results", cache_dir=cache)
    engine = build_engine(settings, config, host_environment())
    workbenches = Workbenches(engine.testbeds)
    print(f"{platform.node()}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}\n")
    print("| instance | open (s) | one command (s) | git status (s) | close (s) |")
    print("|---|---:|---:|---:|---:|")
    try:
        for instance in instances:
            figures = asyncio.run(measure(workbenches, instance, args.commands))
            cells = " | ".join(f"{f:.2f}" for f in figures)
            print(f"| {instance.instance_id} | {cells} |", flush=True)
    finally:
        engine.close()


if __name__ == "__main__":
    main()
