"""Pins PyPI has only as source are built with the build requirements of their own
release, not of the recipe's date: a real pip, a real dated index over an index the test
serves on 127.0.0.1 (PEP 691, with upload times)."""

from __future__ import annotations

import asyncio
import io
import json
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from swegreen.core.errors import EnvSetupFailed
from swegreen.environments.dated_index import DatedIndex
from swegreen.environments.source_builds import (
    TARGET_SCRIPT,
    SourceOnly,
    Target,
    build_requires,
    build_wheels,
    find_source_only,
    pins,
    source_only,
)
from swegreen.processes.procs import run_process

from .helpers import json_index, wheel_bytes

BACKEND = """
import os, zipfile
{imports}

NAME, VERSION = {name!r}, {version!r}
WHEEL = "Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
{check}
    wheel = NAME + "-" + VERSION + "-py3-none-any.whl"
    info = NAME + "-" + VERSION + ".dist-info/"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w") as z:
        z.writestr(NAME + ".py", {body})
        meta = "Metadata-Version: 2.1\\nName: " + NAME + "\\nVersion: " + VERSION + "\\n"
        z.writestr(info + "METADATA", meta)
        z.writestr(info + "WHEEL", WHEEL)
        z.writestr(info + "RECORD", "")
    return wheel
"""


def sdist(
    name: str,
    version: str,
    requires: list[str],
    *,
    imports: str = "",
    check: str = "    pass",
    body: str = "'VERSION = %r\\n' % VERSION",
) -> bytes:
    """An sdist whose in-tree build backend runs ``check`` before writing its wheel."""
    backend = BACKEND.format(imports=imports, name=name, version=version, check=check, body=body)
    pyproject = (
        f'[build-system]\nrequires = {json.dumps(requires)}\nbuild-backend = "backend"\n'
        'backend-path = ["."]\n'
    )
    files = {
        "pyproject.toml": pyproject,
        "backend.py": backend,
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
    }
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        for filename, text in files.items():
            raw = text.encode()
            info = tarfile.TarInfo(f"{name}-{version}/{filename}")
            info.size, info.mtime = len(raw), 0
            tar.addfile(info, io.BytesIO(raw))
    return data.getvalue()


NEEDSOLD = sdist(
    "needsold",
    "1.0",
    ["oldtool"],
    imports="import oldtool",
    check=(
        "    if oldtool.VERSION != '1.0':\n"
        "        raise SystemExit('needsold builds only with oldtool 1.0, not ' + oldtool.VERSION)"
    ),
    body="'BUILT_WITH = %r\\n' % oldtool.VERSION",
)
# like numpy 1.17.3 for Python 3.9: only as source, and that source does not build here
OLD_BASE = sdist(
    "basepkg", "0.9", [], check="    raise SystemExit('basepkg 0.9 does not build here')"
)
# like scipy 1.5.2: its build pins that old base (for this interpreter only) and needs the
# rest of its build requirements as of its own release
DEPENDENT = sdist(
    "dependent",
    "2.0",
    ["basepkg==0.9; python_version >= '3'", "basepkg==0.1; python_version < '3'", "oldtool"],
    imports="import basepkg, oldtool",
    check=(
        "    if oldtool.VERSION != '1.0':\n"
        "        raise SystemExit('dependent builds only with oldtool 1.0, not ' + oldtool.VERSION)"
    ),
    body="'BUILT_AGAINST = %r\\n' % basepkg.VERSION",
)


# project -> [(filename, upload time, bytes)]
PROJECTS = {
    "oldtool": [
        (
            "oldtool-1.0-py3-none-any.whl",
            "2020-01-01T00:00:00Z",
            wheel_bytes("oldtool", "1.0", {"oldtool.py": 'VERSION = "1.0"\n'}),
        ),
        (
            "oldtool-2.0-py3-none-any.whl",
            "2024-01-01T00:00:00Z",
            wheel_bytes("oldtool", "2.0", {"oldtool.py": 'VERSION = "2.0"\n'}),
        ),
    ],
    "needsold": [("needsold-1.0.tar.gz", "2020-06-01T12:00:00Z", NEEDSOLD)],
    "basepkg": [
        ("basepkg-0.9.tar.gz", "2019-06-01T00:00:00Z", OLD_BASE),
        ("basepkg-1.0.tar.gz", "2020-09-01T00:00:00Z", sdist("basepkg", "1.0", [])),
    ],
    "dependent": [("dependent-2.0.tar.gz", "2020-07-01T00:00:00Z", DEPENDENT)],
}


