"""Prepared workspaces: an instance's setup (pre-install, install) runs once; every
evaluation works in a private copy that points at itself and leaks nothing back."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from swegreen.core.classify import Status
from swegreen.core.dataset import Instance, load_dataset
from swegreen.core.ports import PatchResult
from swegreen.core.recipes import Recipe, RecipeBook
from swegreen.environments.dated_index import DatedIndex
from swegreen.evaluation.engine import Engine, LocalSettings, build_engine
from swegreen.evaluation.testbed import HOST_INDEX, Testbed
from swegreen.evaluation.testbeds import Testbeds
from swegreen.sample import SampleBenchmark
from swegreen.sandbox import overlay, seal

from .conftest import RunSample, nothing_mounted_under, sample_config, wait_until

PYPROJECT = (
    '[project]\\nname = "calculator"\\nversion = "0"\\n'
    '[build-system]\\nrequires = ["setuptools"]\\nbuild-backend = "setuptools.build_meta"\\n'
)


def editable_recipe(count: Path) -> Recipe:
    """The sample's recipe, plus a setup that installs the project in editable mode (as
    most Verified recipes do) and counts how often it runs."""
    return Recipe(
        python="host",
        packages=("pytest==8.3.5",),
        pre_install=(
            f"echo setup >> {count}",
            f"printf '{PYPROJECT}' > pyproject.toml",
            # what pip keeps of the setup's downloads (build requirements, say)
            'mkdir -p "$PIP_CACHE_DIR/http" && echo cached > "$PIP_CACHE_DIR/http/entry"',
        ),
        install="python -m pip install --no-build-isolation --no-index -q -e .",
        test_cmd="pytest --no-header -rA --tb=no -p no:cacheprovider",
        eval_timeout=120,
    )


def tree_digest(root: Path) -> str:
    """Content, modes and links of a whole tree: any write into it changes the digest."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            h.update(str(path.relative_to(root)).encode())
            if path.is_symlink():
                h.update(os.readlink(path).encode())
            else:
                h.update(path.read_bytes())
                h.update(str(path.stat().st_mode).encode())
    return h.hexdigest()


