"""Interpreters from conda packages, on a machine that has none of its own.

conda's channels are out of this machine's reach, so the tests serve a channel of their
own (tests/conda_channel.py: this machine's CPython 3.6 and 3.7 packaged as conda-build
packages CPython, indexed by rattler) on 127.0.0.1, hide every interpreter the machine
has (a clean PATH, HOME and PYENV_ROOT elsewhere), and go through the real installation
code: rattler's solve, download, sha256 check and link, then a row's environment built
from the install and a sample row graded on it."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from swegreen.environments.conda_pythons import MARK, CondaPythons, CondaUnavailable
from tests.conda_channel import index, package_python, pyenv_tree, served

VERSIONS = ("3.6", "3.7")


@pytest.fixture(scope="module")
def channel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    trees = {v: pyenv_tree(v) for v in VERSIONS}
    if missing := [v for v, tree in trees.items() if tree is None]:
        pytest.skip(f"no CPython {', '.join(missing)} on this machine to package as conda does")
    root = tmp_path_factory.mktemp("channel")
    for tree in trees.values():
        assert tree is not None
        package_python(tree, root)
    index(root)
    with served(root) as url:
        yield url


def repodata(url: str) -> dict[str, dict[str, object]]:
    import urllib.request

    with urllib.request.urlopen(f"{url}/linux-64/repodata.json") as answer:
        return json.load(answer)["packages"]


def test_an_interpreter_is_installed_once_checked_and_marked(channel: str, tmp_path: Path) -> None:
    """The first channel out of reach, the second has it: installed from the second, with
    the sha256 its index gives, runnable from its own prefix (nothing of the tree it was
    packaged from is used); a second install finds it; an interrupted one is made again."""
    conda = CondaPythons(tmp_path / "pythons", ("http://127.0.0.1:9/gone", channel))
    python = asyncio.run(conda.install("3.6"))
    prefix = conda.prefix("3.6")
    assert python == prefix / "bin" / "python3.6"
    mark = json.loads((prefix / MARK).read_text())
    (package,) = [n for n in repodata(channel) if n.startswith("python-3.6.")]
    assert mark["package"] == package and mark["channel"] == channel
    assert mark["sha256"] == repodata(channel)[package]["sha256"]
    assert mark["source"] == "conda" and mark["version"].startswith("3.6.")
    out = subprocess.run(
        [str(python), "-c", "import sys, ssl, sqlite3; print(sys.prefix)"],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(prefix)
    libs = subprocess.run(["ldd", str(python)], capture_output=True, text=True).stdout
    (libpython,) = [
        line.split("=>")[1].split()[0] for line in libs.splitlines() if "libpython" in line
    ]
    assert Path(libpython).resolve().parent == prefix / "lib"
    before = (prefix / MARK).stat().st_mtime_ns
    assert asyncio.run(conda.install("3.6")) == python
    assert (prefix / MARK).stat().st_mtime_ns == before  # found, not made again
    (prefix / MARK).unlink()  # as a killed install leaves it
    (prefix / "bin" / "stray").write_text("left by the interrupted install")
    assert asyncio.run(conda.install("3.6")) == python
    assert (prefix / MARK).is_file() and not (prefix / "bin" / "stray").exists()


def test_a_package_whose_bytes_are_not_what_the_channel_indexed_is_refused(
    channel: str, tmp_path: Path
) -> None:
    """Another archive served under the indexed name (a file added): rattler's check of
    the index's sha256 refuses it, and nothing is left installed."""
    import urllib.request

    name = next(n for n in repodata(channel) if n.startswith("python-3.7."))
    forged_channel = tmp_path / "forged"
    (forged_channel / "linux-64").mkdir(parents=True)
    (forged_channel / "noarch").mkdir()
    for sub in ("linux-64", "noarch"):
        with urllib.request.urlopen(f"{channel}/{sub}/repodata.json") as answer:
            (forged_channel / sub / "repodata.json").write_bytes(answer.read())
    original = tmp_path / name
    with urllib.request.urlopen(f"{channel}/linux-64/{name}") as answer:
        original.write_bytes(answer.read())
    with (
        tarfile.open(original) as src,
        tarfile.open(forged_channel / "linux-64" / name, "w:bz2", compresslevel=1) as out,
    ):
        for member in src.getmembers():
            out.addfile(member, src.extractfile(member) if member.isfile() else None)
        extra = tmp_path / "sitecustomize.py"
        extra.write_text("print('planted')\n")
        out.add(extra, "lib/python3.7/sitecustomize.py")
    conda = CondaPythons(tmp_path / "pythons", ())
    with served(forged_channel) as url:
        conda = CondaPythons(tmp_path / "pythons", (url,))
        with pytest.raises(CondaUnavailable, match="hash mismatch"):
            asyncio.run(conda.install("3.7"))
    assert conda.installed("3.7") is None
    assert not conda.prefix("3.7").exists()


