"""Room in the cache: the free disk a new build must leave, when each build was last used,
and the lease a run holds on the cache while it uses it.

A full Verified run fills ~70 GB of cache (environments ~40, prepared workspaces ~27);
a run that fills the disk to its last byte breaks everything else on the machine, the
run's own store included. So a row that would build something new first checks that
the disk keeps ``reserve`` bytes free, and ends ``error/disk_full`` (saying how to make
room) where it would not. ``swegreen cache prune`` makes that room, least recently used
first; it may delete only while no run holds the cache (``CacheLease``): a run reads its
environments and prepared workspaces without a lock once they are complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from swegreen.core.errors import DiskFull

GIB = 1024**3
LEASE = ".in-use"  # under the cache dir: every run holds it shared, prune exclusive
USED = ".used"  # under envs/ and prepared/: one empty file per build, touched on each use


def _disk(path: Path) -> tuple[int, int]:
    usage = shutil.disk_usage(path)
    return usage.free, usage.total


@dataclass(frozen=True)
class DiskReserve:
    """Free disk a new environment or prepared workspace must leave under ``root``:
    ``reserve_bytes``, or a tenth of the filesystem where that is less (a small disk, or
    a tmpfs whose size is a share of memory, is not declared full while mostly empty)."""

    root: Path
    reserve_bytes: int
    disk: Callable[[Path], tuple[int, int]] = field(default=_disk)  # (free, total) bytes

    def check(self, what: str) -> None:
        if self.reserve_bytes <= 0:
            return
        probe = self.root
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        free, total = self.disk(probe)
        reserve = min(self.reserve_bytes, total // 10)
        if free < reserve:
            raise DiskFull(
                f"{size(free)} free on the disk of {self.root}, under the "
                f"{size(reserve)} this run keeps free, so {what} was not "
                f"built. Make room with `swegreen cache prune --cache-dir {self.root} "
                "--keep-gb N` (least recently used environments and prepared workspaces "
                "first; `swegreen cache` shows what the cache holds) or lower the reserve "
                "with --disk-reserve-gb."
            )


def size(n: int) -> str:
    """Bytes as people read them: GiB, or MiB under one GiB."""
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / 1024**2:.0f} MiB"


def mark_used(root: Path, name: str) -> None:
    """Stamp ``root/name`` (an environment or a prepared workspace) as used now. Outside
    the build itself: a prepared workspace's files are sealed."""
    stamp = root / USED / name
    try:
        os.utime(stamp)
    except FileNotFoundError:
        with contextlib.suppress(OSError):  # a cache this user may read, not write
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.touch()
    except OSError:
        pass


def last_used(root: Path, name: str) -> float:
    """When ``root/name`` was last used (its own time where it never was stamped)."""
    for path in (root / USED / name, root / name):
        try:
            return path.stat().st_mtime
        except OSError:
            continue
    return 0.0


class CacheLease:
    """A run's shared hold on the cache (``shared=True``: waits while a prune runs), or
    prune's exclusive one (taken at once or not at all: ``held`` says which)."""

    def __init__(self, cache_dir: Path, *, shared: bool) -> None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(cache_dir / LEASE, os.O_RDWR | os.O_CREAT, 0o644)
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX | fcntl.LOCK_NB
        try:
            fcntl.flock(self._fd, mode)
            self.held = True
        except BlockingIOError:
            self.held = False
            self.release()

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the file releases the lock
            self._fd = None