@pytest.fixture
def upstream() -> Iterator[str]:
    """A PEP 691 index with upload times, and its files, on 127.0.0.1."""
    with json_index(PROJECTS) as url:
        yield url


def test_pins_and_what_is_source_only() -> None:
    lock = [
        "numpy==1.19.2",
        "    # via scikit-learn",
        "scipy==1.5.2 ; python_version >= '3.6'",
        "-e .",
        "cython>=0.29",
        "pandas<2",
    ]
    assert pins(lock) == [("numpy", "1.19.2"), ("scipy", "1.5.2")]
    files = [
        {
            "filename": "numpy-1.19.2-cp38-cp38-manylinux2010_x86_64.whl",
            "upload-time": "2020-09-10T14:00:00Z",
        },
        {"filename": "numpy-1.19.2.zip", "upload-time": "2020-09-10T13:00:00Z"},
    ]
    tags39 = {"cp39-cp39-manylinux2010_x86_64", "py3-none-any"}
    tags38 = {"cp38-cp38-manylinux2010_x86_64", "py3-none-any"}
    assert source_only("numpy", "1.19.2", files, tags39) == SourceOnly(
        "numpy", "1.19.2", "2020-09-10"
    )
    assert source_only("numpy", "1.19.2", files, tags38) is None  # a wheel it can install
    assert source_only("numpy", "1.19.3", files, tags39) is None  # not the pinned version


def _step(tmp_path: Path, log: list[str]) -> tuple[dict[str, str], Any]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_NO_INPUT": "1"}

    async def step(argv: list[str], what: str, *, extra_env=None, **_: object) -> None:
        result = await run_process(
            argv, cwd=tmp_path, env={**env, **(extra_env or {})}, timeout=600
        )
        log.append(f"# {what}\n{result.output}")
        if not result.ok:
            raise EnvSetupFailed(f"{what}: exited {result.returncode}", log_tail=result.tail())

    return env, step


async def _target(env: dict[str, str], tmp_path: Path, lock: list[str], index_url: str) -> Target:
    probe = await run_process([sys.executable, "-c", TARGET_SCRIPT], cwd=tmp_path, env=env)
    return Target.from_probe(Path(sys.executable), probe.output, dict(pins(lock)), index_url)


