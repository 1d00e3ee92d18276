"""Measure the Docker backend's own cost per row against the eval script's own time.

The bundled sample, graded with gold and with empty patches in instance images built here
like the official ones (tests/docker_support/sample_images.py), on the Docker engine directly and
through the stand-in of AgentBeats' Docker gateway (tests/docker_support/gateway.py). Per row:

  * eval script: the exec of its two phases (install, then the tests);
  * overhead: everything else of the row (container made and removed, patch copied in
    and applied, the benchmark's files checked, grading), the image's pull excluded:
    the issue's target is overhead <= 10% of the eval script, plus the pull.

    python benchmarks/docker_backend.py [--rounds 3]

Needs a Docker daemon (../shared/tools/docker-here.sh). Prints markdown tables.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from swegreen.core.config import EvalConfig  # noqa: E402
from swegreen.core.dataset import load_dataset  # noqa: E402
from swegreen.core.sources import source_for  # noqa: E402
from swegreen.evaluation.engine import LocalSettings, build_engine  # noqa: E402
from swegreen.sample import build_sample  # noqa: E402
from tests.docker_support.gateway import running  # noqa: E402
from tests.docker_support.sample_images import TEMPLATE, build_instances  # noqa: E402


def one_run(work: Path, sample_dir: Path, patches: str, host: str, run_id: str) -> list:
    sample = build_sample(sample_dir)
    config = EvalConfig(
        dataset=str(sample.dataset),
        repo_url_template=sample.url_template,
        max_rows=-1,
        environments="docker",
        docker_images=TEMPLATE,
    )
    dataset = load_dataset(config.dataset)
    env = {**os.environ, "DOCKER_HOST": host}
    settings = LocalSettings(output_dir=work / "results", cache_dir=work / "cache")
    engine = build_engine(settings, config, env)
    try:
        t0 = time.monotonic()
        outcome = asyncio.run(
            engine.runner.run(
                run_id=run_id,
                dataset=dataset,
                instances=list(dataset.instances),
                source=source_for(patches),
                config=config,
            )
        )
        wall = time.monotonic() - t0
    finally:
        engine.close()
    return [outcome, wall]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    client = docker.from_env()
    version = client.version().get("Version")
    work = Path(tempfile.mkdtemp(prefix="swegreen-bench-docker-"))
    sample = build_sample(work / "sample")
    t0 = time.monotonic()
    build_instances(client, sample.repos_dir, load_dataset(str(sample.dataset)).instances)
    print(f"images ready in {time.monotonic() - t0:.0f} s; Docker {version}; "
          f"{platform.machine()}, {os.cpu_count()} cores")  # fmt: skip
    with contextlib.ExitStack() as stack:
        folder = tempfile.mkdtemp(prefix="swg-gw-", dir="/tmp")
        gw = stack.enter_context(
            running(os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
                    f"{folder}/docker.sock")
        )  # fmt: skip
        hosts = {
            "direct": os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
            "gateway": f"unix://{gw.listen}",
        }
        print("\n| patches | via | rows | wall (s) | eval script per row (s) | overhead per row "
              "(s) | overhead / eval script |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        for patches in ("gold", "empty"):
            for via, host in hosts.items():
                walls, evals, overheads = [], [], []
                for r in range(args.rounds):
                    outcome, wall = one_run(
                        work, work / "sample", patches, host, f"{patches}-{via}-{r}"
                    )
                    walls.append(wall)
                    for row in outcome.results:
                        if not row.tests_ran:
                            overheads.append(row.durations.total)
                            continue
                        d = row.durations
                        evals.append(d.tests)
                        overheads.append(d.total - d.tests - d.env_build - d.participant)
                rows = len(outcome.results)
                ev = statistics.median(evals) if evals else 0.0
                ov = statistics.median(overheads)
                share = f"{ov / ev:.0%}" if ev else "n/a (no tests run)"
                print(f"| {patches} | {via} | {rows} | {statistics.median(walls):.1f} | "
                      f"{ev:.2f} | {ov:.2f} | {share} |")  # fmt: skip
        if gw.refused:
            print(f"\nrefused by the gateway: {sorted(set(gw.refused))}")
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
