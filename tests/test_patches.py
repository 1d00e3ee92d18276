"""Reading diffs before applying them: file lists, and refusing patches that leave the repo."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from swegreen.core.classify import Reason
from swegreen.core.patches import PatchRejected, check_against_tree, check_patch, inspect_patch

MODIFY = """diff --git a/pkg/mod.py b/pkg/mod.py
index 1111111..2222222 100644
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,2 +1,2 @@
-x = 1
+x = 2
 y = 3
"""


def rejected(patch: str) -> PatchRejected:
    with pytest.raises(PatchRejected) as info:
        check_patch(inspect_patch(patch))
    return info.value


def test_lists_every_file_a_git_diff_touches() -> None:
    patch = MODIFY + (
        "diff --git a/old name.py b/new name.py\nsimilarity index 90%\n"
        "rename from old name.py\nrename to new name.py\n"
        "diff --git a/gone.py b/gone.py\ndeleted file mode 100644\nindex 1..0\n--- a/gone.py\n"
        "+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
        "diff --git a/new.py b/new.py\nnew file mode 100644\nindex 0..1\n--- /dev/null\n"
        "+++ b/new.py\n@@ -0,0 +1 @@\n+hi\n"
    )
    info = inspect_patch(patch)
    assert info.paths == ["pkg/mod.py", "old name.py", "new name.py", "gone.py", "new.py"]
    assert len(info.files) == 4
    check_patch(info)


def test_hunk_lines_that_look_like_headers_are_not_headers() -> None:
    # A removed SQL comment "-- x" reads "--- x" inside the hunk; it must not start a file.
    patch = (
        "--- a/q.sql\n+++ b/q.sql\n@@ -1,3 +1,2 @@\n--- /etc/passwd\n"
        "++++ b/../../escape\n select 1;\n"
    )
    info = inspect_patch(patch)
    assert info.paths == ["q.sql"]
    check_patch(info)


def test_plain_unified_diffs_without_git_headers_are_understood() -> None:
    info = inspect_patch("--- a/x.py\t2024-01-01\n+++ b/x.py\t2024-01-02\n@@ -1 +1 @@\n-a\n+b\n")
    assert info.paths == ["x.py"]


def test_prose_around_a_diff_is_tolerated_like_git_apply_does() -> None:
    info = inspect_patch("Here is my fix:\n\n" + MODIFY + "\nHope it helps!\n")
    assert info.paths == ["pkg/mod.py"]


@pytest.mark.parametrize("garbage", ["I could not fix this issue, sorry.", "@@ -1 +1 @@\n-a\n+b\n"])
def test_text_without_file_changes_is_malformed(garbage: str) -> None:
    assert rejected(garbage).reason is Reason.PATCH_MALFORMED


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("../outside.py", "'..'"),
        ("pkg/../../outside.py", "'..'"),
        ("/etc/passwd", "absolute"),
        (".git/hooks/post-checkout", ".git"),
    ],
)
def test_paths_outside_the_repository_are_refused(path: str, why: str) -> None:
    patch = f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n"
    error = rejected(patch)
    assert error.reason is Reason.PATCH_OUTSIDE_REPO
    assert why in str(error)


def test_absolute_path_in_a_plain_diff_header_is_refused() -> None:
    patch = "--- a//etc/passwd\n+++ b//etc/passwd\n@@ -1 +1 @@\n-a\n+b\n"
    assert rejected(patch).reason is Reason.PATCH_OUTSIDE_REPO


@pytest.mark.parametrize(
    "patch",
    [
        "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n",
        "--- /dev/null\n+++ /tmp/planted.py\n@@ -0,0 +1 @@\n+b\n",
        "diff --git /etc/x /etc/x\n--- /etc/x\n+++ /etc/x\n@@ -1 +1 @@\n-a\n+b\n",
    ],
)
def test_absolute_paths_without_a_prefix_are_refused_not_relocated(patch: str) -> None:
    """`git apply -p1` would strip the leading `/` and write `etc/passwd` in the checkout;
    an absolute path is refused, as docs/security.md says."""
    error = rejected(patch)
    assert error.reason is Reason.PATCH_OUTSIDE_REPO and "absolute" in str(error)


def test_quoted_paths_are_decoded_before_checking() -> None:
    patch = (
        'diff --git "a/\\056\\056/x" "b/\\056\\056/x"\n--- "a/\\056\\056/x"\n+++ "b/\\056\\056/x"\n'
        "@@ -1 +1 @@\n-a\n+b\n"
    )
    assert rejected(patch).reason is Reason.PATCH_OUTSIDE_REPO


SYMLINK_OUT = """diff --git a/link b/link
new file mode 120000
index 0000000..1111111
--- /dev/null
+++ b/link
@@ -0,0 +1 @@
+../../../../etc
\\ No newline at end of file
"""


def test_a_new_symlink_pointing_outside_is_refused() -> None:
    error = rejected(SYMLINK_OUT)
    assert error.reason is Reason.PATCH_OUTSIDE_REPO and "symlink" in str(error)


def test_a_symlink_inside_the_repository_is_fine() -> None:
    check_patch(inspect_patch(SYMLINK_OUT.replace("../../../../etc", "docs/index.md")))


@pytest.mark.parametrize(
    ("link", "target", "escapes"),
    [
        ("link", "..", True),  # exactly the checkout's parent
        ("link", "../", True),
        ("link", "./..", True),
        ("link", "sub/../..", True),
        ("link", "/", True),
        ("link", "", True),
        ("pkg/link", "../..", True),
        ("pkg/link", "..", False),  # the repository's root: inside
        ("pkg/link", "../docs", False),
        ("link", ".", False),
        ("link", "a/../b", False),
    ],
)
def test_a_new_symlinks_target_is_judged_from_where_the_link_is(
    link: str, target: str, escapes: bool
) -> None:
    patch = SYMLINK_OUT.replace("link", link).replace("../../../../etc", target)
    if escapes:
        assert rejected(patch).reason is Reason.PATCH_OUTSIDE_REPO
    else:
        check_patch(inspect_patch(patch))


def _links(*pairs: tuple[str, str]) -> str:
    return "".join(
        SYMLINK_OUT.replace("link", name).replace("../../../../etc", target)
        for name, target in pairs
    )


@pytest.mark.parametrize(
    ("pairs", "escapes"),
    [
        ((("y", "."), ("x", "y/..")), True),  # each stays, together they leave
        ((("x", "y/.."), ("y", ".")), True),  # in either order
        ((("a/y", ".."), ("a/x", "y/..")), True),
        ((("a/y", ".."), ("a/x", "y/a")), False),  # a/x -> a, inside
        ((("p", "q"), ("q", "p")), True),  # a loop: refused as the kernel would (ELOOP)
        ((("y", "."), ("x", "y/docs")), False),
    ],
)
def test_symlinks_the_patch_makes_are_followed_through_each_other(
    pairs: tuple[tuple[str, str], ...], escapes: bool
) -> None:
    """The text alone decides, so that every backend refuses the same patch before it is
    applied anywhere."""
    if escapes:
        assert rejected(_links(*pairs)).reason is Reason.PATCH_OUTSIDE_REPO
    else:
        check_patch(inspect_patch(_links(*pairs)))


def test_writing_through_a_symlink_the_patch_creates_is_refused() -> None:
    inner = SYMLINK_OUT.replace("../../../../etc", "docs")
    patch = inner + "diff --git a/link/x b/link/x\n--- /dev/null\n+++ b/link/x\n@@ -0,0 +1 @@\n+x\n"
    error = rejected(patch)
    assert "through the symlink 'link'" in str(error)


def test_writing_through_an_existing_symlink_out_of_the_tree_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    os.symlink(tmp_path, repo / "pkg" / "escape")
    patch = "--- /dev/null\n+++ b/pkg/escape/pwned.py\n@@ -0,0 +1 @@\n+x\n"
    info = inspect_patch(patch)
    check_patch(info)  # nothing wrong in the text itself...
    with pytest.raises(PatchRejected, match="points outside the repository"):
        check_against_tree(info, repo)  # ...but the checkout has a symlink out


def test_binary_sections_are_recognised() -> None:
    without_data = (
        "diff --git a/img.png b/img.png\nindex 1..2 100644\n"
        "Binary files a/img.png and b/img.png differ\n"
    )
    info = inspect_patch(without_data)
    assert info.paths == ["img.png"] and info.has_binary_without_data
    with_data = (
        "diff --git a/img.png b/img.png\nindex 1..2 100644\nGIT binary patch\nliteral 3\n"
        "KcmZ>9jt>K9u>$`AG\n\nliteral 0\nKcmV+b0RR6000031\n\n"
    )
    assert not inspect_patch(with_data).has_binary_without_data


SHARED_DATASET = Path(__file__).resolve().parents[2] / "shared" / "data" / "swebench_verified.jsonl"


@pytest.mark.skipif(
    not SHARED_DATASET.exists(), reason="the team's offline Verified copy is absent"
)
def test_no_verified_gold_or_test_patch_is_refused() -> None:
    import json
    import re

    for line in SHARED_DATASET.read_text().splitlines():
        row = json.loads(line)
        for column in ("patch", "test_patch"):
            info = inspect_patch(row[column])
            check_patch(info)  # raises if refused
            assert len(info.files) == len(re.findall(r"^diff --git ", row[column], re.M))