def test_a_source_only_pin_builds_with_the_requirements_of_its_release(
    upstream: str, tmp_path: Path
) -> None:
    index = DatedIndex(upstream, {})
    log: list[str] = []
    env, step = _step(tmp_path, log)

    async def main() -> None:
        recipe_day = await index.url("2024-08-01")
        lock = ["needsold==1.0", "oldtool==2.0"]
        target = await _target(env, tmp_path, lock, recipe_day)
        todo = await find_source_only(pins(lock), recipe_day, set(target.tags))
        assert todo == [SourceOnly("needsold", "1.0", "2020-06-01")]

        # as of the recipe's date, its build requirement is oldtool 2.0: the build fails
        async def recipe_date(_day: str) -> str:
            return recipe_day

        with pytest.raises(EnvSetupFailed):
            await build_wheels(target, todo, tmp_path / "late", recipe_date, step)
        assert "needsold builds only with oldtool 1.0, not 2.0" in log[-1]
        # as of its own release: oldtool 1.0
        built = await build_wheels(target, todo, tmp_path / "wheels", index.url, step)
        assert built == [
            {"name": "needsold", "version": "1.0", "build_requirements_as_of": "2020-06-01"}
        ]

    try:
        asyncio.run(main())
    finally:
        index.close()
    (wheel,) = (tmp_path / "wheels").glob("needsold-1.0-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert z.read("needsold.py") == b"BUILT_WITH = '1.0'\n"


def test_a_build_pin_that_cannot_build_here_is_replaced_by_the_environments_version(
    upstream: str, tmp_path: Path
) -> None:
    """scipy 1.5.2 on Python 3.9, in small: its build pins a base version that is source
    only and does not build; it is built against the environment's base instead (itself
    built first), with its other build requirements as of its own release."""
    index = DatedIndex(upstream, {})
    log: list[str] = []
    env, step = _step(tmp_path, log)
    lock = ["basepkg==1.0", "dependent==2.0", "oldtool==2.0"]

    async def main() -> list[dict[str, object]]:
        recipe_day = await index.url("2024-08-01")
        target = await _target(env, tmp_path, lock, recipe_day)
        todo = await find_source_only(pins(lock), recipe_day, set(target.tags))
        # given in the lock's order; the one the other builds against is built first
        assert [p.name for p in todo] == ["basepkg", "dependent"]
        return await build_wheels(target, todo[::-1], tmp_path / "wheels", index.url, step)

    try:
        built = asyncio.run(main())
    finally:
        index.close()
    assert built == [
        {"name": "basepkg", "version": "1.0", "build_requirements_as_of": "2020-09-01"},
        {
            "name": "dependent",
            "version": "2.0",
            "build_requirements_as_of": "2020-07-01",
            "built_against_environment": {"basepkg": "1.0 (its build pins 0.9, source only here)"},
        },
    ]
    (wheel,) = (tmp_path / "wheels").glob("dependent-2.0-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert z.read("dependent.py") == b"BUILT_AGAINST = '1.0'\n"
    assert "basepkg 0.9 does not build here" not in "\n".join(log)
    assert not (tmp_path / "build-dependent").exists()  # the build virtualenv is gone


def test_build_requires_are_read_from_the_sdist(tmp_path: Path) -> None:
    path = tmp_path / "dependent-2.0.tar.gz"
    path.write_bytes(DEPENDENT)
    assert build_requires(path)[-1] == "oldtool"
    legacy = tmp_path / "legacy-1.0.zip"
    with zipfile.ZipFile(legacy, "w") as z:
        z.writestr("legacy-1.0/setup.py", "")
    assert build_requires(legacy) == ["setuptools>=40.8.0", "wheel"]


def legacy_sdist(name: str, version: str) -> bytes:
    """A setup.py-only sdist (no pyproject.toml), like markupsafe 1.0."""
    setup = f"from setuptools import setup, Feature\nsetup(name={name!r}, version={version!r})\n"
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        for filename, text in {"setup.py": setup, "PKG-INFO": "Name: x\n"}.items():
            raw = text.encode()
            info = tarfile.TarInfo(f"{name}-{version}/{filename}")
            info.size, info.mtime = len(raw), 0
            tar.addfile(info, io.BytesIO(raw))
    return data.getvalue()


def test_a_setup_py_only_sdist_that_fails_is_built_again_with_its_days_setuptools(
    tmp_path: Path,
) -> None:
    """markupsafe 1.0 for Python 3.6: pip builds a setup.py-only sdist with the
    environment's setuptools 59 (no ``Feature``, which its setup.py imports). Only such an
    sdist is built again, in a virtualenv of its own with setuptools and wheel as of its
    release; an sdist that declares its build requirements fails as before. The commands
    are recorded (the fallback's real run is astropy 1.3's environment, docs/validation.md)."""
    projects = {
        "legacy": [("legacy-1.0.tar.gz", "2017-03-07T00:00:00Z", legacy_sdist("legacy", "1.0"))],
        "declared": [("declared-1.0.tar.gz", "2017-03-07T00:00:00Z", sdist("declared", "1.0", []))],
    }
    calls: list[tuple[str, str]] = []

    async def step(argv: list[str], what: str, *, extra_env=None, **_: object) -> None:
        calls.append((" ".join(argv[1:]), (extra_env or {}).get("PIP_INDEX_URL", "")))
        if argv[1:4] == ["-m", "pip", "wheel"] and "--no-build-isolation" not in argv:
            raise EnvSetupFailed(f"{what} exited 1")  # the environment's setuptools

    with json_index(projects) as url:
        index = DatedIndex(url, {})
        try:

            async def main(name: str) -> list[dict[str, object]]:
                recipe_day = await index.url("2024-08-01")
                env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
                target = await _target(env, tmp_path, [f"{name}==1.0"], recipe_day)
                todo = await find_source_only([(name, "1.0")], recipe_day, {"py3-none-any"})
                return await build_wheels(target, todo, tmp_path / name, index.url, step)

            built = asyncio.run(main("legacy"))
            with pytest.raises(EnvSetupFailed):
                asyncio.run(main("declared"))
        finally:
            index.close()
    assert built == [
        {
            "name": "legacy",
            "version": "1.0",
            "build_requirements_as_of": "2017-03-07",
            "built_with_setuptools_of_its_release": True,
        }
    ]
    commands = [c for c, _ in calls]
    assert commands[1].startswith("-m venv ")
    assert "install --no-input --force-reinstall -c" in commands[2]
    assert commands[2].endswith("setuptools wheel") and "/2017-03-07/" in calls[2][1]
    assert "wheel --no-deps --no-build-isolation" in commands[3]
    # the declared one: its one isolated build failed, and nothing more was tried
    assert len(calls) == 5 and "--no-build-isolation" not in calls[4][0]
