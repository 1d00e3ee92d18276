"""The Docker tests' shared fixtures: the sample's instance images, and the stand-in of
AgentBeats' Docker gateway in front of the daemon. Imported by the modules that use them."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import docker
import pytest

from swegreen.core.dataset import load_dataset
from swegreen.sample import SampleBenchmark

from .gateway import Gateway, running
from .sample_images import build_instances


@pytest.fixture(scope="module")
def images(sample: SampleBenchmark) -> dict[str, str]:
    client = docker.from_env()
    try:
        return build_instances(
            client, sample.repos_dir, load_dataset(str(sample.dataset)).instances
        )
    finally:
        client.close()


@pytest.fixture(scope="module")
def gateway(images: dict[str, str]) -> Iterator[Gateway]:
    upstream = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    folder = tempfile.mkdtemp(prefix="swg-gw-", dir="/tmp")  # socket paths are short
    try:
        with running(upstream, f"{folder}/docker.sock") as gw:
            yield gw
    finally:
        shutil.rmtree(folder, ignore_errors=True)
