"""Room in the cache: a run that would fill the disk stops at the reserve, and
`swegreen cache prune` removes least recently used builds that later runs make again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from swegreen.core.classify import Reason, Status
from swegreen.core.errors import ConfigError, DiskFull
from swegreen.evaluation import cache_prune
from swegreen.evaluation.cache_prune import ENVS, PREPARED, Build, build_dirs, plan, prune
from swegreen.evaluation.engine import build_engine
from swegreen.evaluation.settings import LocalSettings
from swegreen.processes.cache_room import GIB, CacheLease, DiskReserve, last_used, mark_used

from .conftest import RunSample, open_to_sandbox, sample_config


def test_a_build_under_the_reserve_says_how_to_make_room(tmp_path: Path) -> None:
    reserve = DiskReserve(tmp_path / "not-yet", 10 * GIB, disk=lambda _p: (3 * GIB, 250 * GIB))
    with pytest.raises(DiskFull) as err:
        reserve.check("the environment django 4.0")
    message = str(err.value)
    assert "3.0 GiB free" in message and "10.0 GiB" in message
    assert "the environment django 4.0 was not built" in message
    assert f"swegreen cache prune --cache-dir {tmp_path / 'not-yet'} --keep-gb N" in message
    DiskReserve(tmp_path, 10 * GIB, disk=lambda _p: (11 * GIB, 250 * GIB)).check("x")  # room
    DiskReserve(tmp_path, 0, disk=lambda _p: (0, 250 * GIB)).check("x")  # 0: no check at all
    with pytest.raises(DiskFull, match=r"30 MiB free .* under the 40 MiB"):  # small: MiB
        DiskReserve(tmp_path, GIB, disk=lambda _p: (30 << 20, 400 << 20)).check("x")
    # a small disk (a tmpfs of 12 GiB) keeps a tenth of itself, not the whole reserve
    small = DiskReserve(tmp_path, 5 * GIB, disk=lambda _p: (2 * GIB, 12 * GIB))
    small.check("x")
    with pytest.raises(DiskFull, match=r"under the 1\.2 GiB"):
        DiskReserve(tmp_path, 5 * GIB, disk=lambda _p: (GIB, 12 * GIB)).check("x")


def test_a_hard_link_counts_once_and_stamps_order_builds(tmp_path: Path) -> None:
    data = tmp_path / "a" / "big"
    data.parent.mkdir()
    data.write_bytes(os.urandom(256 * 1024))
    os.link(data, tmp_path / "a" / "same")
    (tmp_path / "a" / "link").symlink_to("/usr")  # not followed
    one = cache_prune.disk_size(data)
    assert one >= 256 * 1024
    assert cache_prune.disk_size(tmp_path / "a") < 2 * one

    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    mark_used(tmp_path, "old")
    os.utime(tmp_path / ".used" / "old", (1_000, 1_000))
    mark_used(tmp_path, "new")
    assert last_used(tmp_path, "old") == 1_000 < last_used(tmp_path, "new")
    assert last_used(tmp_path, "never") == 0.0


def test_the_plan_takes_prepared_workspaces_first_and_an_environments_dependents() -> None:
    def b(kind: str, name: str, size: int, used: float, env: str | None = None) -> Build:
        return Build(kind, name, Path(f"/c/{kind}/{name}"), size, used, env)

    def names(keep: int, builds: list[Build], total: int) -> list[str]:
        return [x.name for x in plan(builds, total, keep)[0]]

    envs = [b(ENVS, "e-old", 50, 1), b(ENVS, "e-new", 50, 9)]
    prepared = [b(PREPARED, "p-new", 10, 8, "e-new"), b(PREPARED, "p-old", 10, 2, "e-old")]
    everything = sorted(envs + prepared, key=lambda x: x.last_used)
    assert plan(everything, 120, 200) == ([], 120)
    assert names(110, everything, 120) == ["p-old"]
    assert names(100, everything, 120) == ["p-old", "p-new"]
    # the oldest environment next (its prepared workspace already chosen)
    assert names(50, everything, 120) == ["p-old", "p-new", "e-old"]
    assert plan(everything, 120, 0)[1] == 0
    # an environment goes with the prepared workspaces made from it
    only = [b(ENVS, "e", 50, 1), b(PREPARED, "p", 10, 5, "e"), b(PREPARED, "q", 10, 6, "f")]
    assert names(5, only[1:2] + only[:1], 60) == ["p", "e"]
    assert set(names(5, [only[0], only[2]], 60)) == {"q", "e"}


def test_a_file_two_builds_link_is_freed_with_the_last_of_them(tmp_path: Path) -> None:
    """A prepared workspace's view hardlinks its environment's files: removing the
    workspace alone frees only its own files, and the plan counts it so."""
    env = tmp_path / ENVS / "e"
    view = tmp_path / PREPARED / "p" / "env"
    (env / "site").mkdir(parents=True)
    view.mkdir(parents=True)
    (env / "site" / "big.so").write_bytes(os.urandom(1024 * 1024))
    os.link(env / "site" / "big.so", view / "big.so")
    (view / "own.pth").write_bytes(os.urandom(64 * 1024))
    (tmp_path / PREPARED / "p" / "prepared.json").write_text('{"env_key": "e"}')
    found, inodes = cache_prune.builds(tmp_path)
    by_name = {x.name: x for x in found}
    assert by_name["p"].env_key == "e" and len(inodes) == 1
    assert by_name["p"].size < 256 * 1024  # its own file and folders, not the shared 1 MiB
    assert by_name["e"].size < 256 * 1024
    total = sum(cache_prune.usage(tmp_path).values())
    assert cache_prune.survey(tmp_path) == (total, found, inodes)  # one walk, the same sums
    chosen, left = plan(found, total, total - 1, inodes)
    assert [x.name for x in chosen] == ["p"] and left >= 1024 * 1024  # the shared file stays
    chosen, left = plan(found, total, 0, inodes)
    assert {x.name for x in chosen} == {"p", "e"} and left < 64 * 1024  # freed with both
    # a run's view links the file too (outside every build), and envs/ holds more than builds
    (tmp_path / "work").mkdir()
    os.link(env / "site" / "big.so", tmp_path / "work" / "big.so")
    (tmp_path / ENVS / ".locks").mkdir()
    (tmp_path / ENVS / ".locks" / "e.lock").write_bytes(os.urandom(8 * 1024))
    (tmp_path / ENVS / "content-key").symlink_to("e")
    found, inodes = cache_prune.builds(tmp_path)
    total = sum(cache_prune.usage(tmp_path).values())
    assert cache_prune.survey(tmp_path) == (total, found, inodes)
    chosen, left = plan(found, total, 0, inodes)
    assert {x.name for x in chosen} == {"p", "e"} and left >= 1024 * 1024  # the view keeps it


def test_a_run_stops_at_the_reserve_and_prune_makes_room_for_the_next(
    run_sample: RunSample, tmp_path: Path, sample, isolation, host_env
) -> None:
    cache = open_to_sandbox(tmp_path / "cache")

    def engine(reserve_gb: float):
        settings = LocalSettings(
            output_dir=tmp_path / "results", cache_dir=cache, disk_reserve_gb=reserve_gb
        )
        return build_engine(settings, sample_config(sample), host_env, isolation=isolation)

    # a disk with less free than the reserve: the row ends disk_full, saying how to make
    # room; nothing built
    full = engine(5)
    assert full.testbeds is not None
    full.testbeds.envs.reserve = DiskReserve(cache, 5 * GIB, disk=lambda _p: (GIB, 100 * GIB))
    try:
        [row] = run_sample("gold", run_id="full", engine=full, max_rows=1).results
    finally:
        full.close()
    assert (row.status, row.reason) == (Status.ERROR, Reason.DISK_FULL)
    assert "swegreen cache prune" in row.detail and "--disk-reserve-gb" in row.detail
    assert build_dirs(cache / ENVS) == [] and build_dirs(cache / PREPARED) == []

    # not remembered as the recipe's failure: with room, the same row builds and resolves
    roomy = engine(0)
    try:
        [row] = run_sample("gold", run_id="roomy", engine=roomy, max_rows=1).results
        assert row.status is Status.RESOLVED and row.durations.env_build > 0
        assert len(build_dirs(cache / ENVS)) == 1 and len(build_dirs(cache / PREPARED)) == 1
        # a run holds the cache: nothing is pruned under it (a dry run may look)
        with pytest.raises(ConfigError, match="a run is using the cache"):
            prune(cache, 0)
        assert len(prune(cache, 0, dry_run=True).removed) == 2
    finally:
        roomy.close()

    seen = prune(cache, 0, dry_run=True)
    assert [b.kind for b in seen.removed] == [PREPARED, ENVS] and seen.kept == 0
    assert len(build_dirs(cache / ENVS)) == 1  # a dry run removes nothing

    done = prune(cache, 0)
    assert [b.kind for b in done.removed] == [PREPARED, ENVS]
    assert build_dirs(cache / ENVS) == [] and build_dirs(cache / PREPARED) == []
    assert done.size_after < done.size_before and not (cache / ".pruning").exists()
    # what the dry run said would be left is what is left (shared links counted once)
    assert abs(seen.size_after - done.size_after) < 1024 * 1024, (seen, done)
    assert (cache / "repos").is_dir()  # mirrors stay

    again = engine(0)
    try:
        [row] = run_sample("gold", run_id="again", engine=again, max_rows=1).results
        assert row.status is Status.RESOLVED and row.durations.env_build > 0  # built again
    finally:
        again.close()


def swegreen(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swegreen", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        timeout=120,
    )


def test_the_cache_command_shows_sizes_and_refuses_unclear_requests(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / ENVS / "0123456789abcdef").mkdir(parents=True)
    (cache / ENVS / "0123456789abcdef" / "f").write_bytes(os.urandom(64 * 1024))
    (cache / ENVS / "fedcba9876543210").symlink_to("0123456789abcdef")  # a content key
    (cache / "repos").mkdir()
    shown = swegreen("cache", "--cache-dir", str(cache))
    assert shown.returncode == 0, shown.stderr
    assert f"cache {cache}:" in shown.stdout and "(1 environment)" in shown.stdout
    assert "swegreen cache prune --keep-gb N" in shown.stdout
    assert "a run is using this cache now" not in shown.stdout
    held = CacheLease(cache, shared=True)  # as an engine holds it
    try:
        busy = swegreen("cache", "--cache-dir", str(cache))
        assert "a run is using this cache now" in busy.stdout
        refused = swegreen("cache", "prune", "--keep-gb", "0", "--cache-dir", str(cache))
        assert refused.returncode == 2 and "a run is using the cache" in refused.stdout
    finally:
        held.release()

    no_size = swegreen("cache", "prune", "--cache-dir", str(cache))
    assert no_size.returncode == 2 and "cache prune needs --keep-gb N" in no_size.stdout
    dry = swegreen("cache", "prune", "--keep-gb", "0", "--dry-run", "--cache-dir", str(cache))
    assert dry.returncode == 0 and "would remove envs/0123456789abcdef" in dry.stdout
    pruned = swegreen("cache", "prune", "--keep-gb", "0", "--cache-dir", str(cache))
    assert pruned.returncode == 0 and "removed 1 build(s), 0 kept" in pruned.stdout
    assert sorted(p.name for p in (cache / ENVS).iterdir()) == []  # the link went with it

    bad = swegreen("run", "--sample", "--disk-reserve-gb", "-1")
    assert bad.returncode == 2 and "not a size in GiB" in bad.stderr
    env_bad = swegreen(
        "report", "--output-dir", str(tmp_path / "r"), env={"SWEGREEN_DISK_RESERVE_GB": "lots"}
    )
    assert env_bad.returncode == 2 and "SWEGREEN_DISK_RESERVE_GB='lots'" in env_bad.stdout
