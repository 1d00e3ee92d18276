"""Pins PyPI has only as source are built with the build requirements of their own
release, not of the recipe's date: a real pip, a real dated index over an index the test
serves on 127.0.0.1 (PEP 691, with upload times)."""

from __future__ import annotations

import asyncio
import io
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from swegreen.dated_index import DatedIndex
from swegreen.errors import EnvSetupFailed
from swegreen.procs import run_process
from swegreen.source_builds import (
    TAGS_SCRIPT,
    SourceOnly,
    build_wheels,
    find_source_only,
    pins,
    source_only,
)

from .helpers import json_index, wheel_bytes

BACKEND = """
import os, zipfile
import oldtool

WHEEL = "Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if oldtool.VERSION != "1.0":
        raise SystemExit("needsold builds only with oldtool 1.0, not " + oldtool.VERSION)
    name = "needsold-1.0-py3-none-any.whl"
    info = "needsold-1.0.dist-info/"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        z.writestr("needsold.py", "BUILT_WITH = %r\\n" % oldtool.VERSION)
        z.writestr(info + "METADATA", "Metadata-Version: 2.1\\nName: needsold\\nVersion: 1.0\\n")
        z.writestr(info + "WHEEL", WHEEL)
        z.writestr(info + "RECORD", "")
    return name
"""


def sdist() -> bytes:
    data = io.BytesIO()
    files = {
        "pyproject.toml": '[build-system]\nrequires = ["oldtool"]\nbuild-backend = "backend"\n'
        'backend-path = ["."]\n',
        "backend.py": BACKEND,
        "PKG-INFO": "Metadata-Version: 2.1\nName: needsold\nVersion: 1.0\n",
    }
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        for name, text in files.items():
            body = text.encode()
            info = tarfile.TarInfo(f"needsold-1.0/{name}")
            info.size, info.mtime = len(body), 0
            tar.addfile(info, io.BytesIO(body))
    return data.getvalue()


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
    "needsold": [("needsold-1.0.tar.gz", "2020-06-01T12:00:00Z", sdist())],
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


def test_a_source_only_pin_builds_with_the_requirements_of_its_release(
    upstream: str, tmp_path: Path
) -> None:
    index = DatedIndex(upstream, {})
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_NO_INPUT": "1"}
    log: list[str] = []

    async def step(argv: list[str], what: str, *, extra_env=None, **_: object) -> None:
        result = await run_process(
            argv, cwd=tmp_path, env={**env, **(extra_env or {})}, timeout=600
        )
        log.append(result.output)
        if not result.ok:
            raise EnvSetupFailed(f"{what}: exited {result.returncode}", log_tail=result.tail())

    async def main() -> None:
        recipe_day = await index.url("2024-08-01")
        tags = await run_process([sys.executable, "-c", TAGS_SCRIPT], cwd=tmp_path, env=env)
        todo = await find_source_only(
            pins(["needsold==1.0", "oldtool==2.0"]), recipe_day, set(tags.output.split())
        )
        assert todo == [SourceOnly("needsold", "1.0", "2020-06-01")]

        # as of the recipe's date, its build requirement is oldtool 2.0: the build fails
        async def recipe_date(_day: str) -> str:
            return recipe_day

        with pytest.raises(EnvSetupFailed):
            await build_wheels(Path(sys.executable), todo, tmp_path / "late", recipe_date, step)
        assert "needsold builds only with oldtool 1.0, not 2.0" in log[-1]
        # as of its own release: oldtool 1.0
        await build_wheels(Path(sys.executable), todo, tmp_path / "wheels", index.url, step)

    try:
        asyncio.run(main())
    finally:
        index.close()
    (built,) = (tmp_path / "wheels").glob("needsold-1.0-*.whl")
    with zipfile.ZipFile(built) as z:
        assert z.read("needsold.py") == b"BUILT_WITH = '1.0'\n"
