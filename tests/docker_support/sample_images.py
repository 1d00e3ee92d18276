"""Instance images of the bundled sample, laid out like the official ones: the repository
at ``/testbed`` at the row's base commit (history kept), a ``testbed`` environment that
``source /opt/miniconda3/bin/activate; conda activate testbed`` puts first on PATH (a
stand-in of conda's activation: a function, no conda), git, GNU patch and procps (the
official harness ends a timed-out eval script with ``kill`` run in the container).

Built from ``debian:bookworm-slim`` (which ``../shared/tools/docker-here.sh`` makes) with
Debian's python3 and the sample recipe's pins from PyPI, downloaded on the host: no image
registry is needed. Rebuilt only when what they are made of changes (a label keeps its
digest). ``python -m tests.docker_support.sample_images`` builds them all.
"""

from __future__ import annotations

import collections
import hashlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import docker
from docker.errors import ImageNotFound

from swegreen.core.dataset import Instance
from swegreen.core.images import image_name
from swegreen.core.recipes import RecipeBook
from swegreen.environments.catalog import builtin_recipes

TEMPLATE = "swegreen-sample/sweb.eval.{arch}.{official_id}:latest"
BASE = "swegreen-sample/base:latest"
STAMP = "swegreen.sample.stamp"
PINS = ("pytest==8.3.5", "setuptools==75.8.0")  # the sample recipe's packages
ACTIVATE = """\
# A stand-in of conda's activate script, for images without conda: `conda activate NAME`
# puts /opt/miniconda3/envs/NAME/bin first on PATH, as the official images' conda does.
conda() {
  case "$1" in
    activate) export CONDA_DEFAULT_ENV="$2" PATH="/opt/miniconda3/envs/$2/bin:$PATH" ;;
    *) echo "conda $1: this image has only 'conda activate'" >&2; return 1 ;;
  esac
}
"""
BASE_DOCKERFILE = """\
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends git patch procps python3 \\
      python3-venv && rm -rf /var/lib/apt/lists/*
COPY wheels /tmp/wheels
RUN python3 -m venv /opt/miniconda3/envs/testbed \\
 && /opt/miniconda3/envs/testbed/bin/pip install --no-index --find-links /tmp/wheels {pins} \\
 && rm -rf /tmp/wheels
COPY activate /opt/miniconda3/bin/activate
WORKDIR /testbed
"""
INSTANCE_DOCKERFILE = f"FROM {BASE}\nCOPY testbed /testbed\nWORKDIR /testbed\n"
# the recipe's install, run at build time as the official images' setup runs it
INSTALL_STEP = (
    "RUN /bin/bash -c 'source /opt/miniconda3/bin/activate && conda activate testbed && {}'\n"
)


def _stamp(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _current(client: docker.DockerClient, tag: str, stamp: str) -> bool:
    try:
        labels = client.api.inspect_image(tag)["Config"].get("Labels") or {}
    except ImageNotFound:
        return False
    return labels.get(STAMP) == stamp


def _build(
    client: docker.DockerClient,
    context: Path,
    tag: str,
    stamp: str,
    buildargs: dict[str, str] | None = None,
) -> None:
    # The engine's API directly (not through the gateway: the platform never builds).
    said: collections.deque[str] = collections.deque(maxlen=400)
    for event in client.api.build(
        path=str(context),
        tag=tag,
        rm=True,
        forcerm=True,
        network_mode="host",
        labels={STAMP: stamp},
        buildargs=buildargs or {},
        decode=True,
    ):
        said.extend(str(event.get("stream", "")).splitlines())
        if "error" in event:
            tail = "\n".join(said)
            raise RuntimeError(f"building {tag} failed: {event['error']}\n{tail}")


def build_base(client: docker.DockerClient) -> str:
    dockerfile = BASE_DOCKERFILE.format(pins=" ".join(PINS))
    stamp = _stamp(dockerfile, ACTIVATE)
    if _current(client, BASE, stamp):
        return BASE
    with tempfile.TemporaryDirectory(prefix="swegreen-image-") as tmp:
        ctx = Path(tmp)
        (ctx / "Dockerfile").write_text(dockerfile)
        (ctx / "activate").write_text(ACTIVATE)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary", ":all:",
             "--python-version", "3.11", "-d", str(ctx / "wheels"), *PINS],
            check=True,
        )  # fmt: skip
        _build(client, ctx, BASE, stamp)
    return BASE


def build_instances(
    client: docker.DockerClient,
    repos_dir: Path,
    instances: Iterable[Instance],
    recipes: RecipeBook | None = None,
) -> dict[str, str]:
    """Each row's image (``TEMPLATE``), its repository from the sample's ``repos_dir``, the
    recipe's install run in it (the ledger's editable one); ``recipes``: the book the rows'
    recipes are in (the built-in one by default)."""
    base_id = client.api.inspect_image(build_base(client))["Id"]
    book = recipes or builtin_recipes()
    built = {}
    for inst in instances:
        tag = image_name(inst.instance_id, TEMPLATE)
        install = book.for_instance(inst).install
        dockerfile = INSTANCE_DOCKERFILE + (INSTALL_STEP.format(install) if install else "")
        owner, name = inst.repo.split("/", 1)
        source = repos_dir / f"{owner}__{name}"
        head = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        stamp = _stamp(base_id, inst.base_commit, head, dockerfile)
        if not _current(client, tag, stamp):
            with tempfile.TemporaryDirectory(prefix="swegreen-image-") as tmp:
                ctx = Path(tmp)
                (ctx / "Dockerfile").write_text(dockerfile)
                testbed = ctx / "testbed"
                subprocess.run(["git", "clone", "--quiet", str(source), str(testbed)], check=True)
                subprocess.run(
                    ["git", "-C", str(testbed), "checkout", "--quiet", inst.base_commit],
                    check=True,
                )
                _build(client, ctx, tag, stamp)
        built[inst.instance_id] = tag
    return built


if __name__ == "__main__":
    from swegreen.core.dataset import load_dataset
    from swegreen.sample import build_sample

    sample = build_sample(Path(tempfile.gettempdir()) / "swegreen-sample-images")
    rows = load_dataset(str(sample.dataset)).instances
    images = build_instances(docker.from_env(), sample.repos_dir, rows)
    print(json.dumps(images, indent=1))
