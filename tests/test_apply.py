"""The official apply chain, on real repositories: every fallback and its verdict."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from swegreen.evaluation.apply import apply_patch
from swegreen.repositories.repo_cache import git_env

from .helpers import commit, git, make_repo

BASE = "\n".join(f"line {i}" for i in range(1, 21)) + "\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    make_repo(path, {"a.txt": BASE, "img.bin": "\x00\x01\x02 binary\n"})
    return path


def diff_of(repo: Path, change: dict[str, str], *flags: str) -> str:
    """The diff a participant would send for ``change``, made by git itself."""
    for name, text in change.items():
        (repo / name).write_text(text)
    out = git(repo, "diff", *flags).stdout
    git(repo, "checkout", "--", ".")
    return out


def apply(repo: Path, patch: str):
    path = repo.parent / "patch.diff"
    path.write_text(patch)
    return asyncio.run(apply_patch(repo, path, git_env(repo.parent / "home")))


def test_a_clean_patch_applies_with_git_apply(repo: Path) -> None:
    patch = diff_of(repo, {"a.txt": BASE.replace("line 5", "line five")})
    result = apply(repo, patch)
    assert result.applied and result.method == "git apply --verbose"
    assert "line five" in (repo / "a.txt").read_text()


def test_a_drifted_patch_applies_with_three_way_merge(repo: Path) -> None:
    patch = diff_of(repo, {"a.txt": BASE.replace("line 5", "line five")})
    commit(repo, {"a.txt": BASE.replace("line 3", "line three")}, "drift in the hunk's context")
    result = apply(repo, patch)
    assert result.applied and result.method == "git apply --verbose --3way"
    assert "line three\nline 4\nline five" in (repo / "a.txt").read_text()


def test_a_patch_with_offset_context_needs_fuzz(repo: Path) -> None:
    # No blob ids (so no 3-way), context lines changed: only GNU patch's fuzz applies it.
    patch = (
        "--- a/a.txt\n+++ b/a.txt\n@@ -9,7 +9,7 @@\n line 9\n line 10\n CHANGED 11\n"
        "-line 12\n+line twelve\n line 13\n line 14\n line 15\n"
    )
    result = apply(repo, patch)
    assert result.applied and result.method.startswith("patch --batch --forward --fuzz=5")
    assert "line twelve" in (repo / "a.txt").read_text()


def test_an_already_applied_patch_counts_as_applied(repo: Path) -> None:
    with_blobs = diff_of(repo, {"a.txt": BASE.replace("line 5", "line five")})
    commit(repo, {"a.txt": BASE.replace("line 5", "line five")}, "the fix is already in")
    # With blob ids, the 3-way merge of identical changes is clean: applied.
    assert apply(repo, with_blobs).method == "git apply --verbose --3way"
    git(repo, "checkout", "--", ".")
    # Without them every command refuses, and the reverse check says it is already there.
    plain = "--- a/a.txt\n+++ b/a.txt\n@@ -4,3 +4,3 @@\n line 4\n-line 5\n+line five\n line 6\n"
    result = apply(repo, plain)
    assert result.applied and result.method == "already applied"


def test_a_patch_that_fits_nowhere_is_not_applied_and_leaves_the_tree_clean(repo: Path) -> None:
    patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n nothing\n-like\n+this\n here\n"
    result = apply(repo, patch)
    assert not result.applied and result.method is None
    assert "patch does not apply" in result.log or "FAILED" in result.log
    assert git(repo, "status", "--porcelain").stdout == ""


def test_a_binary_patch_with_data_applies(repo: Path) -> None:
    patch = diff_of(repo, {"img.bin": "\x00\x09 new bytes\n"}, "--binary")
    assert "GIT binary patch" in patch
    result = apply(repo, patch)
    assert result.applied
    assert (repo / "img.bin").read_text() == "\x00\x09 new bytes\n"


def test_a_binary_diff_without_data_changes_nothing_but_counts_as_applied(repo: Path) -> None:
    """git apply refuses it, but GNU patch skips the section and exits 0: upstream runs the
    tests on an unchanged tree, so the verdict is decided by them, not by the apply step."""
    patch = diff_of(repo, {"img.bin": "\x00\x09 new bytes\n"})
    assert "Binary files" in patch
    result = apply(repo, patch)
    assert result.applied and result.method.startswith("patch")
    assert (repo / "img.bin").read_text() == "\x00\x01\x02 binary\n"


def test_three_way_conflict_markers_survive_the_reset_like_upstream(repo: Path) -> None:
    """Upstream resets between tries with `git checkout -- . ; git clean -fd`, which cannot
    reset an unmerged path: after a 3-way conflict, patch --fuzz then applies on top of the
    conflict markers and upstream calls the patch applied. A faithful verdict does the same."""
    patch = diff_of(repo, {"a.txt": BASE.replace("line 10\n", "line 10\nours\n")})
    commit(repo, {"a.txt": BASE.replace("line 10\n", "line 10\ntheirs\n")}, "conflicting insert")
    result = apply(repo, patch)
    assert result.applied and result.method.startswith("patch")
    assert "<<<<<<<" in (repo / "a.txt").read_text()
