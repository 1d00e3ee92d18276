"""History stores: a checkout holds the history up to its base commit and nothing later,
while instances of one repository share the stores of their common past. Real git, on a
repository the test makes over several calendar quarters, and the sample in the sandbox."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from swegreen.core.errors import RepoUnavailable
from swegreen.evaluation.engine import Engine
from swegreen.evaluation.workbench import Workbench, Workbenches
from swegreen.repositories.history import anchors, quarter_start
from swegreen.repositories.repo_cache import RepoCache
from swegreen.sample import SampleBenchmark
from tests.conftest import sample_instance
from tests.helpers import git

DAY = 86400
START = 1_600_000_000  # 2020-09-13


def commit_on(repo: Path, day: int, name: str, tag: str | None = None) -> str:
    (repo / f"{name}.txt").write_text(name + "\n")
    stamp = f"@{START + day * DAY} +0000"
    env = {"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp, "PATH": "/usr/bin:/bin"}
    env["HOME"] = str(repo)
    ident = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*ident, "add", "-A"], check=True, env=env)
    subprocess.run([*ident, "commit", "-qm", name], check=True, env=env)
    if tag:
        subprocess.run([*ident, "tag", "-a", tag, "-m", tag], check=True, env=env)
    return git(repo, "rev-parse", "HEAD").stdout.strip()


def make_history(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    repo = tmp_path / "upstream" / "o__r"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    shas = {}
    for day, name, tag in [
        (0, "first", "v1.0"),
        (100, "second", None),
        (200, "third", "v2.0"),
        (300, "old-base", None),  # a base commit
        (310, "old-fix", "v2.1"),  # the fix of the old base: later than it
        (400, "new-base", None),  # another base, two quarters on
        (410, "new-fix", "v3.0"),
    ]:
        shas[name] = commit_on(repo, day, name, tag)
    return repo, shas


def objects_reachable(checkout: Path) -> set[str]:
    out = git(checkout, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").stdout
    return set(out.split())


def test_a_long_history_is_read_through_its_whole_chain(tmp_path: Path) -> None:
    """Three years, a dozen anchors: a checkout lists its chain flat, so git reads every
    store (it follows alternates of alternates only five levels deep)."""
    repo = tmp_path / "upstream" / "o__long"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    shas = [commit_on(repo, day, f"c{day}") for day in range(0, 1100, 60)]
    cache = RepoCache(tmp_path / "cache" / "repos", str(tmp_path / "upstream" / "{owner}__{name}"))
    cut = asyncio.run(cache.checkout_isolated("o/long", shas[-2], tmp_path / "ws"))
    assert len(cut.objects) > 6
    log = subprocess.run(
        ["git", "-C", str(tmp_path / "ws"), "log", "--format=%H"], capture_output=True, text=True
    )
    assert log.stderr == "" and log.stdout.split() == shas[-2::-1]
    assert (
        subprocess.run(
            ["git", "-C", str(tmp_path / "ws"), "fsck", "--connectivity-only"], capture_output=True
        ).returncode
        == 0
    )


def test_anchors_are_the_last_commits_before_each_quarter() -> None:
    q = quarter_start(START)
    chain = [("e", q + 200 * DAY), ("d", q + 100 * DAY), ("c", q + 95 * DAY), ("b", q + 5 * DAY)]
    chain += [("a", q - 10 * DAY)]
    # newest first in; oldest first out; one per quarter boundary crossed
    assert anchors(chain) == ["a", "b", "d"]
    assert anchors(chain[:1]) == []


def test_a_checkout_holds_its_past_and_nothing_after(tmp_path: Path) -> None:
    upstream, shas = make_history(tmp_path)
    cache = RepoCache(tmp_path / "cache" / "repos", str(tmp_path / "upstream" / "{owner}__{name}"))

    async def both() -> tuple[object, object]:
        old = await cache.checkout_isolated("o/r", shas["old-base"], tmp_path / "old")
        new = await cache.checkout_isolated("o/r", shas["new-base"], tmp_path / "new")
        return old, new

    old_cut, new_cut = asyncio.run(both())
    old, new = tmp_path / "old", tmp_path / "new"
    # nothing after the base: not the fix, not the next base, not their tags
    for later in ("old-fix", "new-base", "new-fix"):
        assert git(old, "cat-file", "-e", shas[later], check=False).returncode != 0
    assert git(old, "log", "--all", "--format=%s").stdout.split() == [
        "old-base",
        "third",
        "second",
        "first",
    ]
    assert git(old, "tag").stdout.split() == ["v1.0", "v2.0"]
    assert (
        git(old, "describe", "--tags").stdout.strip()
        == git(upstream, "describe", "--tags", shas["old-base"]).stdout.strip()
    )
    assert not (old / ".git" / "ORIG_HEAD").exists()
    assert git(old, "branch", "--show-current").stdout.strip() == "main"
    assert git(old, "status", "--porcelain").stdout == ""
    # every object the old checkout can read is in the past of the old base
    past = set(
        git(upstream, "rev-list", "--objects", shas["old-base"], "v1.0", "v2.0").stdout.split()
    )
    past |= {git(upstream, "rev-parse", t).stdout.strip() for t in ("v1.0", "v2.0")}
    assert objects_reachable(old) <= past
    # the newer base shares the older stores (anchors of their common first-parent past)
    assert new_cut.objects[1:] and set(new_cut.objects[1:]) & set(old_cut.objects[1:])
    assert git(new, "cat-file", "-e", shas["old-fix"]).returncode == 0  # its past now
    assert git(new, "cat-file", "-e", shas["new-fix"], check=False).returncode != 0


def test_no_later_commit_is_readable_in_a_graded_workspace_or_a_workbench(
    sample_engine: Engine, sample: SampleBenchmark
) -> None:
    inst = sample_instance(sample, "sample__calculator-1")
    mirror = sample.repos_dir / "sample__calculator"
    later = git(mirror, "rev-list", "--all", f"^{inst.base_commit}").stdout.split()
    assert later  # the sample repository holds the fix and what came after
    testbeds = sample_engine.testbeds
    git_ = "git -c safe.directory='*'"  # the prepared workspace is the engine's
    probe = (
        f"{git_} rev-parse HEAD && {git_} cat-file --batch-all-objects --batch-check;"
        + "".join(f" {git_} cat-file -e {sha} && echo FOUND {sha};" for sha in later)
        + " echo done"
    )

    async def scenario() -> tuple[str, str]:
        async with testbeds.open("graded", inst) as graded:
            testbeds.sandbox.lend([graded.workspace, graded.scratch])  # as run_eval does
            in_graded = (await Workbench(testbeds, graded).run(probe, 60)).output
        async with Workbenches(testbeds).open("bench", inst) as bench:
            prepared = bench.testbed.prepared
            assert prepared is not None
            in_bench = (await bench.run(f"{probe}; cd {prepared / 'repo'} && {probe}", 60)).output
        return in_graded, in_bench

    for output in asyncio.run(scenario()):
        assert "done" in output and "FOUND" not in output, output
        assert output.count(" commit ") >= 2, output  # git ran, and saw the past
        assert not set(later) & set(output.split()), output


def test_a_source_missing_old_blobs_still_gives_every_complete_checkout(tmp_path: Path) -> None:
    """A public snapshot may lack some blobs of old history (large files left out): the
    stores are still made, a base whose own tree is whole checks out; one whose tree lacks
    a blob fails, naming it."""
    upstream, shas = make_history(tmp_path)
    blob = git(upstream, "rev-parse", f"{shas['first']}:first.txt").stdout.strip()
    (upstream / ".git" / "objects" / blob[:2] / blob[2:]).unlink()  # loose: gone for good
    cache = RepoCache(tmp_path / "cache" / "repos", str(tmp_path / "upstream" / "{owner}__{name}"))
    # new-base's tree still lists first.txt: make a base without it
    git(upstream, "rm", "-q", "first.txt")
    base = commit_on(upstream, 500, "whole-base")
    cut = asyncio.run(cache.checkout_isolated("o/r", base, tmp_path / "ws"))
    assert cut.objects
    assert git(tmp_path / "ws", "status", "--porcelain").stdout == ""
    assert (tmp_path / "ws" / "new-fix.txt").read_text() == "new-fix\n"
    try:
        asyncio.run(cache.checkout_isolated("o/r", shas["old-base"], tmp_path / "broken"))
    except RepoUnavailable as exc:
        assert blob in str(exc)
    else:
        raise AssertionError("a base whose tree lacks a blob must not check out")
