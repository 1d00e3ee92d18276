"""The per-repo git cache and the checkouts made from it, on real repositories."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from swegreen.core.config import repo_url
from swegreen.core.errors import RepoUnavailable
from swegreen.repositories.repo_cache import RepoCache, github_repo

from .helpers import commit, git, make_repo


@pytest.fixture
def upstream(tmp_path: Path) -> tuple[Path, list[str]]:
    path = tmp_path / "mirrors" / "acme__widget"
    shas = [make_repo(path, {"w.py": "v = 1\n"})]
    git(path, "tag", "v1")
    shas.append(commit(path, {"w.py": "v = 2\n"}, "two"))
    git(path, "tag", "v2")
    shas.append(commit(path, {"w.py": "v = 3\n", "future.txt": "secret\n"}, "three"))
    return path, shas


def cache_for(tmp_path: Path) -> RepoCache:
    return RepoCache(tmp_path / "cache", str(tmp_path / "mirrors" / "{owner}__{name}"))


def test_url_template_fills_repo_owner_and_name() -> None:
    assert (
        repo_url("https://github.com/{repo}.git", "psf/requests")
        == "https://github.com/psf/requests.git"
    )
    assert repo_url("/m/{owner}__{name}.git", "psf/requests") == "/m/psf__requests.git"


def test_checkout_is_at_the_base_commit_without_remote_or_future_tags(
    tmp_path: Path, upstream
) -> None:
    _, shas = upstream
    cache = cache_for(tmp_path)
    dest = tmp_path / "ws"
    asyncio.run(cache.checkout("acme/widget", shas[0], dest))
    assert (dest / "w.py").read_text() == "v = 1\n"
    assert not (dest / "future.txt").exists()
    assert git(dest, "rev-parse", "HEAD").stdout.strip() == shas[0]
    assert git(dest, "remote").stdout.strip() == ""
    assert git(dest, "tag").stdout.split() == ["v1"]  # v2 is dated after the base commit
    assert git(dest, "status", "--porcelain").stdout == ""


def test_the_cache_is_cloned_once_and_fetched_only_for_new_commits(
    tmp_path: Path, upstream
) -> None:
    path, shas = upstream
    cache = cache_for(tmp_path)
    asyncio.run(cache.ensure_commit("acme/widget", shas[1]))
    mirror = cache.mirror_path("acme/widget")
    first_inode = mirror.stat().st_ino
    newer = commit(path, {"w.py": "v = 4\n"}, "four")
    asyncio.run(cache.checkout("acme/widget", newer, tmp_path / "ws"))
    assert mirror.stat().st_ino == first_inode  # fetched into, not re-cloned
    assert (tmp_path / "ws" / "w.py").read_text() == "v = 4\n"


def test_concurrent_checkouts_share_one_clone(tmp_path: Path, upstream) -> None:
    _, shas = upstream
    cache = cache_for(tmp_path)

    async def many() -> None:
        await asyncio.gather(
            *(cache.checkout("acme/widget", shas[i % 3], tmp_path / f"ws{i}") for i in range(6))
        )

    asyncio.run(many())
    assert [p.name for p in (tmp_path / "cache").glob("*.git")] == ["acme__widget.git"]
    assert (tmp_path / "ws5" / "w.py").read_text() == "v = 3\n"


def test_an_unreachable_repository_is_a_clear_infrastructure_failure(tmp_path: Path) -> None:
    cache = RepoCache(tmp_path / "cache", str(tmp_path / "nowhere" / "{owner}__{name}"))
    with pytest.raises(
        RepoUnavailable, match=r"cannot clone acme/widget from .*nowhere/acme__widget"
    ) as info:
        asyncio.run(cache.ensure_commit("acme/widget", "0" * 40))
    assert info.value.infrastructure and "repo_url_template" in str(info.value)
    assert not list((tmp_path / "cache").glob("*.git"))  # nothing half-made is left behind


def test_a_missing_commit_is_named(tmp_path: Path, upstream) -> None:
    cache = cache_for(tmp_path)
    with pytest.raises(
        RepoUnavailable, match="commit 1234567890123456789012345678901234567890 is not in"
    ):
        asyncio.run(cache.ensure_commit("acme/widget", "1234567890" * 4))


def test_a_blob_the_source_lacks_is_a_permanent_failure(tmp_path: Path, upstream) -> None:
    """As the public astropy snapshot lacks a large data file: the checkout fails with
    git's "unable to read sha1 file of <path>", which no retry can mend."""
    path, shas = upstream
    blob = git(path, "rev-parse", f"{shas[2]}:future.txt").stdout.strip()
    (path / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    cache = cache_for(tmp_path)
    with pytest.raises(RepoUnavailable, match="unable to read sha1 file") as failed:
        asyncio.run(cache.checkout("acme/widget", shas[2], tmp_path / "work"))
    assert failed.value.permanent


def commit_gitlink(repo: Path, target: str) -> str:
    """Commit .gitmodules and a gitlink to ``target`` at helpers/ (no work tree for it)."""
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{target},helpers")
    git(repo, "add", ".gitmodules")
    git(repo, "commit", "-q", "-m", "with a submodule")
    return git(repo, "rev-parse", "HEAD").stdout.strip()


@pytest.mark.parametrize("isolated", [False, True])
def test_submodules_come_from_the_same_source_as_the_repository_never_github(
    tmp_path: Path, isolated: bool
) -> None:
    """astropy 1.3's astropy_helpers: the checkout has it at the recorded commit, from
    the mirror the template names, and the checkout's git config names that mirror (a
    later `git submodule update`, e.g. by setup.py, stays offline). A checkout that runs
    participant code (``checkout_isolated``) holds nothing of the submodule after its
    recorded commit either."""
    helpers = tmp_path / "mirrors" / "acme__helpers"
    first = make_repo(helpers, {"h.py": "H = 1\n"})
    newer = commit(helpers, {"h.py": "H = 2\n"}, "newer, not the recorded one")
    main = tmp_path / "mirrors" / "acme__widget"
    make_repo(main, {"w.py": "v = 1\n"})
    (main / ".gitmodules").write_text(
        '[submodule "helpers"]\n\tpath = helpers\n\turl = https://github.com/acme/helpers.git\n'
    )
    base = commit_gitlink(main, first)
    dest = tmp_path / "ws"
    cache = cache_for(tmp_path)
    checkout = cache.checkout_isolated if isolated else cache.checkout
    asyncio.run(checkout("acme/widget", base, dest))
    assert (dest / "helpers" / "h.py").read_text() == "H = 1\n"
    if isolated:
        assert git(dest / "helpers", "cat-file", "-e", newer, check=False).returncode != 0
        assert not (dest / ".git" / "modules" / "helpers" / "logs").exists()
    assert git(dest, "submodule", "status").stdout.startswith(f" {first} helpers")
    assert git(dest, "status", "--porcelain").stdout == ""
    # a later `git submodule update` in the checkout would use the local mirror
    url = git(dest, "config", "submodule.helpers.url").stdout.strip()
    assert url.startswith("file://") and "acme__helpers" in url


def test_a_submodule_the_source_lacks_is_a_clear_error(tmp_path: Path) -> None:
    main = tmp_path / "mirrors" / "acme__widget"
    make_repo(main, {"w.py": "v = 1\n"})
    (main / ".gitmodules").write_text(
        '[submodule "helpers"]\n\tpath = helpers\n\turl = https://github.com/acme/helpers.git\n'
    )
    base = commit_gitlink(main, "1" * 40)
    with pytest.raises(RepoUnavailable, match="acme/helpers"):
        asyncio.run(cache_for(tmp_path).checkout("acme/widget", base, tmp_path / "ws"))


def test_github_submodule_urls_name_their_repository() -> None:
    assert github_repo("https://github.com/astropy/astropy-helpers.git", "x/y") == (
        "astropy/astropy-helpers"
    )
    assert github_repo("git@github.com:astropy/astropy-helpers.git", "x/y") == (
        "astropy/astropy-helpers"
    )
    assert github_repo("../sibling.git", "owner/main") == "owner/sibling"
    assert github_repo("https://gitlab.com/a/b.git", "x/y") is None


@pytest.mark.skipif(os.geteuid() != 0, reason="making a repository another user owns needs root")
def test_a_source_another_user_owns_is_cloned_and_fetched(tmp_path: Path, upstream) -> None:
    """A mirror made by root, read by a non-root engine: git's ownership check would
    refuse it, and the engine's git reads no global safe.directory the user could set."""
    path, shas = upstream
    subprocess.run(["chown", "-R", "12345:12345", str(path)], check=True)
    # a file of the source that only its owner may read (a mirror's .promisor file)
    (path / ".git" / "objects" / "pack" / "x.promisor").touch(mode=0o600)
    cache = cache_for(tmp_path)
    asyncio.run(cache.checkout("acme/widget", shas[1], tmp_path / "ws"))
    assert (tmp_path / "ws" / "w.py").read_text() == "v = 2\n"
    subprocess.run(["chown", "-R", "0:0", str(path)], check=True)
    newer = commit(path, {"w.py": "v = 5\n"}, "five")  # fetched, from the same source
    subprocess.run(["chown", "-R", "12345:12345", str(path)], check=True)
    asyncio.run(cache.checkout("acme/widget", newer, tmp_path / "ws2"))
    assert (tmp_path / "ws2" / "w.py").read_text() == "v = 5\n"
