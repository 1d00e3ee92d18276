"""Pins that PyPI has only as source for the interpreter, built as of their own release.

Upstream installs such pins from conda: numpy 1.19.2 for Python 3.9 (scikit-learn 1.3's
recipe) is a conda-forge binary. pip builds them from the sdist in an isolated build
environment whose build requirements it resolves from the index the environment sees,
as of the recipe's date, years after the package: numpy 1.19's sources need Cython 0.29,
the recipe's date gives Cython 3.0.10, and the build fails ("Running cythonize failed!").
So before anything is installed, each such pin is built alone into a wheelhouse, with pip
seeing the index as of the day its sdist was uploaded: its build requirements as its own
release had them. Every later pip of the environment build finds the wheel there.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

# What the target interpreter accepts, asked of its own pip (which vendors packaging).
TAGS_SCRIPT = (
    "from pip._vendor.packaging.tags import sys_tags; print('\\n'.join(map(str, sys_tags())))"
)


@dataclass(frozen=True)
class SourceOnly:
    name: str
    version: str
    released: str  # YYYY-MM-DD: when its sdist was uploaded


def pins(lines: Iterable[str]) -> list[tuple[str, str]]:
    """``name==version`` pins of a lock or requirements list (markers kept out)."""
    found = []
    for line in lines:
        text = line.split("#", 1)[0].strip()
        if not text or text.startswith("-"):
            continue
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        exact = [s.version for s in req.specifier if s.operator in ("==", "===")]
        if len(exact) == 1 and "*" not in exact[0]:
            found.append((canonicalize_name(req.name), exact[0]))
    return list(dict.fromkeys(found))


def source_only(name: str, version: str, files: list[dict], tags: set[str]) -> SourceOnly | None:
    """The pin, when ``files`` (PEP 691 entries with upload-time) of its version hold an
    sdist and no wheel the interpreter accepts."""
    try:
        wanted = Version(version)
    except InvalidVersion:
        return None
    sdist_day = None
    for f in files:
        filename = f.get("filename", "")
        if f.get("yanked"):
            continue
        if filename.endswith(".whl"):
            try:
                _, v, _, wheel_tags = parse_wheel_filename(filename)
            except (InvalidWheelFilename, InvalidVersion):
                continue
            if v == wanted and {str(t) for t in wheel_tags} & tags:
                return None  # a wheel it can install: nothing to build
        else:
            try:
                _, v = parse_sdist_filename(filename)
            except (InvalidSdistFilename, InvalidVersion):
                continue
            stamp = f.get("upload-time")
            if v == wanted and isinstance(stamp, str):
                sdist_day = stamp[:10]
    return SourceOnly(name, version, sdist_day) if sdist_day else None


def files_of(index_url: str, name: str) -> list[dict]:
    """The files of ``name`` as the dated index keeps them (its ``?files`` answer)."""
    with urllib.request.urlopen(f"{index_url.rstrip('/')}/{name}/?files", timeout=120) as answer:
        return json.load(answer).get("files", [])


async def find_source_only(
    wanted: list[tuple[str, str]], index_url: str, tags: set[str]
) -> list[SourceOnly]:
    async def one(name: str, version: str) -> SourceOnly | None:
        try:
            files = await asyncio.to_thread(files_of, index_url, name)
        except OSError:
            return None  # the install will say what is wrong with it
        return source_only(name, version, files, tags)

    found = await asyncio.gather(*(one(n, v) for n, v in wanted))
    return [f for f in found if f is not None]


Step = Callable[..., Awaitable[object]]  # environments._Build.step


async def build_wheels(
    python: Path,
    todo: list[SourceOnly],
    wheelhouse: Path,
    index_for_day: Callable[[str], Awaitable[str]],
    step: Step,
) -> None:
    """Each pin's wheel, built alone with pip seeing the index of its own release day."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    for pin in todo:
        url = await index_for_day(pin.released)
        await step(
            [
                str(python),
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "-w",
                str(wheelhouse),
                f"{pin.name}=={pin.version}",
            ],
            f"building {pin.name} {pin.version} (source only for this interpreter) with the "
            f"build requirements of its release, {pin.released}",
            extra_env={"PIP_INDEX_URL": url},
        )
