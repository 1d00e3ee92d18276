"""The dated index: pip, and every build environment pip makes, sees the index as it was
on the recipe's date. Real pip, real HTTP on 127.0.0.1, a test-made upstream index."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from swegreen.environments.dated_index import DatedIndex, index_env

from .helpers import json_index, wheel_bytes

OLD, NEW = "2020-06-01T00:00:00Z", "2025-06-01T00:00:00Z"


def wheel(directory: Path, name: str, version: str, files: dict[str, str]) -> Path:
    path = directory / f"{name}-{version}-py3-none-any.whl"
    path.write_bytes(wheel_bytes(name, version, files))
    return path


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[str]:
    """An index that speaks only the JSON simple API, with buildhelper 1.0 (2020) and 2.0
    (2025)."""
    files = tmp_path / "files"
    files.mkdir()
    entries = []
    for version, when in (("1.0", OLD), ("2.0", NEW)):
        w = wheel(
            files, "buildhelper", version, {"buildhelper/__init__.py": f"VERSION = {version!r}\n"}
        )
        entries.append((w.name, when, w.read_bytes()))
    with json_index({"buildhelper": entries}) as url:
        yield url


def pip(*args: str, index: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd),
        "PIP_CONFIG_FILE": "/dev/null",  # no host pip config (find-links, constraints)
        "PIP_INDEX_URL": index,  # inherited by pip's build environments, as in a build
        "PIP_NO_CACHE_DIR": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        **extra,
    }
    return subprocess.run(
        [sys.executable, "-m", "pip", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def project_needing_the_old_helper(root: Path) -> Path:
    """A project whose build (PEP 517, isolated, its backend in-tree) works only with the
    build requirement as it was in 2020, as an old astropy with its old helpers."""
    proj = root / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["buildhelper"]\nbuild-backend = "backend"\n'
        'backend-path = ["."]\n'
    )
    (proj / "backend.py").write_text(
        "import os, zipfile, buildhelper\n"
        "def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n"
        "    assert buildhelper.VERSION == '1.0', 'built with buildhelper ' + buildhelper.VERSION\n"
        "    name = 'proj-0.1-py3-none-any.whl'\n"
        "    with zipfile.ZipFile(os.path.join(wheel_directory, name), 'w') as z:\n"
        "        z.writestr('proj/__init__.py', '')\n"
        "        z.writestr('proj-0.1.dist-info/METADATA',\n"
        "                   'Metadata-Version: 2.1\\nName: proj\\nVersion: 0.1\\n')\n"
        "        z.writestr('proj-0.1.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: t\\n'\n"
        "                   'Root-Is-Purelib: true\\nTag: py3-none-any\\n')\n"
        "        z.writestr('proj-0.1.dist-info/RECORD', '')\n"
        "    return name\n"
    )
    return proj


def test_pip_sees_only_what_was_uploaded_before_the_date(upstream: str, tmp_path: Path) -> None:
    index = DatedIndex(upstream, index_env(os.environ))

    async def urls() -> list[str]:
        return [
            await index.url("2021-01-01"),
            await index.url("2026-01-01"),
            await index.url("2021-01-01", ("BuildHelper",)),
        ]

    try:
        then, now, exempt = asyncio.run(urls())
        for url, version in ((then, "1.0"), (now, "2.0"), (exempt, "2.0")):
            out = pip("download", "--no-deps", "-d", "dl", "buildhelper", index=url, cwd=tmp_path)
            assert out.returncode == 0, out.stderr
            assert (tmp_path / "dl" / f"buildhelper-{version}-py3-none-any.whl").exists()
            for w in (tmp_path / "dl").iterdir():
                w.unlink()
    finally:
        index.close()


def test_build_isolation_gets_build_requirements_as_of_the_date(
    upstream: str, tmp_path: Path
) -> None:
    proj = project_needing_the_old_helper(tmp_path)
    # straight from today's index, the isolated build takes today's helper and fails
    today = pip("wheel", "--no-deps", "-w", "out", str(proj), index=upstream, cwd=tmp_path)
    assert today.returncode != 0 and "built with buildhelper 2.0" in today.stdout + today.stderr
    index = DatedIndex(upstream, index_env(os.environ))
    try:
        url = asyncio.run(index.url("2021-01-01"))
        assert url.endswith("/2021-01-01/-/")
        built = pip("wheel", "--no-deps", "-w", "out", str(proj), index=url, cwd=tmp_path)
        assert built.returncode == 0, built.stdout + built.stderr
        assert (tmp_path / "out" / "proj-0.1-py3-none-any.whl").exists()
    finally:
        index.close()


def test_a_recording_index_keeps_what_an_install_downloaded_so_it_runs_again_offline(
    upstream: str, tmp_path: Path
) -> None:
    """An install through a recording index (a prepared workspace's) leaves every file it
    and its build isolation downloaded in the wheelhouse; the same install then runs with
    no index at all (an evaluate task with no network), and only thanks to that."""
    proj = project_needing_the_old_helper(tmp_path)
    wheelhouse = tmp_path / "wheelhouse"
    index = DatedIndex(upstream, index_env(os.environ), record=wheelhouse)
    try:
        url = asyncio.run(index.url("2021-01-01"))
        built = pip("wheel", "--no-deps", "-w", "first", str(proj), index=url, cwd=tmp_path)
        assert built.returncode == 0, built.stdout + built.stderr
    finally:
        index.close()
    assert sorted(p.name for p in wheelhouse.iterdir()) == ["buildhelper-1.0-py3-none-any.whl"]
    nowhere = "http://127.0.0.1:9/simple"  # nothing listens: any index use would fail
    offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse)}
    again = pip(
        "wheel", "--no-deps", "-w", "again", str(proj), index=nowhere, cwd=tmp_path, **offline
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert (tmp_path / "again" / "proj-0.1-py3-none-any.whl").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    without = pip(
        "wheel", "--no-deps", "-w", "none", str(proj), index=nowhere, cwd=tmp_path,
        PIP_NO_INDEX="1", PIP_FIND_LINKS=str(empty),
    )  # fmt: skip
    assert without.returncode != 0 and "buildhelper" in without.stdout + without.stderr


def test_a_recorded_file_must_have_the_hash_its_index_gave(upstream: str, tmp_path: Path) -> None:
    """A file whose bytes are not the ones its page named is refused and never kept."""
    from swegreen.environments.dated_index_server import _download

    listing = json.loads(
        urllib.request.urlopen(
            urllib.request.Request(
                f"{upstream}/buildhelper/",
                headers={"Accept": "application/vnd.pypi.simple.v1+json"},
            )
        ).read()
    )
    first = listing["files"][0]
    target = tmp_path / first["filename"]
    with pytest.raises(ValueError, match="does not have the sha256"):
        _download(first["url"], target, "0" * 64)
    assert list(tmp_path.iterdir()) == [tmp_path / "files"]  # nothing kept, no partial file
    _download(first["url"], target, first["hashes"]["sha256"])
    assert target.read_bytes()[:2] == b"PK"


def test_an_upstream_without_upload_times_is_refused_clearly(tmp_path: Path) -> None:
    """Files whose upload time the index does not give are never served as old enough."""
    from swegreen.environments.dated_index_server import cutoff_of, render, uploaded_before

    cutoff = cutoff_of("2021-01-01")
    assert not uploaded_before({"filename": "x-1.whl"}, cutoff)
    assert uploaded_before({"upload-time": "2021-01-01T12:00:00.5Z"}, cutoff)
    assert not uploaded_before({"upload-time": "2021-01-02T00:00:00Z"}, cutoff)
    page = render(
        "x",
        [
            {
                "filename": "x-1.whl",
                "url": "https://h/x-1.whl",
                "hashes": {"sha256": "ab"},
                "requires-python": ">=3.6",
                "yanked": "broken",
            }
        ],
    )
    assert 'href="https://h/x-1.whl#sha256=ab"' in page
    assert 'data-requires-python="&gt;=3.6"' in page and 'data-yanked="broken"' in page
