"""What the cache holds, and room made in it: ``swegreen cache`` and ``swegreen cache prune``.

Only what a later run can make again is pruned: prepared workspaces, then environments
(with the prepared workspaces made from them, which a run would prepare again anyway),
least recently used first. Repository mirrors and history stores stay (they may have
come from a network this machine no longer reaches); so do the small caches of base
validation and the regression check. A prune runs only while no run holds the cache
(``CacheLease``), and removes each build by renaming it away first, so an interrupted
prune never leaves a build that looks complete but is not.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from swegreen.core.errors import ConfigError
from swegreen.processes.cache_room import LEASE, USED, CacheLease, last_used

ENVS, PREPARED = "envs", "prepared"
PRUNING = ".pruning"  # under the cache dir: builds on their way out


@dataclass(frozen=True)
class Build:
    """One environment or prepared workspace: what pruning it frees, at most."""

    kind: str  # ENVS or PREPARED
    name: str
    path: Path
    size: int  # bytes on disk (each inode once)
    last_used: float
    env_key: str | None = None  # a prepared workspace's environment (resolved)


@dataclass(frozen=True)
class PruneReport:
    removed: list[Build]
    kept: int  # builds left
    size_before: int
    size_after: int
    freed_on_disk: int  # as the filesystem reports it (hard links shared with kept builds stay)


def disk_size(path: Path, seen: set[tuple[int, int]] | None = None) -> int:
    """Bytes ``path`` occupies (allocated blocks, each inode once; symlinks not followed)."""
    seen = set() if seen is None else seen
    total = 0
    stack = [path]
    while stack:
        here = stack.pop()
        try:
            st = here.lstat()
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        total += st.st_blocks * 512
        if stat.S_ISDIR(st.st_mode):
            try:
                stack.extend(Path(e.path) for e in os.scandir(here))
            except OSError:
                continue
    return total


def usage(cache_dir: Path) -> dict[str, int]:
    """Bytes under each top-level folder of the cache (a link shared between two counts
    in the first)."""
    seen: set[tuple[int, int]] = set()
    out: dict[str, int] = {}
    if not cache_dir.is_dir():
        return out
    for child in sorted(cache_dir.iterdir()):
        if child.name == LEASE:
            continue
        out[child.name] = disk_size(child, seen)
    return out


def build_dirs(folder: Path) -> list[Path]:
    """The builds in ``envs/`` or ``prepared/`` (not content-keyed links, locks, stamps,
    the shared pip caches or the index of addresses)."""
    if not folder.is_dir():
        return []
    return [
        path
        for path in folder.iterdir()
        if not path.name.startswith(".")
        and path.name != "addresses"
        and not path.is_symlink()
        and path.is_dir()
    ]


def builds(cache_dir: Path) -> list[Build]:
    """Every environment and prepared workspace in the cache, least recently used first."""
    envs, prepared = cache_dir / ENVS, cache_dir / PREPARED
    found = [
        Build(ENVS, path.name, path, disk_size(path), last_used(envs, path.name))
        for path in build_dirs(envs)
    ]
    found += [
        Build(
            PREPARED,
            path.name,
            path,
            disk_size(path),
            last_used(prepared, path.name),
            _env_of(envs, path),
        )
        for path in build_dirs(prepared)
    ]
    return sorted(found, key=lambda b: (b.last_used, b.kind != PREPARED, b.name))


def _env_of(envs: Path, prepared: Path) -> str | None:
    try:
        key = json.loads((prepared / "prepared.json").read_text())["env_key"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    link = envs / key
    return os.path.basename(os.readlink(link)) if link.is_symlink() else key


def plan(all_builds: list[Build], total: int, keep_bytes: int) -> list[Build]:
    """The builds to remove so that ``total`` falls to ``keep_bytes``: prepared workspaces
    before environments, each kind least recently used first; an environment takes the
    prepared workspaces made from it along."""
    order = [b for b in all_builds if b.kind == PREPARED] + [
        b for b in all_builds if b.kind == ENVS
    ]
    chosen: dict[Path, Build] = {}
    size = total
    for build in order:
        if size <= keep_bytes:
            break
        if build.path in chosen:
            continue
        chosen[build.path] = build
        size -= build.size
        if build.kind == ENVS:
            for dependent in all_builds:
                if dependent.env_key == build.name and dependent.path not in chosen:
                    chosen[dependent.path] = dependent
                    size -= dependent.size
    return list(chosen.values())


def prune(cache_dir: Path, keep_bytes: int, *, dry_run: bool = False) -> PruneReport:
    """Remove least recently used builds until the cache holds ``keep_bytes`` at most."""
    if not cache_dir.is_dir():
        raise ConfigError(f"no cache at {cache_dir} (--cache-dir names the one to prune)")
    lease = CacheLease(cache_dir, shared=False)
    if not lease.held:
        raise ConfigError(
            f"a run is using the cache {cache_dir}; prune it after that run ends "
            "(runs read their environments and prepared workspaces without a lock)"
        )
    try:
        before = sum(usage(cache_dir).values())
        all_builds = builds(cache_dir)
        chosen = plan(all_builds, before, keep_bytes)
        if dry_run:
            freed = sum(b.size for b in chosen)
            return PruneReport(chosen, len(all_builds) - len(chosen), before, before - freed, 0)
        free_before = shutil.disk_usage(cache_dir).free
        trash = cache_dir / PRUNING / uuid.uuid4().hex
        trash.mkdir(parents=True)
        for n, build in enumerate(chosen):
            os.rename(build.path, trash / f"{n}-{build.name}")
            (build.path.parent / USED / build.name).unlink(missing_ok=True)
            if build.kind == ENVS:
                _unlink_links_to(cache_dir / ENVS, build.name)
        _remove(cache_dir / PRUNING)
        after = sum(usage(cache_dir).values())
        freed = shutil.disk_usage(cache_dir).free - free_before
        return PruneReport(chosen, len(all_builds) - len(chosen), before, after, max(freed, 0))
    finally:
        lease.release()


def _unlink_links_to(envs: Path, name: str) -> None:
    """The content-keyed names of a removed environment (links to its commit-keyed build)."""
    for path in envs.iterdir():
        if path.is_symlink() and os.path.basename(os.readlink(path)) == name:
            path.unlink()


def _remove(path: Path) -> None:
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=False)
    if path.exists():  # what rm could not remove (a file made read-only by its owner)
        shutil.rmtree(path, ignore_errors=True)
