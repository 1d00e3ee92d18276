"""Downloads during a build come from the offline sources directory, only with upstream's
hash; a build that still lacks one fails with a reason that names the file to provide."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from swegreen.core.classify import Status
from swegreen.core.recipes import Recipe, RecipeBook, verified_recipes
from swegreen.environments.build_sources import SHIM_LOG, Download, OfflineSources, known_downloads
from swegreen.evaluation.engine import Engine, LocalSettings, build_engine
from swegreen.sample import SampleBenchmark

from .conftest import RunSample, sample_config

URL = "http://127.0.0.1:9/downloads/extra-1.0.tgz"  # nothing listens: only the shim answers


def archive() -> bytes:
    """A source archive holding one file."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        body = b"EXTRA = 1\n"
        info = tarfile.TarInfo("extra-1.0/extra.py")
        info.size = len(body)
        info.mtime = 0
        tar.addfile(info, io.BytesIO(body))
    return data.getvalue()


def download(blob: bytes, **extra: object) -> Download:
    return Download(
        file="extra-1.0.tgz",
        sha256=hashlib.sha256(blob).hexdigest(),
        urls=(URL,),
        **extra,  # type: ignore[arg-type]
    )


def run_wget(shim: Path, env_extra: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **env_extra, "PATH": f"{shim}:/usr/bin:/bin"}
    return subprocess.run(
        ["wget", "-O", "got.tgz", URL], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_the_shim_serves_a_known_url_only_with_upstreams_hash(tmp_path: Path) -> None:
    blob = archive()
    sources_dir = tmp_path / "sources"
    sources_dir.mkdir()
    (sources_dir / "extra-1.0.tgz").write_bytes(blob)
    sha = hashlib.sha256(blob).hexdigest()
    sources = OfflineSources(sources_dir, (download(blob, matplotlib_cache=True),))
    home = tmp_path / "home"
    staged = sources.stage(home, tmp_path / "shim")
    assert staged.used() == []  # offered is not used: provenance says only what was taken
    # matplotlib's own download cache, keyed by the hash; reading it counts
    assert (home / ".cache" / "matplotlib" / sha).read_bytes() == blob
    assert staged.used() == [{"file": "extra-1.0.tgz", "sha256": sha, "via": "matplotlib's cache"}]

    work = tmp_path / "work"
    work.mkdir()
    served = run_wget(tmp_path / "shim", staged.env, work)
    assert served.returncode == 0, served.stderr
    assert (work / "got.tgz").read_bytes() == blob
    log = (tmp_path / "shim" / SHIM_LOG).read_text().splitlines()
    assert [json.loads(line)["file"] for line in log] == ["extra-1.0.tgz"]
    assert staged.used() == [{"file": "extra-1.0.tgz", "sha256": sha, "via": "wget"}]

    # another file under the same name (another version, say) is never served
    (sources_dir / "extra-1.0.tgz").write_bytes(blob + b"tampered")
    (work / "got.tgz").unlink()
    other = OfflineSources(sources_dir, (download(blob, matplotlib_cache=True),))
    staged = other.stage(tmp_path / "home2", tmp_path / "shim2")
    assert not (tmp_path / "home2" / ".cache" / "matplotlib" / sha).exists()
    refused = run_wget(tmp_path / "shim2", staged.env, work)
    assert refused.returncode != 0  # the real wget (or its absence) answers: no such host
    assert not (work / "got.tgz").exists() or (work / "got.tgz").read_bytes() != blob + b"tampered"
    assert other.missing_in(f"wget {URL} failed") == list(other.downloads)
    advice = other.advice(other.missing_in(URL))
    assert "extra-1.0.tgz" in advice and hashlib.sha256(blob).hexdigest() in advice
    assert str(sources_dir) in advice


def test_the_known_downloads_are_upstreams() -> None:
    """qhull's hash is matplotlib's LOCAL_QHULL_HASH, FreeType 2.6.1's is its table's,
    jQuery UI's is setup.py's."""
    known = {d.file: d for d in known_downloads()}
    assert known["qhull-2020-src-8.0.2.tgz"].sha256 == (
        "b5c2d7eb833278881b952c8a52d20179eab87766b00b865000469a45c1838b7e"
    )
    assert known["freetype-2.6.1.tar.gz"].sha256 == (
        "0a3c7dfbda6da1e8fce29232e8e96d987ababbbf71ebc8c75659e4132c367014"
    )
    assert known["jquery-ui-1.12.1.zip"].sha256 == (
        "f8233674366ab36b2c34c577ec77a3d70cac75d2e387d8587f3836345c0f624d"
    )
    assert all(d.matplotlib_cache for d in known.values())


def test_each_matplotlib_version_needs_the_files_its_build_asks_for() -> None:
    """qhull where the recipe's pre_install fetches it; FreeType 2.6.1 from 3.3 on and
    jQuery UI before it (setupext.py and setup.py fetch those themselves)."""
    sources = OfflineSources(None)
    book = verified_recipes()
    need = {}
    for version in ("3.0", "3.1", "3.3", "3.5", "3.6", "3.7"):
        recipe = book.versions("matplotlib/matplotlib")[version]
        steps = [*recipe.pre_install, recipe.install or ""]
        need[version] = {
            d.file for d in sources.needed_for("matplotlib/matplotlib", version, steps)
        }
    qhull, freetype, jquery = (
        "qhull-2020-src-8.0.2.tgz",
        "freetype-2.6.1.tar.gz",
        "jquery-ui-1.12.1.zip",
    )
    assert need["3.0"] == need["3.1"] == {qhull, jquery}
    assert need["3.3"] == need["3.5"] == need["3.6"] == need["3.7"] == {qhull, freetype}
    assert sources.needed_for("django/django", "4.0", ["pip install -e ."]) == []


@pytest.fixture
def downloading_engine(settings: LocalSettings, sample: SampleBenchmark, host_env, tmp_path):
    """The sample's calculator with a pre_install that downloads and unpacks an archive."""
    blob = archive()
    count = tmp_path / "setups"
    recipe = Recipe(
        python="host",
        packages=("pytest==8.3.5",),
        pre_install=(
            f"echo setup >> {count}",
            f'wget -O "$TMPDIR/extra.tgz" "{URL}"',
            'tar -xzf "$TMPDIR/extra.tgz" -C "$SWEGREEN_REPO"',
            'test -f "$SWEGREEN_REPO/extra-1.0/extra.py"',
        ),
        test_cmd="pytest --no-header -rA --tb=no -p no:cacheprovider",
        eval_timeout=120,
    )
    book = RecipeBook({"sample/calculator": {"1.0": recipe}})
    sources_dir = tmp_path / "sources"
    sources_dir.mkdir()
    local = settings.model_copy(
        update={"cache_dir": tmp_path / "cache", "offline_sources": sources_dir}
    )
    config = sample_config(sample, base_validation=True)
    engines = []

    def make() -> Engine:
        engine = build_engine(local, config, host_env, recipes=book)
        assert engine.testbeds.sources.directory == sources_dir  # the setting reaches it
        engine.testbeds.sources = OfflineSources(sources_dir, (download(blob),))
        engines.append(engine)
        return engine

    yield make, sources_dir, blob, count
    for engine in engines:
        engine.close()


def test_a_build_that_downloads_runs_offline_and_says_so(
    downloading_engine, run_sample: RunSample
) -> None:
    make, sources_dir, blob, count = downloading_engine
    ids = ["sample__calculator-1"]
    missing = run_sample(
        "gold", run_id="no-source", engine=make(), instance_ids=ids, base_validation=True
    )
    (row,) = missing.results
    assert (row.status, row.reason) == (Status.ERROR, "env_setup_failed")
    assert "extra-1.0.tgz" in row.detail and hashlib.sha256(blob).hexdigest() in row.detail
    assert str(sources_dir) in row.detail
    assert row.attempts == 1  # permanent: trying again cannot help
    # known to be missing before anything was spent: no setup ran, no environment was built
    assert not count.exists()
    assert row.durations.env_build == 0.0

    (sources_dir / "extra-1.0.tgz").write_bytes(blob)
    served = run_sample(  # a new run (its own engine) tries again
        "gold", run_id="with-source", engine=make(), instance_ids=ids, base_validation=True
    )
    (row,) = served.results
    assert row.status == Status.RESOLVED, row.detail
    assert row.environment["build_sources"] == [
        {"file": "extra-1.0.tgz", "sha256": hashlib.sha256(blob).hexdigest(), "via": "wget"}
    ]


def test_a_failed_build_names_every_file_its_row_needs_at_once_in_a_folder_made_for_them(
    settings: LocalSettings, sample: SampleBenchmark, host_env, tmp_path: Path, run_sample
) -> None:
    """The setup stops at its first missing download; the error still names every file
    the row needs (the one its recipe fetches, and one its setup.py would fetch next:
    ``needed_by``), each with its hash and where to get it, and the folder to put them
    in, which the engine has made. With both files there, the row resolves."""
    blob = archive()
    second = b"second archive\n" * 64
    later = Download(
        file="later-2.0.zip",
        sha256=hashlib.sha256(second).hexdigest(),
        urls=("http://127.0.0.1:9/downloads/later-2.0.zip",),
        needed_by=(("sample/calculator", ">=1.0"),),
        where_else="a mirror the test knows",
    )
    unrelated = Download(
        file="other-9.zip",
        sha256="0" * 64,
        urls=("http://127.0.0.1:9/other-9.zip",),
        needed_by=(("sample/calculator", "<1.0"), ("sample/ledger", ">=0")),
    )
    recipe = Recipe(
        python="host",
        packages=("pytest==8.3.5",),
        pre_install=(
            f'wget -O "$TMPDIR/extra.tgz" "{URL}"',
            # what setup.py would do next, as matplotlib's does for FreeType
            f'wget -O "$TMPDIR/later.zip" "{later.urls[0]}"',
            f'test "$(sha256sum < "$TMPDIR/later.zip" | cut -d" " -f1)" = {later.sha256}',
        ),
        test_cmd="pytest --no-header -rA --tb=no -p no:cacheprovider",
        eval_timeout=120,
    )
    book = RecipeBook({"sample/calculator": {"1.0": recipe}})
    sources_dir = tmp_path / "not-yet" / "sources"
    local = settings.model_copy(
        update={"cache_dir": tmp_path / "cache", "offline_sources": sources_dir}
    )

    def run(run_id: str):
        engine = build_engine(local, sample_config(sample), host_env, recipes=book)
        engine.testbeds.sources = OfflineSources(sources_dir, (download(blob), later, unrelated))
        try:
            (row,) = run_sample(
                "gold", run_id=run_id, engine=engine, instance_ids=["sample__calculator-1"]
            ).results
        finally:
            engine.close()
        return row

    row = run("missing-both")
    assert (row.status, row.reason) == (Status.ERROR, "env_setup_failed")
    assert "2 file(s)" in row.detail
    for name, digest, url in (
        ("extra-1.0.tgz", hashlib.sha256(blob).hexdigest(), URL),
        (later.file, later.sha256, later.urls[0]),
    ):
        assert name in row.detail and digest in row.detail and url in row.detail
    assert "a mirror the test knows" in row.detail and "other-9.zip" not in row.detail
    assert str(sources_dir.resolve()) in row.detail and sources_dir.is_dir()  # made for them

    (sources_dir / "extra-1.0.tgz").write_bytes(blob)
    (sources_dir / later.file).write_bytes(second)
    row = run("with-both")
    assert row.status == Status.RESOLVED, row.detail
    assert {s["file"] for s in row.environment["build_sources"]} == {"extra-1.0.tgz", later.file}


def test_a_file_its_urls_cannot_give_is_fetched_from_a_byte_identical_copy(
    downloading_engine, run_sample: RunSample, tmp_path: Path
) -> None:
    """The URL answers nothing (as qhull.org does here); a copy elsewhere with the same
    sha256 (as Debian's pool keeps qhull's tarball) is fetched into the offline sources
    before the row builds, and the row resolves. A copy with other bytes is refused."""
    from tests.conda_channel import served

    make, sources_dir, blob, count = downloading_engine
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "same.tgz").write_bytes(blob)
    (mirror / "other.tgz").write_bytes(archive() + b"\0")
    ids = ["sample__calculator-1"]
    with served(mirror) as url:
        forged = make()
        forged.testbeds.sources = OfflineSources(
            sources_dir, (download(blob, mirrors=(f"{url}/other.tgz",)),)
        )
        (row,) = run_sample("gold", run_id="forged-copy", engine=forged, instance_ids=ids).results
        assert (row.status, row.reason) == (Status.ERROR, "env_setup_failed")
        assert not (sources_dir / "extra-1.0.tgz").exists() and not count.exists()
        engine = make()
        engine.testbeds.sources = OfflineSources(
            sources_dir, (download(blob, mirrors=(f"{url}/same.tgz",)),)
        )
        (row,) = run_sample("gold", run_id="from-copy", engine=engine, instance_ids=ids).results
    assert row.status == Status.RESOLVED, row.detail
    assert (sources_dir / "extra-1.0.tgz").read_bytes() == blob
    assert row.environment["build_sources"][0]["file"] == "extra-1.0.tgz"