def where_imported(testbed: Testbed) -> str:
    return subprocess.run(
        [str(testbed.env.python), "-c", "import calculator; print(calculator.__file__)"],
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def tracked_changes(repo: Path) -> str:
    return subprocess.run(
        ["git", "-c", "safe.directory=*", "status", "--porcelain", "--untracked-files=no"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


async def stat_dirty_in_sandbox(testbeds: Testbeds, testbed: Testbed) -> list[str]:
    """The files whose stat data, as an evaluation's sandbox sees them, differ from what
    git's index holds (plumbing `diff-files` does not refresh the index: it lists them)."""
    script = testbed.host_dir / "diff-files.sh"
    script.write_text("git diff-files --name-only\n")
    log = testbed.host_dir / "diff-files.log"
    result = await testbeds.sandbox.run_script(
        script,
        cwd=testbed.repo,
        env=testbeds.test_env(testbed),
        policy=testbeds.policy_for(testbed),
        log_path=log,
        mounts=testbeds.mounts(testbed),
    )
    assert result.ok, log.read_text()
    return log.read_text().split()


def stat_dirty_on_host(repo: Path, index: Path) -> list[str]:
    """``stat_dirty_in_sandbox`` for the engine's own git, with ``index`` (plumbing
    `diff-files` neither refreshes nor writes it)."""
    return subprocess.run(
        ["git", "-c", "safe.directory=*", "diff-files", "--name-only"],
        cwd=repo,
        env={**os.environ, "GIT_INDEX_FILE": str(index)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()


@pytest.fixture
def engine_with_setup(settings: LocalSettings, sample: SampleBenchmark, host_env, tmp_path):
    count = tmp_path / "setups"
    book = RecipeBook({"sample/calculator": {"1.0": editable_recipe(count)}})
    local = settings.model_copy(update={"cache_dir": tmp_path / "cache"})
    engine = build_engine(local, sample_config(sample), host_env, recipes=book)
    yield engine, count, book
    engine.close()


def test_setup_runs_once_and_each_copy_points_at_itself_and_leaks_nothing(
    engine_with_setup, sample: SampleBenchmark
) -> None:
    engine, count, _ = engine_with_setup
    testbeds = engine.testbeds
    instance = next(
        i for i in load_dataset(str(sample.dataset)).instances if i.repo == "sample/calculator"
    )

    async def main() -> Path:
        async with testbeds.open("one", instance) as first:
            assert first.prepared is not None
            prepared_digest = tree_digest(first.prepared)
            assert where_imported(first).startswith(str(first.repo))
            assert first.env_build_seconds > 0  # it paid for the environment and the setup
            # a root engine mounts the copy over the prepared one (overlay.py), else copies
            assert overlay.is_mounted(first.repo) == overlay.can_mount()
            if overlay.is_mounted(first.repo):
                # lending it to the sandbox (as every run does) copies nothing up: the
                # prepared checkout is the sandbox's already
                testbeds.sandbox.lend([first.workspace, first.scratch])
                upper = first.host_dir / "layers" / "upper"
                assert [p for p in upper.rglob("*") if p.is_file()] == []
            # what an evaluation may do to its copy: new files, in-place edits, deletions,
            # installs
            (first.repo / "calculator" / "junk.py").write_text("JUNK = 1\n")
            (first.repo / "README.md").unlink()
            with (first.repo / "calculator" / "__init__.py").open("a") as fh:
                fh.write("LEAKED = True\n")
            site = first.site_packages
            assert site is not None
            # so is its environment view's site-packages, over the prepared environment's,
            # whose directories (never its files) are the sandbox's
            assert overlay.is_mounted(site) == overlay.can_mount()
            uid = testbeds.sandbox.isolation.sandbox_uid
            if overlay.is_mounted(site) and uid is not None:
                prepared_env = first.prepared / "env"
                entries = [(p.lstat(), p.is_symlink()) for p in prepared_env.rglob("*")]
                dirs = [st.st_uid for st, link in entries if not link and stat.S_ISDIR(st.st_mode)]
                files = [st.st_uid for st, link in entries if stat.S_ISREG(st.st_mode)]
                assert dirs and set(dirs) == {uid} and files and uid not in files
                assert site.stat().st_uid == uid
            (site / "leaked.pth").write_text("/nowhere\n")
            assert not list((first.prepared / "env").rglob("leaked.pth"))
            if overlay.is_mounted(site):
                # the write is in its upper layer, which the disk limit walks instead
                assert first.env_upper_layer is not None
                assert (first.env_upper_layer / "leaked.pth").is_file()
                assert (site, first.env_upper_layer) in testbeds.mounts(first).layers
            # the setup's pip cache, as a private copy (the eval-time install finds it)
            entry = first.scratch / "pip-cache" / "http" / "entry"
            assert entry.read_text() == "cached\n"
            entry.write_text("poisoned\n")
            async with testbeds.open("two", instance) as second:
                assert second.prepared == first.prepared
                assert second.env_build_seconds == 0.0
                assert where_imported(second).startswith(str(second.repo))
                assert not (second.repo / "calculator" / "junk.py").exists()
                assert (second.repo / "README.md").is_file()
                init = (second.repo / "calculator" / "__init__.py").read_text()
                assert "LEAKED" not in init
                assert second.site_packages is not None
                assert overlay.is_mounted(second.site_packages) == overlay.can_mount()
                assert not (second.site_packages / "leaked.pth").exists()
                assert (second.scratch / "pip-cache" / "http" / "entry").read_text() == "cached\n"
                # git's index holds the files' stat data as the sandbox sees them: its git
                # compares stat data, reading no file's bytes
                assert await stat_dirty_in_sandbox(testbeds, second) == []
                # and its copy for the engine's own `git diff`, as the engine sees them
                kept = second.prepared / "repo" / ".git" / HOST_INDEX
                assert kept.is_file() and stat_dirty_on_host(second.repo, kept) == []
                # the setup is committed (`commit -am`, as in upstream's images)
                assert tracked_changes(second.repo) == ""
            assert tree_digest(first.prepared) == prepared_digest
            return first.repo

    repo = asyncio.run(main())
    assert not overlay.is_mounted(repo) and not repo.exists()  # nothing left behind
    # the checkout is unmounted after the row, by the job that deletes it
    assert wait_until(functools.partial(nothing_mounted_under, testbeds.options.work_root))
    assert count.read_text().count("setup") == 1

    # an environment built again since (the cache cleared, say) prepares the workspace again
    (env_complete,) = (testbeds.envs.root).glob("*/.complete")
    env_complete.write_text("rebuilt")

    async def again() -> float:
        async with testbeds.open("three", instance) as third:
            assert where_imported(third).startswith(str(third.repo))
            return third.env_build_seconds

    assert asyncio.run(again()) > 0
    assert count.read_text().count("setup") == 2

    # history stores removed since (the cache cleared, say): prepared again, not broken
    shutil.rmtree(testbeds.repos.history.root)
    assert asyncio.run(again()) > 0
    assert count.read_text().count("setup") == 3


def test_evaluations_start_from_the_prepared_workspace_and_still_resolve(
    engine_with_setup, run_sample: RunSample
) -> None:
    """Gold patches resolve through the eval script's own install in the copy; a second
    run of the same instances runs no setup at all."""
    engine, count, _ = engine_with_setup
    ids = ["sample__calculator-1", "sample__calculator-2"]
    first = run_sample("gold", run_id="prep-1", engine=engine, instance_ids=ids)
    assert {r.status for r in first.results} == {Status.RESOLVED}
    assert count.read_text().count("setup") == 2  # one per instance
    again = run_sample("gold", run_id="prep-2", engine=engine, instance_ids=ids)
    assert {r.status for r in again.results} == {Status.RESOLVED}
    assert all(r.durations.env_build == 0.0 for r in again.results)
    assert count.read_text().count("setup") == 2


def test_offline_installs_get_exactly_what_the_setup_downloaded_and_no_network(
    settings: LocalSettings, sample: SampleBenchmark, host_env, tmp_path, run_sample: RunSample
) -> None:
    """``offline_installs`` (always on in the AWS pipeline): the prepared workspace's own
    install, through a recording index, downloads the project's build requirement
    (setuptools, from the package index) into its wheelhouse; the eval script's install
    then builds the patched project from that wheelhouse with no index and, under
    bubblewrap, no network. An emptied wheelhouse leaves it nothing to build with."""
    recipe = Recipe(
        python="host",
        packages=("pytest==8.3.5",),
        pre_install=(f"printf '{PYPROJECT}' > pyproject.toml",),
        install="python -m pip install -e .",  # build isolation: setuptools from the index
        test_cmd="pytest --no-header -rA --tb=no -p no:cacheprovider",
        eval_timeout=300,
    )
    book = RecipeBook({"sample/calculator": {"1.0": recipe}})
    local = settings.model_copy(update={"cache_dir": tmp_path / "cache"})
    config = sample_config(sample, offline_installs=True)
    engine = build_engine(local, config, host_env, recipes=book)
    ids = ["sample__calculator-1"]
    try:
        # a patch that touches a build input: the eval-time install runs (it is skipped
        # where it can change nothing: test_the_reinstall_is_skipped...)
        first = run_sample(GoldPlusBuildFile(), run_id="offline-1", engine=engine, instance_ids=ids)
        assert [r.status for r in first.results] == [Status.RESOLVED], first.results
        (wheelhouse,) = (tmp_path / "cache" / "prepared").glob("*/wheelhouse")
        recorded = sorted(p.name for p in wheelhouse.iterdir())
        assert any(n.startswith("setuptools-") for n in recorded), recorded
        log = (
            local.output_dir / "offline-1" / "instances" / ids[0] / "test_output.txt"
        ).read_text()
        assert f"Looking in links: {wheelhouse}" in log
        assert "Successfully installed calculator" in log
        for path in wheelhouse.iterdir():
            path.unlink()
        second = run_sample(
            GoldPlusBuildFile(), run_id="offline-2", engine=engine, instance_ids=ids
        )
        log = (
            local.output_dir / "offline-2" / "instances" / ids[0] / "test_output.txt"
        ).read_text()
        assert "Successfully installed calculator" not in log
        assert "setuptools" in log and second.results  # pip found no build requirement
    finally:
        engine.close()


def test_a_prepared_workspace_changed_behind_the_engines_back_is_prepared_again(
    engine_with_setup, sample: SampleBenchmark
) -> None:
    """The seal (sandbox/seal.py): a write into the prepared checkout, even one that puts
    the same bytes and mtime back, or a file of its environment view replaced, sets it
    aside and prepares it again, said on the row; links to its environment's files (each
    evaluation's view) and plain reuse break nothing."""
    engine, count, _ = engine_with_setup
    testbeds = engine.testbeds
    instance = next(
        i for i in load_dataset(str(sample.dataset)).instances if i.repo == "sample/calculator"
    )

    async def open_one(name: str) -> Testbed:
        async with testbeds.open(name, instance) as testbed:
            return testbed

    first = asyncio.run(open_one("one"))
    prepared = first.prepared
    assert prepared is not None and seal.broken(prepared) is None
    assert "seal_broken" not in asyncio.run(open_one("two")).provenance  # reuse: no incident
    assert count.read_text().count("setup") == 1
    some_env_file = next(p for p in (prepared / "env").rglob("*.py") if p.is_file())
    os.link(some_env_file, prepared.parent / "a-view-of-it")  # what each evaluation's view does
    assert seal.broken(prepared) is None

    def rewritten(path: Path) -> None:
        """The same bytes and mtime put back: only the change time tells."""
        st, data = path.stat(), path.read_bytes()
        path.write_bytes(data + b"# changed\n")
        path.write_bytes(data)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    def replaced(path: Path) -> None:
        data = path.read_bytes()
        path.unlink()
        path.write_bytes(data)

    for n, (tamper, target) in enumerate(
        [
            (rewritten, prepared / "repo" / "calculator" / "__init__.py"),
            (replaced, some_env_file),
        ],
        start=2,
    ):
        if not target.exists():  # the second round: the prepared-again workspace's file
            target = prepared / target.relative_to(prepared)
        tamper(target)
        assert seal.broken(prepared) is not None
        again = asyncio.run(open_one(f"tampered-{n}"))
        assert "files changed since it was prepared" in again.provenance["seal_broken"]
        # the copy made beside the seal check (mounted, its view made) was taken down
        assert wait_until(functools.partial(nothing_mounted_under, testbeds.options.work_root))
        assert not list((testbeds.options.work_root / f"tampered-{n}").glob("*"))
        assert count.read_text().count("setup") == n
        assert seal.broken(prepared) is None  # the new one is sealed
        asides = sorted(prepared.parent.glob(f"{prepared.name}.broken-*"))
        assert asides, "the changed workspace is kept for inspection"
        for aside in asides:
            shutil.rmtree(aside)


def test_a_setup_writing_to_tmp_leaves_nothing_in_the_hosts_for_the_next_row(
    settings: LocalSettings, sample: SampleBenchmark, host_env, isolation, tmp_path: Path
) -> None:
    """matplotlib's pre_install downloads to /tmp by absolute path: each row's setup gets
    its own /tmp and TMPDIR, removed after it, so no row sees another's files."""
    marker = f"swegreen-setup-{os.getpid()}-{tmp_path.name}"
    recipe = Recipe(
        python="host",
        packages=("pytest==8.3.5",),
        pre_install=(
            # a row before this one left nothing, in /tmp or in its TMPDIR
            f'test ! -e /tmp/{marker} && test ! -e "$TMPDIR/{marker}-t"',
            f"echo {marker} > /tmp/{marker}",
            f'echo {marker} > "$TMPDIR/{marker}-t"',
            f'echo "$TMPDIR" >> {tmp_path / "tmpdirs"}',
        ),
        test_cmd="pytest --no-header -rA --tb=no -p no:cacheprovider",
        eval_timeout=120,
    )
    book = RecipeBook({"sample/calculator": {"1.0": recipe}})
    local = settings.model_copy(update={"cache_dir": tmp_path / "cache"})
    engine = build_engine(local, sample_config(sample), host_env, recipes=book, isolation=isolation)
    try:
        ids = ["sample__calculator-1", "sample__calculator-2"]

        dataset = load_dataset(str(sample.dataset))
        rows = [i for i in dataset.instances if i.instance_id in ids]

        async def main() -> None:
            for n, instance in enumerate(rows):
                async with engine.testbeds.open(f"tmp-{n}", instance) as testbed:
                    assert testbed.env_build_seconds > 0  # its own setup ran

        asyncio.run(main())
    finally:
        engine.close()
    tmpdirs = (tmp_path / "tmpdirs").read_text().split()
    assert len(tmpdirs) == 2
    assert not Path("/tmp", f"{marker}-t").exists()
    if engine.testbeds.sandbox.bwrap:  # /tmp itself is the row's: TMPDIR is /tmp
        assert set(tmpdirs) == {"/tmp"}
        assert not Path("/tmp", marker).exists()
    else:  # only TMPDIR is the row's (docs/security.md), removed with its setup
        assert len(set(tmpdirs)) == 2 and not [d for d in tmpdirs if Path(d).exists()]
        Path("/tmp", marker).unlink(missing_ok=True)


class GoldPlusBuildFile:
    """The gold patch, plus a comment added to a build input (pyproject.toml, which the
    setup wrote and committed): the reinstall must then run."""

    name = "gold+build-file"
    deterministic = True

    async def get_patch(self, instance: Instance) -> PatchResult:
        extra = (
            "diff --git a/pyproject.toml b/pyproject.toml\n"
            "--- a/pyproject.toml\n+++ b/pyproject.toml\n"
            "@@ -1,3 +1,4 @@\n"
            " [project]\n"
            '+# built again\n name = "calculator"\n version = "0"\n'
        )
        return PatchResult(instance.patch + extra, "gold+build-file")


def test_the_reinstall_is_skipped_where_it_changes_nothing_and_the_verdict_is_the_same(
    engine_with_setup, run_sample: RunSample, settings: LocalSettings
) -> None:
    """An editable install in the environment, a patch of Python sources only: upstream's
    eval-time ``pip install -e .`` is left out (the log says so) and the row resolves as
    it does with it; a patch that touches a build input runs it."""
    engine, _, _ = engine_with_setup
    ids = ["sample__calculator-1"]
    gold = run_sample("gold", run_id="skip-gold", engine=engine, instance_ids=ids)
    (row,) = gold.results
    assert row.status == Status.RESOLVED, row.detail
    assert row.environment["eval_install"] == "skipped (no build input changed)"
    log = settings.output_dir / "skip-gold" / "instances" / ids[0] / "test_output.txt"
    text = log.read_text()
    assert "eval-time reinstall skipped" in text and "pip install --no-build-isolation" not in text

    built = run_sample(GoldPlusBuildFile(), run_id="skip-build", engine=engine, instance_ids=ids)
    (again,) = built.results
    assert again.environment["eval_install"] == "ran"
    log = settings.output_dir / "skip-build" / "instances" / ids[0] / "test_output.txt"
    assert "pip install --no-build-isolation --no-index -q -e ." in log.read_text()
    # the same verdict, tests and counts, with or without the reinstall
    fields = ("status", "reason", "f2p_passed", "f2p_total", "p2p_passed", "p2p_total")
    assert [getattr(row, f) for f in fields] == [getattr(again, f) for f in fields]


def test_a_warm_row_starts_no_package_index_and_an_install_gets_the_dated_one(
    settings: LocalSettings, sample: SampleBenchmark, host_env, tmp_path, run_sample: RunSample
) -> None:
    """The dated package index is a process of its own: a row on a reused prepared
    workspace whose eval script installs nothing (the reinstall skipped) never starts it;
    a patch touching a build input runs the install, which sees the recipe's date."""
    count = tmp_path / "setups"
    recipe = editable_recipe(count).model_copy(
        update={
            "exclude_newer": "2025-06-01",
            "install": "python -m pip install --no-build-isolation -e .",  # names its index
        }
    )
    book = RecipeBook({"sample/calculator": {"1.0": recipe}})
    local = settings.model_copy(update={"cache_dir": tmp_path / "cache"})
    ids = ["sample__calculator-1"]

    def engine_index(engine: Engine) -> DatedIndex:  # running or not: its process
        return engine.testbeds.envs.dated_index

    first = build_engine(local, sample_config(sample), host_env, recipes=book)
    try:  # the prepared workspace's setup installs: the index runs
        (row,) = run_sample("gold", run_id="idx-1", engine=first, instance_ids=ids).results
        assert row.status == Status.RESOLVED, row.detail
        assert engine_index(first)._proc is not None
    finally:
        first.close()
    setups = count.read_text()  # (a dated build also runs pre_install to resolve: lock.py)
    warm = build_engine(local, sample_config(sample), host_env, recipes=book)
    try:
        (row,) = run_sample("gold", run_id="idx-2", engine=warm, instance_ids=ids).results
        assert row.status == Status.RESOLVED, row.detail
        assert row.environment["eval_install"] == "skipped (no build input changed)"
        assert engine_index(warm)._proc is None  # nothing could install: no index process
        built = run_sample(GoldPlusBuildFile(), run_id="idx-3", engine=warm, instance_ids=ids)
        assert [r.status for r in built.results] == [Status.RESOLVED]
        log = (local.output_dir / "idx-3" / "instances" / ids[0] / "test_output.txt").read_text()
        assert engine_index(warm)._proc is not None
        assert "Looking in indexes: http://127.0.0.1:" in log and "/2025-06-01/" in log
    finally:
        warm.close()
    assert count.read_text() == setups  # the warm engine reused the prepared workspace
