"""Pins that PyPI has only as source for the interpreter, built as of their own release.

Upstream installs such pins from conda: numpy 1.19.2 for Python 3.9 (scikit-learn 1.3's
recipe) is a conda-forge binary. pip builds them from the sdist in an isolated build
environment whose build requirements it resolves from the index the environment sees,
as of the recipe's date, years after the package: numpy 1.19's sources need Cython 0.29,
the recipe's date gives Cython 3.0.10, and the build fails ("Running cythonize failed!").
So before anything is installed, each such pin is built alone into a wheelhouse, with pip
seeing the index as of the day its sdist was uploaded: its build requirements as its own
release had them. Every later pip of the environment build finds the wheel there.

A pin's own build requirements can be unbuildable too: scipy 1.5.2 pins ``numpy==1.17.3``
for building on Python 3.8+, and PyPI has numpy 1.17.3 only as source for Python 3.9,
where it does not build. conda-forge builds such a package against the numpy of the
environment it ships for (an extension built against a numpy runs with that numpy), so
here: a build requirement pinned to a version that is source-only for the interpreter, of
a package the environment pins too, is replaced by the environment's version, and the
pin is built without isolation in a build virtualenv holding that version and the rest of
its build requirements as of its release. Every replacement is recorded.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import tarfile
import tomllib
import urllib.request
import zipfile
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
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

from swegreen.core.errors import EnvSetupFailed

# What the target interpreter accepts and how it evaluates markers, asked of its own pip
# (which vendors packaging).
TARGET_SCRIPT = (
    "import json; from pip._vendor.packaging.tags import sys_tags; "
    "from pip._vendor.packaging.markers import default_environment; "
    "print(json.dumps({'tags': [str(t) for t in sys_tags()], 'markers': default_environment()}))"
)
# What pip assumes of an sdist without a pyproject.toml (PEP 517's legacy fallback).
LEGACY_REQUIRES = ("setuptools>=40.8.0", "wheel")
RELEASE_DAY_TOOLS = ("setuptools", "wheel")  # a setup.py-only sdist's, as its day had them


@dataclass(frozen=True)
class SourceOnly:
    name: str
    version: str
    released: str  # YYYY-MM-DD: when its sdist was uploaded
    url: str = field(default="", compare=False)  # the sdist, as the index gives it
    sha256: str = field(default="", compare=False)


@dataclass(frozen=True)
class Target:
    """The environment the wheels are for."""

    python: Path
    tags: frozenset[str]
    markers: Mapping[str, str]
    pins: Mapping[str, str]  # canonical name -> the version the environment installs
    index_url: str  # the index as of the recipe's date

    @classmethod
    def from_probe(
        cls, python: Path, probe_output: str, pins: Mapping[str, str], index_url: str
    ) -> Target:
        data = json.loads(probe_output.strip().splitlines()[-1])
        return cls(python, frozenset(data["tags"]), data["markers"], dict(pins), index_url)


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
    sdist: dict | None = None
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
            if v == wanted and isinstance(f.get("upload-time"), str):
                sdist = f
    if sdist is None:
        return None
    return SourceOnly(
        name,
        version,
        sdist["upload-time"][:10],
        url=sdist.get("url", ""),
        sha256=(sdist.get("hashes") or {}).get("sha256", ""),
    )


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


def build_requires(sdist: Path) -> list[str]:
    """``[build-system] requires`` of an sdist (pip's legacy default without one)."""
    text = None
    if sdist.name.endswith(".zip"):
        with zipfile.ZipFile(sdist) as archive:
            for name in archive.namelist():
                if name.count("/") == 1 and name.endswith("/pyproject.toml"):
                    text = archive.read(name).decode()
                    break
    else:
        with tarfile.open(sdist) as archive:
            for member in archive:
                top = member.name.lstrip("./").count("/") == 1
                if member.isfile() and top and member.name.endswith("/pyproject.toml"):
                    text = archive.extractfile(member).read().decode()  # type: ignore[union-attr]
                    break
    if text is None:
        return list(LEGACY_REQUIRES)
    return list(tomllib.loads(text).get("build-system", {}).get("requires", LEGACY_REQUIRES))


def replaceable_pins(
    requires: Iterable[str], markers: Mapping[str, str], env_pins: Mapping[str, str]
) -> list[tuple[str, str]]:
    """Build requirements (that apply to the target) pinning a package the environment
    pins at another version: candidates for building against the environment's."""
    found = []
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate(dict(markers)):
            continue
        name = canonicalize_name(req.name)
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if len(exact) == 1 and name in env_pins and env_pins[name] != exact[0]:
            found.append((name, exact[0]))
    return found


def against_environment(
    requires: Iterable[str], replaced: Mapping[str, str], env_pins: Mapping[str, str]
) -> list[str]:
    """``requires`` with every requirement on a ``replaced`` package swapped for the
    environment's pin of it."""
    kept = []
    for line in requires:
        try:
            name = canonicalize_name(Requirement(line).name)
        except InvalidRequirement:
            kept.append(line)
            continue
        if name not in replaced:
            kept.append(line)
    return [*kept, *(f"{name}=={env_pins[name]}" for name in replaced)]


def download(pin: SourceOnly, folder: Path) -> Path:
    """The pin's sdist, checked against the index's hash."""
    if not pin.url:
        raise OSError(f"the index gives no address for {pin.name} {pin.version}'s sdist")
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / pin.url.split("#", 1)[0].rsplit("/", 1)[-1]
    digest = hashlib.sha256()
    with urllib.request.urlopen(pin.url, timeout=300) as answer, target.open("wb") as out:
        while chunk := answer.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    if pin.sha256 and digest.hexdigest() != pin.sha256:
        target.unlink()
        raise OSError(
            f"{target.name}: sha256 {digest.hexdigest()}, but the index says {pin.sha256}"
        )
    return target


Step = Callable[..., Awaitable[object]]  # environments._Build.step


async def build_wheels(
    target: Target,
    todo: list[SourceOnly],
    wheelhouse: Path,
    index_for_day: Callable[[str], Awaitable[str]],
    step: Step,
) -> list[dict[str, object]]:
    """Each pin's wheel, built with the build requirements of its own release day (those
    the interpreter cannot have replaced by the environment's, see the module's note);
    returns what was built and against what, for the environment's record."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    sdists = wheelhouse.parent / "sdists"
    found = [(pin, await asyncio.to_thread(download, pin, sdists)) for pin in todo]
    requires = {pin.name: build_requires(path) for pin, path in found}
    names = {pin.name for pin in todo}
    # a pin another one builds against goes first
    found.sort(
        key=lambda item: len(
            {canonicalize_name(Requirement(r).name) for r in requires[item[0].name] if _parses(r)}
            & names
        )
    )
    built: list[dict[str, object]] = []
    for pin, sdist in found:
        day_url = await index_for_day(pin.released)
        candidates = replaceable_pins(requires[pin.name], target.markers, target.pins)
        unbuildable = await find_source_only(candidates, day_url, set(target.tags))
        replaced = {p.name: p.version for p in unbuildable}
        record: dict[str, object] = {
            "name": pin.name,
            "version": pin.version,
            "build_requirements_as_of": pin.released,
        }
        if not replaced:
            try:
                await step(
                    [str(target.python), "-m", "pip", "wheel", "--no-deps", "-w",
                     str(wheelhouse), str(sdist)],
                    f"building {pin.name} {pin.version} (source only for this interpreter) "
                    f"with the build requirements of its release, {pin.released}",
                    extra_env={"PIP_INDEX_URL": day_url},
                )  # fmt: skip
            except EnvSetupFailed:
                if requires[pin.name] != list(LEGACY_REQUIRES):
                    raise
                # A setup.py-only sdist: an older pip builds it with the environment's own
                # setuptools (markupsafe 1.0 imports setuptools.Feature, gone in 46), a
                # newer one asks for setuptools>=40.8, which its release day never saw.
                # Built again beside: setuptools and wheel as its release day had them.
                record["built_with_setuptools_of_its_release"] = True
                await _build_in_virtualenv(
                    target, pin, sdist, list(RELEASE_DAY_TOOLS), {}, wheelhouse, day_url, step
                )
        else:
            record["built_against_environment"] = {
                name: f"{target.pins[name]} (its build pins {version}, source only here)"
                for name, version in replaced.items()
            }
            await _build_in_virtualenv(
                target, pin, sdist, requires[pin.name], replaced, wheelhouse, day_url, step
            )
        built.append(record)
    shutil.rmtree(sdists, ignore_errors=True)
    return built


def _parses(line: str) -> bool:
    try:
        Requirement(line)
    except InvalidRequirement:
        return False
    return True


async def _build_in_virtualenv(
    target: Target,
    pin: SourceOnly,
    sdist: Path,
    requires: list[str],
    replaced: Mapping[str, str],
    wheelhouse: Path,
    day_url: str,
    step: Step,
) -> None:
    """Build ``pin`` without isolation in a virtualenv of its own holding the environment's
    versions of ``replaced`` and the rest of ``requires`` as of its release day (``--force-
    reinstall`` where nothing is replaced: the virtualenv's bundled setuptools may be newer
    than that day's)."""
    venv = wheelhouse.parent / f"build-{pin.name}"
    shutil.rmtree(venv, ignore_errors=True)
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--no-input"]
    ours = [f"{name}=={target.pins[name]}" for name in replaced]
    constraints = venv.parent / f"build-{pin.name}-constraints.txt"
    constraints.write_text("\n".join(ours) + "\n")
    rest = [
        line for line in against_environment(requires, replaced, target.pins) if line not in ours
    ]
    why = ", ".join(f"{n} {target.pins[n]} for its {n}=={v}" for n, v in replaced.items())
    why = f"the environment's {why}" if why else f"setuptools and wheel of {pin.released}"
    await step([str(target.python), "-m", "venv", str(venv)], f"a build virtualenv for {pin.name}")
    # the environment's versions come from its own index (and the wheels built before)
    if ours:
        await step(
            [*pip, *ours],
            f"installing the environment's {', '.join(ours)} to build {pin.name} against",
            extra_env={"PIP_INDEX_URL": target.index_url, "PIP_FIND_LINKS": str(wheelhouse)},
        )
    if rest:
        await step(
            [*pip, *([] if ours else ["--force-reinstall"]), "-c", str(constraints), *rest],
            f"installing {pin.name} {pin.version}'s other build requirements as of {pin.released}",
            extra_env={"PIP_INDEX_URL": day_url, "PIP_FIND_LINKS": str(wheelhouse)},
        )
    await step(
        [python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
         str(wheelhouse), str(sdist)],
        f"building {pin.name} {pin.version} (source only for this interpreter) against "
        f"{why}",
    )  # fmt: skip
    shutil.rmtree(venv, ignore_errors=True)
    constraints.unlink(missing_ok=True)
