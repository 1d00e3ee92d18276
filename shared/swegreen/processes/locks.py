"""Cross-process locks usable from async code.

A lock file is taken with a non-blocking ``flock`` polled from the event loop, so waiting
for a lock never parks a worker thread (a pool of blocked threads can deadlock the
holder). ``flock`` locks belong to an open file, so two holders in the same process
exclude each other as well as two processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator
from pathlib import Path


@contextlib.asynccontextmanager
async def file_lock(path: Path, poll: float = 0.05, max_poll: float = 1.0) -> AsyncIterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        delay = poll
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(delay)
                delay = min(delay * 2, max_poll)
        yield
    finally:
        os.close(fd)  # closing the file releases the lock
