"""Instance images of real Verified rows, in the official layout, built here without a
registry: the official base image's packages on ``debian:bookworm-slim``, the row's
environment at ``/opt/miniconda3/envs/testbed`` copied from the one the engine built for it,
and the repository at ``/testbed`` set up by swebench 4.1.0's own ``setup_repo.sh`` for the
row (the base commit, origin and later tags removed, history pruned, the recipe's
pre-install and install steps, the ``SWE-bench`` commit), with one line changed: the clone
comes from the build context (a clone of the local mirror) instead of GitHub.

What differs from the official images is said in docs/fidelity.md ("The Docker backend
beside the official harness"): Debian 12 for Ubuntu 22.04, the engine's interpreter and
pip-installed packages for conda's, and conda's activation replaced by a stand-in that
puts the environment first on PATH. The install step's pip sees the package index as of
the recipe's date (the engine's dated index, on 127.0.0.1 of the build's host network).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import docker

from swegreen.core.dataset import Instance
from swegreen.core.images import image_name
from swegreen.core.recipes import Recipe
from swegreen.environments.dated_index import DatedIndex
from tests.docker_support.sample_images import ACTIVATE, _build, _current, _stamp

TEMPLATE = "swegreen-real/sweb.eval.{arch}.{official_id}:latest"
BASE = "swegreen-real/base:latest"
PREFIX = "/opt/miniconda3/envs/testbed"
BUILDER = "2"  # how an environment is copied in (copy_env): a new value builds every image again
# swebench 4.1.0's _DOCKERFILE_BASE_PY, on Debian 12: its apt packages, TZ, the nonroot
# user; conda itself is not installed (the environment is the engine's).
BASE_DOCKERFILE = """\
FROM debian:bookworm-slim
ARG DEBIAN_FRONTEND=noninteractive
ENV TZ=Etc/UTC
RUN apt-get update && apt-get install -y wget git build-essential libffi-dev libtiff-dev \\
      python3 python3-pip python-is-python3 jq curl locales locales-all tzdata patch \\
      && rm -rf /var/lib/apt/lists/*
COPY activate /opt/miniconda3/bin/activate
ENV PATH=/opt/miniconda3/bin:$PATH
RUN adduser --disabled-password --gecos 'dog' nonroot
"""
# swebench 4.1.0's _DOCKERFILE_INSTANCE_PY, with the environment and the clone copied in.
INSTANCE_DOCKERFILE = """\
FROM {base}
COPY env {prefix}
COPY testbed /testbed
COPY setup_repo.sh /root/
ARG PIP_INDEX_URL=https://pypi.org/simple
RUN sed -i -e 's/\\r$//' /root/setup_repo.sh
RUN /bin/bash /root/setup_repo.sh
WORKDIR /testbed/
"""
GC_AGGRESSIVE, GC = "git gc --prune=now --aggressive", "git gc --prune=now"
_CLONE = re.compile(
    r"^git clone -o origin (?P<branch>--branch \S+ )?\s*--single-branch \S+ /testbed$"
)


def build_base(client: docker.DockerClient) -> str:
    stamp = _stamp(BASE_DOCKERFILE, ACTIVATE)
    if not _current(client, BASE, stamp):
        with tempfile.TemporaryDirectory(prefix="swegreen-image-") as tmp:
            ctx = Path(tmp)
            (ctx / "Dockerfile").write_text(BASE_DOCKERFILE)
            (ctx / "activate").write_text(ACTIVATE)
            _build(client, ctx, BASE, stamp)
    return BASE


def local_setup(setup_repo: str) -> tuple[str, str | None]:
    """4.1.0's setup script with its clone line taken out (the context holds the clone),
    and the branch that line names, if any. Its ``git gc --aggressive`` packs without
    ``--aggressive``: the same objects are kept (the prune is what cuts the history), in
    minutes less on 2 cores (django's history: tens of minutes)."""
    lines, branch = [], None
    for line in setup_repo.splitlines():
        if line == GC_AGGRESSIVE:
            lines.append(GC)
        elif m := _CLONE.match(line):
            branch = (m["branch"] or "").split()[-1] if m["branch"] else None
            lines.append(": the repository is cloned into the build context: no GitHub here")
        else:
            lines.append(line)
    if branch is None and not any(ln.startswith(": the repository") for ln in lines):
        raise ValueError("the setup script has no clone line of the known shape")
    return "\n".join(lines) + "\n", branch


def copy_env(env_root: Path, dest: Path) -> None:
    """The engine's interpreter tree, its own path written as the image's prefix in every
    text file that names it (launchers' shebangs, sysconfig, the Makefile and pkg-config
    that builds link with), as conda's relocation does. Bytecode keeps the old path in
    tracebacks only; binaries are left as they are."""
    tree = env_root.resolve() / "py"
    shutil.copytree(tree, dest, symlinks=True)
    old, new = str(tree).encode(), PREFIX.encode()
    for path in dest.rglob("*"):
        if path.is_symlink() or not path.is_file() or path.suffix == ".pyc":
            continue
        if path.stat().st_size > 4 * 1024 * 1024:
            continue
        data = path.read_bytes()
        if old in data and b"\0" not in data[:8192]:
            path.write_bytes(data.replace(old, new))


def env_of(instance_log: Path) -> str:
    """The environment key the engine's instance log names."""
    for line in instance_log.read_text().splitlines():
        if m := re.match(r"environment ([0-9a-f]{16}) ", line):
            return m[1]
    raise ValueError(f"{instance_log} names no environment")


async def _index_url(recipe: Recipe, record: Path) -> tuple[DatedIndex | None, str]:
    if not recipe.exclude_newer:
        return None, ""
    index = DatedIndex(record=record)  # every file through 127.0.0.1: no CA in the image
    return index, await index.url(recipe.exclude_newer, recipe.exclude_newer_exempt)


def build_instance(
    client: docker.DockerClient,
    inst: Instance,
    recipe: Recipe,
    mirror: Path,
    env_root: Path,
    setup_repo: str,
) -> str:
    """The row's image (``TEMPLATE``); rebuilt only when what it is made of changed."""
    base_id = client.api.inspect_image(build_base(client))["Id"]
    tag = image_name(inst.instance_id, TEMPLATE)
    script, branch = local_setup(setup_repo)
    complete = env_root.resolve() / ".complete"
    seal = complete.read_text() if complete.exists() else ""
    stamp = _stamp(BUILDER, base_id, str(env_root.resolve()), seal, script, INSTANCE_DOCKERFILE)
    if _current(client, tag, stamp):
        return tag
    with tempfile.TemporaryDirectory(prefix="swegreen-image-") as tmp:
        ctx = Path(tmp)
        (ctx / "Dockerfile").write_text(INSTANCE_DOCKERFILE.format(base=BASE, prefix=PREFIX))
        (ctx / "setup_repo.sh").write_text(script)
        copy_env(env_root, ctx / "env")
        clone = ["git", "clone", "--quiet", "--no-checkout", "-o", "origin", "--single-branch"]
        if branch:
            clone += ["--branch", branch]
        subprocess.run([*clone, str(mirror), str(ctx / "testbed")], check=True)
        index, url = asyncio.run(_index_url(recipe, ctx / "wheels"))
        try:
            _build(client, ctx, tag, stamp, {"PIP_INDEX_URL": url} if url else None)
        finally:
            if index is not None:
                index.close()
    return tag
