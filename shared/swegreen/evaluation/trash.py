"""Row-sized deletions off the critical path.

A row's workspace is thousands of files (django: 9,000, 1.5 s to delete on a loaded
machine), and its checkout an overlay mount; the row's result does not wait for their
removal, nor does the command line's exit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path

from swegreen.sandbox import overlay

TRASH = ".trash"  # under work_root: what a row left, on its way out


def discard(work_root: Path, paths: list[Path], mounts: Sequence[Path] = ()) -> None:
    """Remove ``paths`` off the critical path: each is renamed into ``work_root/.trash``
    (at once), and a detached ``rm`` the run does not wait for removes them (a row's
    workspace is thousands of files). A path on another filesystem is removed here.

    ``mounts`` are mount points inside ``paths`` (a row's copy-on-write checkout): the
    same detached process unmounts them before its ``rm`` (which crosses no mount), as
    ``overlay.unmount`` would, so the kernel's teardown of an overlay that held django's
    checkout (0.07-0.14 s) is not in the row's way either. One it could not unmount (it
    was killed) is the next engine's ``overlay.sweep``'s: its engine is gone by then."""
    trash = work_root / TRASH / uuid.uuid4().hex
    trash.mkdir(parents=True, exist_ok=True)
    moved: list[Path] = []
    for n, path in enumerate(paths):
        inside = [m for m in mounts if m.is_relative_to(path)]
        if not path.exists():
            continue
        try:
            os.rename(path, trash / f"{n}-{path.name}")
        except OSError:  # another filesystem (a scratch dir in /tmp, say)
            for mount in inside:
                overlay.unmount(mount)
            shutil.rmtree(path, ignore_errors=True)
            continue
        moved += [trash / f"{n}-{path.name}" / m.relative_to(path) for m in inside]
    _remove_detached(trash, moved)


def empty_trash(work_root: Path) -> None:
    """What rows of an earlier run left on their way out (its ``rm`` killed with it)."""
    for leftover in (work_root / TRASH).glob("*"):
        _remove_detached(leftover)


def _remove_detached(path: Path, mounts: Sequence[Path] = ()) -> None:
    # sh starts the job in the background and exits: it outlives this process if it must
    job = 't=$1; shift; for m do umount "$m" || umount -l "$m"; done; '
    job += 'rm -rf --one-file-system -- "$t"'
    subprocess.run(
        ["sh", "-c", f"({job}) >/dev/null 2>&1 &", "sh", str(path), *map(str, mounts)],
        check=False,
        stdin=subprocess.DEVNULL,
    )
