"""A prepared workspace's seal: what it was when prepared, checked before every reuse.

Evaluations never write a prepared workspace: they mount their checkout over it
copy-on-write (overlay.py) and see it read-only, and its environment's files are the
engine's. The seal is the check that this held, whatever the reason it might not (a
privilege a sandbox should not have had, a kernel bug, a hand on the host): a digest of
every entry's identity, taken when the workspace is complete and compared before each
use. The checkout's entries count with their change time (ctime), which no process can
set back, so any write shows even when the content and mtime were restored; the
environment view's without it (each evaluation's own view links to its files, which
changes their link count and ctime) but with the inode, which a replaced file changes.
A broken seal makes the engine prepare the workspace again and say so on the row.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

SEAL = "seal.json"
# the parts of a prepared workspace that are sealed, and whether their ctimes count
PARTS = {"repo": True, "env": False}


def digest(root: Path) -> tuple[str, int]:
    """The seal of the prepared workspace at ``root`` (hex digest, entries seen)."""
    h = hashlib.sha256()
    count = 0
    for part, with_ctime in PARTS.items():
        base = root / part
        if not base.is_dir():
            h.update(f"missing {part}\n".encode())
            continue
        for dirpath, dirnames, filenames in os.walk(base):  # never descends a symlink
            dirnames.sort()
            for name in sorted([*dirnames, *filenames]):
                path = os.path.join(dirpath, name)
                st = os.lstat(path)
                fields = [
                    os.path.relpath(path, root),
                    st.st_mode,
                    st.st_uid,
                    st.st_gid,
                    st.st_size if not stat.S_ISDIR(st.st_mode) else 0,
                    st.st_mtime_ns,
                    st.st_ino,
                ]
                if with_ctime:
                    fields.append(st.st_ctime_ns)
                if stat.S_ISLNK(st.st_mode):
                    fields.append(os.readlink(path))
                h.update(json.dumps(fields).encode() + b"\n")
                count += 1
    return h.hexdigest(), count


def seal(root: Path) -> None:
    """Record the seal of a just-completed prepared workspace."""
    value, count = digest(root)
    (root / SEAL).write_text(json.dumps({"digest": value, "entries": count}))


UNSEALED = "it has no seal (prepared by an earlier version)"


def broken(root: Path) -> str | None:
    """Why the seal of ``root`` does not hold (None: it holds; ``UNSEALED``: there is
    none, which is no incident)."""
    try:
        recorded = json.loads((root / SEAL).read_text())
    except (OSError, ValueError):
        return UNSEALED
    value, count = digest(root)
    if value == recorded.get("digest"):
        return None
    return (
        f"its files changed since it was prepared ({count} entries now, "
        f"{recorded.get('entries')} then)"
    )
