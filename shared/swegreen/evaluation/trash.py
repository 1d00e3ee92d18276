"""Row-sized deletions off the critical path.

A row's workspace is thousands of files (django: 9,000, 1.5 s to delete on a loaded
machine); the row's result does not wait for them, nor does the command line's exit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

TRASH = ".trash"  # under work_root: what a row left, on its way out


def discard(work_root: Path, paths: list[Path]) -> None:
    """Remove ``paths`` off the critical path: each is renamed into ``work_root/.trash``
    (at once), and a detached ``rm`` the run does not wait for removes them (a row's
    workspace is thousands of files). A path on another filesystem is removed here."""
    trash = work_root / TRASH / uuid.uuid4().hex
    trash.mkdir(parents=True, exist_ok=True)
    for n, path in enumerate(paths):
        if not path.exists():
            continue
        try:
            os.rename(path, trash / f"{n}-{path.name}")
        except OSError:  # another filesystem (a scratch dir in /tmp, say)
            shutil.rmtree(path, ignore_errors=True)
    _remove_detached(trash)


def empty_trash(work_root: Path) -> None:
    """What rows of an earlier run left on their way out (its ``rm`` killed with it)."""
    for leftover in (work_root / TRASH).glob("*"):
        _remove_detached(leftover)


def _remove_detached(path: Path) -> None:
    # sh starts rm in the background and exits: rm outlives this process if it must
    subprocess.run(
        ["sh", "-c", 'rm -rf --one-file-system -- "$1" >/dev/null 2>&1 &', "sh", str(path)],
        check=False,
        stdin=subprocess.DEVNULL,
    )
