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
from collections.abc import Callable
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
        count += _walk(h, str(base), part, with_ctime)
    return h.hexdigest(), count


def _walk(h: hashlib._Hash, path: str, rel: str, with_ctime: bool) -> int:
    """Feed every entry under ``path`` (never through a symlink), in name order."""
    count = 0
    with os.scandir(path) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        st = entry.stat(follow_symlinks=False)
        name = f"{rel}/{entry.name}"
        kind = stat.S_IFMT(st.st_mode)
        line = (
            f"{name}\0{st.st_mode}\0{st.st_uid}\0{st.st_gid}\0"
            f"{0 if kind == stat.S_IFDIR else st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}"
        )
        if with_ctime:
            line += f"\0{st.st_ctime_ns}"
        if kind == stat.S_IFLNK:
            line += f"\0{os.readlink(entry.path)}"
        h.update(line.encode("utf-8", "surrogateescape") + b"\n")
        count += 1
        if kind == stat.S_IFDIR:
            count += _walk(h, entry.path, name, with_ctime)
    return count


def seal(root: Path) -> None:
    """Record the seal of a just-completed prepared workspace."""
    _record(root, digest)


UNSEALED = "it has no seal (prepared by an earlier version)"


def broken(root: Path) -> str | None:
    """Why the seal of ``root`` does not hold (None: it holds; ``UNSEALED``: there is
    none, which is no incident)."""
    return _compare(root, digest, "its files changed since it was prepared")


def _record(root: Path, made: Callable[[Path], tuple[str, int]]) -> None:
    value, count = made(root)
    (root / SEAL).write_text(json.dumps({"digest": value, "entries": count}))


def _compare(root: Path, made: Callable[[Path], tuple[str, int]], changed: str) -> str | None:
    try:
        recorded = json.loads((root / SEAL).read_text())
    except (OSError, ValueError):
        return UNSEALED
    value, count = made(root)
    if value == recorded.get("digest"):
        return None
    return f"{changed} ({count} entries now, {recorded.get('entries')} then)"


# -- an environment's own seal ----------------------------------------------------------
#
# Where the tests run as the engine's own uid (Landlock mode under Amber), the environment's
# files are theirs to ``chmod`` or ``utime`` through a link (Landlock covers no metadata),
# though never to write: a module made unreadable turns a later row's test into a skip.
# So each environment is sealed when built, and checked before it is used there: every
# entry's mode, owner, size, mtime and inode under ``py/`` (no directory's size or mtime,
# no bytecode cache: the engine's own use may add those).

ENV_PART = "py"


def env_digest(env_root: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    base = env_root / ENV_PART
    if not base.is_dir():
        return "missing", 0
    count = _walk_env(h, str(base), ENV_PART)
    return h.hexdigest(), count


def _walk_env(h: hashlib._Hash, path: str, rel: str) -> int:
    count = 0
    with os.scandir(path) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if entry.name == "__pycache__":
            continue
        st = entry.stat(follow_symlinks=False)
        kind = stat.S_IFMT(st.st_mode)
        name = f"{rel}/{entry.name}"
        line = f"{name}\0{st.st_mode}\0{st.st_uid}\0{st.st_ino}"
        if kind != stat.S_IFDIR:
            line += f"\0{st.st_size}\0{st.st_mtime_ns}"
        if kind == stat.S_IFLNK:
            line += f"\0{os.readlink(entry.path)}"
        h.update(line.encode("utf-8", "surrogateescape") + b"\n")
        count += 1
        if kind == stat.S_IFDIR:
            count += _walk_env(h, entry.path, name)
    return count


def seal_env(env_root: Path) -> None:
    _record(env_root, env_digest)


def env_broken(env_root: Path) -> str | None:
    """Why the environment at ``env_root`` is not as built (None: it is; ``UNSEALED``:
    built before environments were sealed)."""
    return _compare(
        env_root, env_digest, "its files' modes, sizes or times changed since it was built"
    )
