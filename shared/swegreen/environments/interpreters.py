"""Finding (or installing) the Python interpreter a recipe asks for."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from swegreen.core.errors import InterpreterNotFound
from swegreen.environments.conda_pythons import CondaPythons, CondaUnavailable

log = logging.getLogger(__name__)

VERSION = re.compile(r"^(\d+)\.(\d+)$")  # X.Y, as recipes and --python give it


@dataclass(frozen=True)
class InterpreterSearch:
    """Where to look. Built by the composition root from the real environment."""

    path: str
    pyenv_root: Path | None
    uv_dir: Path | None
    # Interpreters the user pointed at ("3.5" -> a python3.5 of theirs): used first, and
    # only these for their versions (a wrong one is an error, not a silent fallback).
    given: tuple[tuple[str, Path], ...] = ()
    # Conda packages of CPython, as SWE-bench's images have them (conda_pythons.py): one
    # installed there is used before the machine's own; ``downloads`` gets a missing one.
    conda: CondaPythons | None = None
    downloads: bool = False

    @classmethod
    def from_environ(
        cls,
        env: Mapping[str, str],
        given: Mapping[str, Path] | None = None,
        conda: CondaPythons | None = None,
        downloads: bool = False,
    ) -> InterpreterSearch:
        home = Path(env.get("HOME", str(Path.home())))
        pyenv = env.get("PYENV_ROOT") or str(home / ".pyenv")
        uv_dir = env.get("UV_PYTHON_INSTALL_DIR") or str(
            Path(env.get("XDG_DATA_HOME", str(home / ".local" / "share"))) / "uv" / "python"
        )
        return cls(
            path=env.get("PATH", ""),
            pyenv_root=Path(pyenv),
            uv_dir=Path(uv_dir),
            given=tuple(sorted((given or {}).items())),
            conda=conda,
            downloads=downloads and conda is not None,
        )

    def given_for(self, version: str) -> Path | None:
        return dict(self.given).get(version)

    def source_of(self, python: Path, version: str) -> dict[str, object]:
        """Where ``python`` came from, for a row's provenance: the user, a conda package
        (channel, package, sha256), or this machine."""
        if version == "host":
            return {"python": version, "source": "the engine's own", "path": str(python)}
        if self.given_for(version) == python:
            return {"python": version, "given_by_user": True, "path": str(python)}
        if self.conda is not None and self.conda.installed(version) == python:
            mark = self.conda.provenance(version) or {}
            kept = ("version", "source", "channel", "package", "sha256", "subdir")
            return {"python": version, **{k: mark[k] for k in kept if k in mark}}
        return {"python": version, "source": "this machine", "path": str(python)}


def parse_given(text: str) -> dict[str, Path]:
    """``3.5=/opt/py35/bin/python3.5,3.6=...`` (the --python flag and SWEGREEN_PYTHONS)."""
    given: dict[str, Path] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        version, sep, path = item.partition("=")
        if not sep or not VERSION.match(version.strip()) or not path.strip():
            raise ValueError(
                f"{item!r} is not VERSION=PATH: give e.g. 3.5=/opt/python3.5/bin/python3.5"
            )
        given[version.strip()] = Path(path.strip()).expanduser()  # a shell leaves ~ after =
    return given


def find_interpreter(version: str, search: InterpreterSearch, needed_by: str = "") -> Path:
    """The path of a working ``pythonX.Y`` (or the engine's own for ``host``): the user's,
    else a conda package's installed here, else this machine's, else a conda package's
    downloaded now (``search.downloads``). Blocking: run it in a worker thread."""
    if version == "host":
        return Path(sys.executable)
    m = VERSION.match(version)
    if not m:
        raise InterpreterNotFound(f"recipe asks for Python {version!r}; expected X.Y or 'host'")
    if (given := search.given_for(version)) is not None:
        if _reports_version(given, version):
            return given
        raise InterpreterNotFound(
            f"Python {version} was given as {given} (--python / SWEGREEN_PYTHONS), but that "
            f"does not run as Python {version}: {_what_it_is(given)}. Point it at a working "
            f"python{version}.",
            permanent=True,
        )
    conda = search.conda
    found = conda.installed(version) if conda is not None else None
    if found is not None and _reports_version(found, version):
        return found
    for candidate in _candidates(version, search):
        if _reports_version(candidate, version):
            return candidate
    detail = ""
    if conda is not None and search.downloads:
        try:
            return _download(version, conda)
        except (CondaUnavailable, OSError) as exc:  # OSError: the directory (an image's)
            detail = f" It could not be installed from conda packages: {exc}."
    who = f" (needed by {needed_by})" if needed_by else ""
    raise InterpreterNotFound(
        f"Python {version}{who} was not found on PATH, in {search.pyenv_root}/versions or in "
        f"{search.uv_dir}, and no conda package of it is installed"
        f"{f' in {conda.root}' if conda else ''}.{detail} {install_hint(version, search)}"
    )


def _download(version: str, conda: CondaPythons) -> Path:
    found = asyncio.run(conda.install(version, announce=log.warning))
    if not _reports_version(found, version):
        raise CondaUnavailable(f"{found} does not run as Python {version}: {_what_it_is(found)}")
    return found


def install_hint(version: str, search: InterpreterSearch | None = None) -> str:
    """What to do about a missing Python ``version``: only ways that give it."""
    where = f"~/.local/share/swegreen/python{version}"
    conda = (
        f"`conda create -p {where} python={version} -y` (as SWE-bench's own images get it), "
        f"then pass --python {version}={where}/bin/python{version} (or SWEGREEN_PYTHONS)"
    )
    if search is not None and search.conda is not None and not search.downloads:
        return (
            "Downloads are off here (--no-python-downloads or SWEGREEN_PYTHON_DOWNLOADS=0): "
            "run without that to have it installed once from conda packages, or install it "
            f"ahead with `swegreen pythons install {version}`, or yourself with conda: {conda}."
        )
    if search is not None and search.downloads:
        return (
            "Give this machine access to the channels, point SWEGREEN_PYTHON_CHANNELS at a "
            f"mirror of them, or install it yourself with conda: {conda}."
        )
    return f"Install it with conda: {conda}."


def _candidates(version: str, search: InterpreterSearch) -> list[Path]:
    exe = f"python{version}"
    found: list[Path] = []
    for entry in search.path.split(os.pathsep):
        # pyenv shims answer for every version and fail at run time: skip them.
        if entry and "shims" not in Path(entry).parts:
            p = Path(entry) / exe
            if p.is_file() and os.access(p, os.X_OK):
                found.append(p)
    if search.pyenv_root and (search.pyenv_root / "versions").is_dir():
        for d in sorted(
            (search.pyenv_root / "versions").glob(f"{version}.*"), key=_patch_level, reverse=True
        ):
            if (d / "bin" / exe).is_file():
                found.append(d / "bin" / exe)
    if search.uv_dir and search.uv_dir.is_dir():
        for d in sorted(search.uv_dir.glob(f"cpython-{version}.*"), key=_patch_level, reverse=True):
            if (d / "bin" / exe).is_file():
                found.append(d / "bin" / exe)
    return found


def _patch_level(path: Path) -> tuple[int, ...]:
    nums = re.findall(r"\d+", path.name)
    return tuple(int(n) for n in nums[:3])


def _ask(candidate: Path, code: str) -> str | None:
    """What ``candidate`` prints running ``code``; None when it cannot run or fails."""
    try:
        out = subprocess.run(
            [str(candidate), "-c", code], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _reports_version(candidate: Path, version: str) -> bool:
    return _ask(candidate, "import sys; print('%d.%d' % sys.version_info[:2])") == version


def _what_it_is(candidate: Path) -> str:
    full = _ask(candidate, "import sys; print(sys.version.split()[0])")
    return f"it is Python {full}" if full else "it does not run as a Python interpreter"


SYSTEM_PREFIXES = {Path("/"), Path("/usr"), Path("/usr/local")}


@dataclass(frozen=True)
class Interpreter:
    path: Path
    version: str
    prefix: Path  # sys.base_prefix: the installation tree

    @property
    def relocatable(self) -> bool:
        """A self-contained tree (pyenv, uv, a conda-like build) that can be copied whole.
        A distribution's /usr python cannot: environments from it are virtualenvs."""
        return self.prefix.resolve() not in SYSTEM_PREFIXES and (self.prefix / "lib").is_dir()


def describe_interpreter(path: Path) -> Interpreter:
    code = "import sys; print('%d.%d' % sys.version_info[:2]); print(sys.base_prefix)"
    out = subprocess.run(
        [str(path), "-c", code], capture_output=True, text=True, timeout=30, check=True
    ).stdout.splitlines()
    return Interpreter(path=path, version=out[0], prefix=Path(out[1]))
