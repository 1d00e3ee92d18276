"""The sandbox's limits the kernel keeps: memory and process cgroups (their out-of-memory
kills counted), and the disk limit's watch."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import Sequence
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


class DiskWatch:
    """How much a sandboxed run has added to its writable trees, looked at every few
    seconds (a thread walks them; no symlink is followed, a file counted once). ``skip``:
    trees under them left out, a copy-on-write checkout whose writes land in its upper
    layer (one of ``roots``): walking the merged tree would read every file of the
    prepared one, each time."""

    def __init__(
        self,
        roots: list[Path],
        limit_mb: int,
        interval: float = 2.0,
        skip: Sequence[Path] = (),
    ) -> None:
        self.roots = roots
        self.skip = {str(p) for p in skip}
        self.limit = limit_mb * 1024 * 1024
        self.interval = interval
        self._baseline: asyncio.Future[int] | None = None

    async def start(self) -> None:
        """Take the trees' size as the run starts, in a thread beside it (a short run is
        never held up by the walk)."""
        self._baseline = asyncio.ensure_future(asyncio.to_thread(self.used))

    def used(self) -> int:
        seen: set[tuple[int, int]] = set()
        total = 0
        for root in self.roots:
            for dirpath, dirnames, filenames in os.walk(root):
                if self.skip:
                    dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in self.skip]
                for name in (*dirnames, *filenames):
                    with contextlib.suppress(OSError):
                        st = os.lstat(os.path.join(dirpath, name))
                        if (st.st_dev, st.st_ino) not in seen:
                            seen.add((st.st_dev, st.st_ino))
                            total += st.st_blocks * 512
        return total

    async def exceeded(self) -> bool:
        """Returns True once the run has written more than the limit (never otherwise)."""
        assert self._baseline is not None
        try:
            while True:
                await asyncio.sleep(self.interval)
                baseline = await self._baseline
                if await asyncio.to_thread(self.used) - baseline > self.limit:
                    return True
        finally:
            self._baseline.cancel()


def _find_cgroup(controller: str) -> Path | None:
    """A cgroup hierarchy where this process may make children limiting ``controller``."""
    v2 = CGROUP_ROOT
    if (v2 / "cgroup.controllers").exists():
        ok = controller in (v2 / "cgroup.controllers").read_text().split()
        return v2 if ok and os.access(v2, os.W_OK) else None
    v1 = v2 / controller
    if (v1 / "cgroup.procs").exists() and os.access(v1, os.W_OK):
        return v1
    return None


def _make_cgroup(root: Path, settings: dict[str, str]) -> Path | None:
    path = root / f"swegreen-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir()
        if (root / "cgroup.subtree_control").exists():  # v2: enable what is limited
            wanted = {key.split(".")[0] for key in settings}
            (root / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
        for key, value in settings.items():
            (path / key).write_text(value)
        if (path / "memory.swap.max").exists():  # v2: the limit holds for swap too
            (path / "memory.swap.max").write_text("0")
        return path
    except OSError:
        with contextlib.suppress(OSError):
            path.rmdir()
        return None


def _oom_kills(cgroup: Path, v2: bool) -> int:
    """Processes the kernel killed for the cgroup's memory limit."""
    name = "memory.events" if v2 else "memory.oom_control"
    with contextlib.suppress(OSError, ValueError):
        for line in (cgroup / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    return 0


async def _remove_cgroup(path: Path) -> None:
    for _ in range(50):
        with contextlib.suppress(OSError):
            for pid in (path / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        try:
            path.rmdir()
            return
        except OSError:
            await asyncio.sleep(0.1)
