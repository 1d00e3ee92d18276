"""Copy-on-write workspaces: an evaluation's checkout as an overlay on the prepared one.

Every evaluation used to copy its prepared checkout (django: 9,600 files, 51 MB; 1-3 s, and
more on a loaded machine), because it may write anywhere in it and nothing it writes may
reach the prepared one. An overlay mount gives the same guarantee for nothing: the
prepared checkout is the read-only lower layer, every write (and every deletion, as a
whiteout) lands in the evaluation's own upper layer, and both the engine's own steps on
the host (git apply, the tamper checks, the reseated ``.git``) and the sandbox (bound to
the mount point) see the merged tree. The layers live in the evaluation's host directory,
which the sandbox never sees, so it cannot write to them behind the mount's back.

Only a root engine may mount; elsewhere (and where the kernel refuses) the checkout is
copied as before. The lower layer must never change while mounted: prepared checkouts are
complete before any evaluation starts, and are already owned by the sandbox's uid then,
so lending the workspace to the sandbox changes no file (an ownership change would copy
every file up).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

_UNSAFE = (",", ":", "\\", "\n")  # separators of mount's option string
OWNER = "owner"  # in the layers directory: the pid of the engine that mounted it


def can_mount() -> bool:
    return os.geteuid() == 0


def mount(lower: Path, layers: Path, target: Path) -> bool:
    """Mount ``lower`` copy-on-write at ``target`` (upper and work dirs under ``layers``);
    False, leaving neither ``layers`` nor ``target`` behind, where it cannot be done here
    (not root, no ``mount`` program, a kernel or container that refuses)."""
    paths = [str(lower), str(layers), str(target)]
    if not can_mount() or any(c in p for p in paths for c in _UNSAFE) or target.exists():
        return False
    try:
        target.mkdir(parents=True)
        if _mount(lower, layers, target):
            return True
    except OSError:
        pass
    # the caller copies instead, into a target that must not exist yet
    shutil.rmtree(layers, ignore_errors=True)
    with contextlib.suppress(OSError):
        target.rmdir()
    return False


def _mount(lower: Path, layers: Path, target: Path) -> bool:
    """The overlay mount itself, its upper and work dirs made under ``layers``. Volatile
    (Linux 5.10+): no sync reaches the upper layer, which is thrown away with its
    evaluation, so an fsync in the tests or the unmount's flush of what they wrote costs
    nothing; an older kernel mounts without it."""
    upper, work = layers / "upper", layers / "work"
    upper.mkdir(parents=True)
    work.mkdir()
    # the upper layer's root takes the lower root's owner and mode, as a copy would
    st = lower.stat()
    os.chown(upper, st.st_uid, st.st_gid)
    upper.chmod(st.st_mode & 0o7777)
    (layers / OWNER).write_text(str(os.getpid()))  # for ``sweep`` after a crash
    options = f"lowerdir={lower},upperdir={upper},workdir={work}"
    for extra in (",volatile", ""):
        done = subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", options + extra, str(target)],
            capture_output=True,
            check=False,
        )
        if done.returncode == 0:
            return True
    return False


def discard_later(path: Path, layers: Path) -> Callable[[], None]:
    """Make every write under ``path`` from now on undoable; returns the undo.

    An overlay mounted over ``path`` itself (its own contents the lower layer) where this
    engine may mount; elsewhere a copy of ``path`` kept in ``layers`` and moved back. The
    path stays the same either way, so a participant told its working directory keeps it.
    """
    layers.mkdir(parents=True, exist_ok=True)
    upper, work = layers / "upper", layers / "work"
    if can_mount() and not any(c in str(p) for p in (path, layers) for c in _UNSAFE):
        if _mount(path, layers, path):

            def unmount_it() -> None:
                unmount(path)
                shutil.rmtree(layers, ignore_errors=True)

            return unmount_it
        shutil.rmtree(upper, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    snapshot = layers / "snapshot"
    subprocess.run(["cp", "-a", str(path), str(snapshot)], check=True, capture_output=True)

    def put_back() -> None:
        for entry in list(path.iterdir()):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        for entry in list(snapshot.iterdir()):
            shutil.move(str(entry), str(path / entry.name))
        shutil.rmtree(layers, ignore_errors=True)

    return put_back


def _mount_points() -> list[str]:
    """Every mount point of this mount namespace (/proc/self/mountinfo's fifth field)."""
    with open("/proc/self/mountinfo") as fh:
        return [_unescape(fields[4]) for line in fh if len(fields := line.split()) > 4]


def is_mounted(target: Path) -> bool:
    """Whether ``target`` is a mount point (of this mount namespace)."""
    return str(target) in _mount_points()


def mounts_under(root: Path) -> list[Path]:
    """The mount points below ``root`` (of this mount namespace), deepest first."""
    prefix = str(root).rstrip("/") + "/"
    points = {p for p in _mount_points() if p.startswith(prefix)}
    return [Path(p) for p in sorted(points, key=lambda p: (-p.count("/"), p))]


def unmount(target: Path) -> None:
    """Unmount ``target``; a busy mount (a process still in it) is detached lazily, so
    the layers can be removed at once."""
    if subprocess.run(["umount", str(target)], capture_output=True, check=False).returncode:
        subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)


def sweep(root: Path) -> list[Path]:
    """Unmount the overlays under ``root`` whose engine is gone (killed before it could
    unmount: a crash, SIGKILL); those of a live engine, another run on the same cache
    included, are left alone. Returns the mount points it unmounted."""
    if not can_mount():
        return []
    prefix = str(root).rstrip("/") + "/"
    gone = []
    with open("/proc/self/mountinfo") as fh:
        lines = fh.read().splitlines()
    for line in lines:
        fields = line.split()
        if " - overlay " not in line or len(fields) < 5:
            continue
        target = _unescape(fields[4])
        if not target.startswith(prefix):
            continue
        options = line.rsplit(" ", 1)[-1]
        upper = next((o[9:] for o in options.split(",") if o.startswith("upperdir=")), None)
        owner = Path(_unescape(upper)).parent / OWNER if upper else None
        try:
            pid = int(owner.read_text()) if owner else 0
        except (OSError, ValueError):
            pid = 0
        if pid and _alive(pid):
            continue
        unmount(Path(target))
        gone.append(Path(target))
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)
