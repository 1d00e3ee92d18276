"""A row's workspace leaves at once and is deleted beside the run, not in its way."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from swegreen.evaluation.trash import TRASH, discard, empty_trash
from swegreen.sandbox import overlay

from .conftest import nothing_mounted_under, wait_until


def tree(root: Path, files: int) -> Path:
    for n in range(files):
        (root / f"d{n % 10}").mkdir(parents=True, exist_ok=True)
        (root / f"d{n % 10}" / f"f{n}").write_text("x")
    (root / "d0" / "locked").mkdir()
    (root / "d0" / "locked").chmod(0o000)  # what a sandbox may leave
    return root


def test_discarded_paths_leave_at_once_and_are_deleted_beside_the_run(tmp_path: Path) -> None:
    work = tmp_path / "work"
    workspace = tree(work / "run" / "row.1234", 500)
    host = tree(work / "run" / "row.1234.host", 10)
    missing = work / "run" / "never-made"
    discard(work, [workspace, host, missing])
    assert not workspace.exists() and not host.exists()  # gone from where they were
    assert wait_until(lambda: not any((work / TRASH).glob("*")))


def test_what_a_killed_run_left_in_the_trash_goes_at_the_next_start(tmp_path: Path) -> None:
    work = tmp_path / "work"
    left = tree(work / TRASH / "abc" / "0-row.1", 50)
    empty_trash(work)
    assert wait_until(lambda: not left.exists())
    empty_trash(tmp_path / "no-such-work")  # nothing to do


def test_a_mounted_checkout_is_unmounted_by_the_job_that_deletes_it(tmp_path: Path) -> None:
    """A row's copy-on-write checkout leaves with its workspace at once; the detached job
    unmounts it, then deletes it, and nothing of the prepared checkout under it goes."""
    if not overlay.can_mount():
        pytest.skip("overlay mounts need a root engine (the checkout is copied instead)")
    work = tmp_path / "work"
    lower = tree(tmp_path / "prepared", 20)
    workspace, host = work / "run" / "row.1234", work / "run" / "row.1234.host"
    workspace.mkdir(parents=True)
    assert overlay.mount(lower, host / "layers", workspace / "repo")
    (workspace / "repo" / "written.txt").write_text("the row's own write\n")
    discard(work, [workspace, host], [workspace / "repo"])
    assert not workspace.exists() and not host.exists()
    assert wait_until(lambda: nothing_mounted_under(work))
    assert wait_until(lambda: not any((work / TRASH).glob("*")))
    assert sorted(p.name for p in lower.iterdir()) == [f"d{n}" for n in range(10)]
    assert not (lower / "written.txt").exists()


def test_a_mount_on_a_path_that_cannot_be_moved_is_unmounted_before_its_removal(
    tmp_path: Path,
) -> None:
    if not overlay.can_mount():
        pytest.skip("overlay mounts need a root engine (the checkout is copied instead)")
    here = tmp_path.stat().st_dev
    other = [p for p in (Path("/dev/shm"), Path("/var/tmp")) if p.stat().st_dev != here]
    if not other:
        pytest.skip("no folder on another filesystem than the tests' own")
    work, elsewhere = tmp_path / "work", other[0] / f"swegreen-{tmp_path.name}"
    lower = tree(tmp_path / "prepared", 5)
    elsewhere.mkdir(parents=True)
    try:
        assert overlay.mount(lower, elsewhere / "layers", elsewhere / "repo")
        discard(work, [elsewhere], [elsewhere / "repo"])
        assert not elsewhere.exists()  # unmounted, then removed, before discard returned
        assert nothing_mounted_under(elsewhere)
        assert len(list(lower.rglob("f*"))) == 5
    finally:
        if overlay.is_mounted(elsewhere / "repo"):
            overlay.unmount(elsewhere / "repo")
        shutil.rmtree(elsewhere, ignore_errors=True)
