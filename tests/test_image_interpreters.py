"""The images' interpreter stage (container/Dockerfile, target ``pythons``), built from the
repository's tracked files alone, as the image workflows build it: nothing outside the
build context, the interpreters from conda packages for the image's platform. conda's
channels are out of reach here, so a channel served on 127.0.0.1 stands in for them
(tests/conda_channel.py); the build uses the host's network to reach it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from swegreen.containers.daemon import answers
from tests.conda_channel import index, package_python, pyenv_tree, served

ROOT = Path(__file__).resolve().parents[1]
WHY_NOT = answers(os.environ)
pytestmark = pytest.mark.skipif(
    WHY_NOT is not None,
    reason=f"{WHY_NOT}: run ../shared/tools/docker-here.sh as root to set up a daemon",
)
TAG = "swegreen-test-pythons-stage"
HOST_CAS = Path("/usr/local/share/ca-certificates")


def tracked_files(dest: Path) -> Path:
    """The working tree's tracked files (what a clean clone has, with their current
    contents): an ignored or untracked file the build needed would be missing."""
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    archive = dest.with_suffix(".tar")
    with tarfile.open(archive, "w") as tar:
        for name in filter(None, names):
            path = ROOT / name.decode()
            if path.exists():
                tar.add(path, name.decode(), recursive=False)
    dest.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="tar")
    return dest


def test_the_interpreter_stage_builds_from_tracked_files_with_conda_packages(
    tmp_path: Path,
) -> None:
    tree = pyenv_tree("3.7")
    if tree is None:
        pytest.skip("no CPython 3.7 on this machine to package as conda does")
    channel = tmp_path / "channel"
    package_python(tree, channel)
    index(channel)
    context = tracked_files(tmp_path / "context")
    assert not (context / "container" / "pythons").exists()
    for crt in HOST_CAS.glob("*.crt"):  # this machine's HTTPS proxy, as the image docs say
        shutil.copy(crt, context / "container" / "ca-certificates" / crt.name)
    with served(channel) as url:
        build = subprocess.run(
            ["docker", "build", "--network", "host", "-f", "container/Dockerfile",
             "--target", "pythons", "--build-arg", f"PYTHON_CHANNELS={url}",
             "--build-arg", "PYTHON_VERSIONS=3.7", "-t", TAG, "."],
            cwd=context,
            env={**os.environ, "DOCKER_BUILDKIT": "0"},
            capture_output=True,
            text=True,
        )  # fmt: skip
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    assert "conda_pythons: Python 3.7." in build.stdout
    try:
        probe = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", TAG,
             "/opt/swegreen/pythons/linux-64/3.7/bin/python3.7", "-c",
             "import sys, ssl, json; print(sys.prefix); "
             "print(json.load(open(sys.prefix + '/swegreen-python.json'))['source'])"],
            capture_output=True,
            text=True,
        )  # fmt: skip
        assert probe.returncode == 0, probe.stderr
        assert probe.stdout.split() == ["/opt/swegreen/pythons/linux-64/3.7", "conda"]
        # the package cache, the indexes and CPython's regression suite are not kept
        left = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", TAG, "sh", "-c",
             "ls /opt/swegreen/pythons; ls /opt/swegreen/pythons/linux-64/3.7/lib/python3.7/test"],
            capture_output=True,
            text=True,
        )  # fmt: skip
        assert left.stdout.split() == ["linux-64", "__init__.py", "support"], left.stdout
    finally:
        subprocess.run(["docker", "rmi", "-f", TAG], capture_output=True)
