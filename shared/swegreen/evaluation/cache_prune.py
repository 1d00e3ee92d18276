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

import contextlib
import dataclasses
import json
import os
import shutil
import stat
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from swegreen.core.errors import ConfigError
from swegreen.processes.cache_room import LEASE, USED, CacheLease, last_used

ENVS, PREPARED = "envs", "prepared"
PRUNING = ".pruning"  # under the cache dir: builds on their way out
Inode = tuple[int, int]  # (st_dev, st_ino)


@dataclass(frozen=True)
class Build:
    """One environment or prepared workspace. A prepared workspace's view hardlinks its
    environment's files, so removing it alone frees only what no other build links to:
    ``size``; ``shared`` counts its links to the inodes other builds (or other folders)
    hold too, freed once the last of their links goes (``plan``)."""

    kind: str  # ENVS or PREPARED
    name: str
    path: Path
    size: int  # bytes only this build holds (allocated blocks)
    last_used: float
    env_key: str | None = None  # a prepared workspace's environment (resolved)
    shared: dict[Inode, int] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class PruneReport:
    removed: list[Build]
    kept: int  # builds left
    size_before: int
    size_after: int
    freed_on_disk: int  # as the filesystem reports it (hard links shared with kept builds stay)


def _walk(root: Path) -> Iterator[os.stat_result]:
    """The lstat of ``root`` and of everything under it (symlinks not followed)."""
    stack = [root]
    while stack:
        here = stack.pop()
        try:
            st = here.lstat()
        except OSError:
            continue
        yield st
        if stat.S_ISDIR(st.st_mode):
            with contextlib.suppress(OSError):
                stack.extend(Path(e.path) for e in os.scandir(here))


def disk_size(path: Path, seen: set[Inode] | None = None) -> int:
    """Bytes ``path`` occupies (allocated blocks, each inode once)."""
    seen = set() if seen is None else seen
    total = 0
    for st in _walk(path):
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
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
    the shared pip caches, the index of addresses or the builds by lock)."""
    if not folder.is_dir():
        return []
    return [
        path
        for path in folder.iterdir()
        if not path.name.startswith(".")
        and path.name not in ("addresses", "by-lock")
        and not path.is_symlink()
        and path.is_dir()
    ]


def builds(cache_dir: Path) -> tuple[list[Build], dict[Inode, tuple[int, int]]]:
    """Every environment and prepared workspace in the cache, least recently used first,
    and the inodes some of them share: (bytes, links) of each."""
    return _builds(cache_dir, {})


def survey(cache_dir: Path) -> tuple[int, list[Build], dict[Inode, tuple[int, int]]]:
    """The cache's size (as ``usage`` sums it) with its ``builds``, in one walk of it."""
    inodes: dict[Inode, tuple[int, int]] = {}
    found, shared = _builds(cache_dir, inodes)
    total = sum(b.size for b in found) + sum(size for size, _ in shared.values())
    seen = set(inodes)  # every inode of a build with more than one link: counted above
    for child in cache_dir.iterdir():
        if child.name == LEASE:
            continue
        if child.name in (ENVS, PREPARED) and child.is_dir() and not child.is_symlink():
            total += child.lstat().st_blocks * 512  # the folder, and what is not a build
            ours = set(build_dirs(child))
            for entry in child.iterdir():
                if entry not in ours:
                    total += disk_size(entry, seen)
        else:
            total += disk_size(child, seen)
    return total, found, shared


def _builds(
    cache_dir: Path, inodes: dict[Inode, tuple[int, int]]
) -> tuple[list[Build], dict[Inode, tuple[int, int]]]:
    """``builds``, filling ``inodes`` with every inode of theirs with more than one link."""
    envs, prepared = cache_dir / ENVS, cache_dir / PREPARED
    found: list[Build] = []
    for kind, folder in ((ENVS, envs), (PREPARED, prepared)):
        for path in build_dirs(folder):
            own, links = _tally(path, inodes)
            env = _env_of(envs, path) if kind == PREPARED else None
            found.append(
                Build(kind, path.name, path, own, last_used(folder, path.name), env, links)
            )
    exclusive: list[Build] = []
    for build in found:  # an inode all of whose links are in one build is that build's own
        own = build.size
        for key, n in list(build.shared.items()):
            if n == inodes[key][1]:
                own += inodes[key][0]
                del build.shared[key]
        exclusive.append(dataclasses.replace(build, size=own))
    kept = {key for build in exclusive for key in build.shared}
    shared = {key: inodes[key] for key in kept}
    return sorted(exclusive, key=lambda b: (b.last_used, b.kind != PREPARED, b.name)), shared


def _tally(root: Path, inodes: dict[Inode, tuple[int, int]]) -> tuple[int, dict[Inode, int]]:
    """Bytes of ``root``'s inodes with one link, and its links to inodes with more."""
    own = 0
    links: dict[Inode, int] = {}
    for st in _walk(root):
        if stat.S_ISDIR(st.st_mode) or st.st_nlink <= 1:
            own += st.st_blocks * 512
        else:
            key = (st.st_dev, st.st_ino)
            links[key] = links.get(key, 0) + 1
            inodes[key] = (st.st_blocks * 512, st.st_nlink)
    return own, links


def _env_of(envs: Path, prepared: Path) -> str | None:
    try:
        key = json.loads((prepared / "prepared.json").read_text())["env_key"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    link = envs / key
    return os.path.basename(os.readlink(link)) if link.is_symlink() else key


def plan(
    all_builds: list[Build],
    total: int,
    keep_bytes: int,
    inodes: dict[Inode, tuple[int, int]] | None = None,
) -> tuple[list[Build], int]:
    """The builds to remove so that ``total`` falls to ``keep_bytes``, and the size left:
    prepared workspaces before environments, each kind least recently used first; an
    environment takes the prepared workspaces made from it along. A shared inode counts
    as freed once every one of its links is in a removed build."""
    inodes = inodes or {}
    remaining = {key: links for key, (_, links) in inodes.items()}
    order = [b for b in all_builds if b.kind == PREPARED] + [
        b for b in all_builds if b.kind == ENVS
    ]
    chosen: dict[Path, Build] = {}
    size = total

    def take(build: Build) -> None:
        nonlocal size
        chosen[build.path] = build
        size -= build.size
        for key, n in build.shared.items():
            remaining[key] -= n
            if remaining[key] == 0:
                size -= inodes[key][0]

    for build in order:
        if size <= keep_bytes:
            break
        if build.path in chosen:
            continue
        take(build)
        if build.kind == ENVS:
            for dependent in all_builds:
                if dependent.env_key == build.name and dependent.path not in chosen:
                    take(dependent)
    return list(chosen.values()), size


def prune(cache_dir: Path, keep_bytes: int, *, dry_run: bool = False) -> PruneReport:
    """Remove least recently used builds until the cache holds ``keep_bytes`` at most."""
    if not cache_dir.is_dir():
        raise ConfigError(f"no cache at {cache_dir} (--cache-dir names the one to prune)")
    # a dry run removes nothing: it may look while runs use the cache
    lease = CacheLease(cache_dir, shared=dry_run)
    if not lease.held:
        raise ConfigError(
            f"a run is using the cache {cache_dir} (swegreen run, demo or regrade, or a "
            "green agent: swegreen serve); prune it after that ends (runs read their "
            "environments and prepared workspaces without a lock)"
        )
    try:
        before, all_builds, inodes = survey(cache_dir)
        chosen, expected = plan(all_builds, before, keep_bytes, inodes)
        if dry_run:
            return PruneReport(chosen, len(all_builds) - len(chosen), before, expected, 0)
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
