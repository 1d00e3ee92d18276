"""`swegreen cache`: what the cache holds, and `cache prune`: room made in it."""

from __future__ import annotations

import argparse
import shutil
import time
from typing import TYPE_CHECKING

from swegreen.core.errors import ConfigError
from swegreen.processes.cache_room import GIB, CacheLease
from swegreen.processes.cache_room import size as gib

if TYPE_CHECKING:
    from rich.console import Console

    from swegreen.evaluation.settings import LocalSettings


def cache_command(args: argparse.Namespace, settings: LocalSettings, console: Console) -> int:
    from swegreen.evaluation import cache_prune

    cache = settings.cache_dir
    if args.action is None:
        if args.keep_gb is not None or args.dry_run:
            raise ConfigError("--keep-gb and --dry-run go with `swegreen cache prune`")
        if not cache.is_dir():
            console.print(f"no cache at {cache} yet (a run makes it)")
            return 0
        sizes = cache_prune.usage(cache)
        disk = shutil.disk_usage(cache)
        console.print(f"cache {cache}: {gib(sum(sizes.values()))}")
        counts = {
            cache_prune.ENVS: ("environment", "environments"),
            cache_prune.PREPARED: ("prepared workspace", "prepared workspaces"),
        }
        for name, size in sorted(sizes.items(), key=lambda kv: -kv[1]):
            what = ""
            if name in counts:
                n = len(cache_prune.build_dirs(cache / name))
                what = f"  ({n} {counts[name][n != 1]})"
            console.print(f"  {name:<16} {gib(size):>10}{what}")
        console.print(f"disk: {gib(disk.free)} free of {gib(disk.total)}")
        probe = CacheLease(cache, shared=False)  # held at once, or someone holds it
        probe.release()
        console.print(
            "make room: swegreen cache prune --keep-gb N (least recently used environments "
            "and prepared workspaces; later runs build them again)"
            + ("" if probe.held else "; a run is using this cache now: prune after it ends")
        )
        return 0
    if args.keep_gb is None:
        raise ConfigError(
            "cache prune needs --keep-gb N: the most the cache may hold afterwards, in GiB "
            "(`swegreen cache` shows what it holds now)"
        )
    report = cache_prune.prune(cache, round(args.keep_gb * GIB), dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for build in report.removed:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(build.last_used))
        console.print(f"  {verb} {build.kind}/{build.name}  {gib(build.size)}  last used {when}")
    console.print(
        f"{verb} {len(report.removed)} build(s), {report.kept} kept; cache "
        f"{gib(report.size_before)} -> {gib(report.size_after)}"
        + ("" if args.dry_run else f"; {gib(report.freed_on_disk)} freed on disk")
    )
    return 0
