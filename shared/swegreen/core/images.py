"""Instance image names: where the Docker backend pulls a row's prebuilt environment.

The official harness names its images ``swebench/sweb.eval.<arch>.<id>:latest`` with the
instance id lower-cased and ``__`` written ``_1776_`` (Docker Hub repository names allow
no double underscore); Epoch AI's registry keeps the id as it is. A template names any
other registry with the same layout (the repository at ``/testbed``, the conda
environment ``testbed``): ``{instance_id}``, ``{official_id}`` and ``{arch}`` are filled in.
"""

from __future__ import annotations

import platform

from swegreen.core.errors import ConfigError

OFFICIAL = "swebench/sweb.eval.{arch}.{official_id}:latest"
EPOCH = "ghcr.io/epoch-research/swe-bench.eval.{arch}.{instance_id}:latest"
SOURCES = {"official": OFFICIAL, "epoch": EPOCH}
FIELDS = ("instance_id", "official_id", "arch")


def official_id(instance_id: str) -> str:
    return instance_id.lower().replace("__", "_1776_")


def machine_arch(machine: str | None = None) -> str:
    """The harness's arch names: x86_64 or arm64."""
    machine = (machine or platform.machine()).lower()
    return "arm64" if machine in {"arm64", "aarch64"} else "x86_64"


def image_template(source: str) -> str:
    """``official``, ``epoch`` or a template; refused with what is wrong."""
    template = SOURCES.get(source, source)
    if "{" not in template:
        raise ConfigError(
            f"docker_images {source!r} is neither a known source ({', '.join(SOURCES)}) nor "
            "a template with {instance_id} or {official_id}, e.g. "
            "'registry.example/sweb.eval.{arch}.{official_id}:latest'"
        )
    try:
        template.format(**dict.fromkeys(FIELDS, "x"))
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            f"docker_images template {template!r} does not format ({exc!r}); the fields "
            f"are {', '.join('{' + f + '}' for f in FIELDS)}"
        ) from None
    return template


def image_name(instance_id: str, source: str = "official", arch: str | None = None) -> str:
    template = image_template(source)
    return template.format(
        instance_id=instance_id, official_id=official_id(instance_id), arch=arch or machine_arch()
    )