def test_an_image_s_stage_installs_for_its_platform_from_any_host(
    channel: str, tmp_path: Path
) -> None:
    """What container/Dockerfile's interpreter stage runs: this file alone (no swegreen
    installed), for the image's platform named explicitly."""
    script = Path(__file__).parents[1] / "shared/swegreen/environments/conda_pythons.py"
    alone = tmp_path / "conda_pythons.py"
    shutil.copy(script, alone)
    out = subprocess.run(
        [sys.executable, "-I", str(alone), "install", "--dir", str(tmp_path / "opt"),
         "--subdir", "linux-64", "--channels", channel, "3.7"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "Python 3.7." in out.stdout and "sha256" in out.stdout, out.stdout + out.stderr
    assert (tmp_path / "opt" / "linux-64" / "3.7" / MARK).is_file()
    wrong = subprocess.run(
        [sys.executable, "-I", str(alone), "install", "--dir", str(tmp_path / "opt"),
         "--subdir", "linux-aarch64", "--channels", channel, "3.7"],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert "has no Python 3.7 for linux-aarch64" in wrong.stderr, wrong.stderr


def test_a_fresh_machine_grades_rows_on_3_6_and_3_7_from_conda_packages(
    channel: str, tmp_path: Path, settings, sample, caplog: pytest.LogCaptureFixture
) -> None:
    """No Python 3.6 or 3.7 on PATH, in pyenv or uv: each is installed from the channel
    before the row clones anything (said once), the row's environment is built from it,
    the sample row resolves, and its result says where its interpreter came from."""
    from swegreen.core.classify import Status
    from swegreen.core.recipes import Recipe, RecipeBook
    from swegreen.evaluation.engine import build_engine
    from swegreen.evaluation.settings import host_environment

    from .conftest import run_rows, sample_config

    hidden = {
        **host_environment(),
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "PYENV_ROOT": str(tmp_path / "no-pyenv"),
    }
    for version in VERSIONS:
        # pytest's last releases for these versions, from PyPI (the sample's own test command)
        pin = {"3.6": "pytest==7.0.1", "3.7": "pytest==7.4.4"}[version]
        book = RecipeBook(
            {
                "sample/calculator": {
                    "1.0": Recipe(
                        python=version,
                        packages=(pin,),
                        constraints=(pin,),
                        test_cmd="pytest --no-header -rA --tb=no -p no:cacheprovider",
                        eval_timeout=300,
                    )
                }
            }
        )
        local = settings.model_copy(
            update={
                "cache_dir": tmp_path / "cache",
                "python_downloads": True,
                "python_channels": (channel,),
            }
        )
        cfg = sample_config(sample, instance_ids=["sample__calculator-1"], max_attempts=1)
        engine = build_engine(local, cfg, hidden, recipes=book)
        caplog.clear()
        try:
            with caplog.at_level(logging.WARNING, "swegreen.environments.interpreters"):
                outcome = run_rows(engine, cfg, f"conda-{version}")
        finally:
            engine.close()
        [row] = outcome.results
        assert row.status == Status.RESOLVED, row.detail
        said = [r.getMessage() for r in caplog.records if "conda packages" in r.getMessage()]
        assert len(said) == 1 and f"Python {version} is not on this machine" in said[0]
        source = row.environment["interpreter"]
        conda = CondaPythons(tmp_path / "cache" / "pythons", (channel,))
        assert source["source"] == "conda" and source["channel"] == channel
        assert source["sha256"] == conda.provenance(version)["sha256"]
        assert str(source["version"]).startswith(f"{version}.")


def test_swegreen_pythons_installs_ahead_of_a_run_and_lists_where_each_comes_from(
    channel: str, tmp_path: Path
) -> None:
    swegreen = Path(sys.executable).with_name("swegreen")
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYENV_ROOT": str(tmp_path / "no-pyenv"),
        "SWEGREEN_CACHE_DIR": str(tmp_path / "cache"),
        "SWEGREEN_PYTHON_CHANNELS": channel,
        "SWEGREEN_PYTHONS_DIR": str(tmp_path / "pythons"),
    }
    done = subprocess.run(
        [str(swegreen), "pythons", "install", "3.7"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"from {channel}, sha256 " in done.stdout
    listed = subprocess.run(
        [str(swegreen), "pythons"],
        env={**env, "SWEGREEN_PYTHON_DOWNLOADS": "0"},
        capture_output=True,
        text=True,
    )
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    assert str(tmp_path / "pythons" / "linux-64" / "3.7" / "bin" / "python3.7") in lines["3.7"]
    assert channel in lines["3.7"]
    assert "missing (`swegreen pythons install 3.5`)" in lines["3.5"]
    bad = subprocess.run(
        [str(swegreen), "pythons"],
        env={**env, "SWEGREEN_PYTHON_DOWNLOADS": "maybe"},
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "SWEGREEN_PYTHON_DOWNLOADS='maybe'" in bad.stdout
