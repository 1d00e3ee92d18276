"""A row's workspace leaves at once and is deleted beside the run, not in its way."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from swegreen.evaluation.trash import TRASH, discard, empty_trash


def wait_until(condition: Callable[[], bool], seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


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
