"""Finding the participant's patch: data, files, fences, tags, bare diffs; never inventing one."""

from __future__ import annotations

import json

from swegreen.core.patch_extraction import ReplyPart, extract_patch

DIFF = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"


def test_data_parts_win_under_any_of_the_usual_keys() -> None:
    for key in ("patch", "model_patch", "diff"):
        got = extract_patch([ReplyPart(text="prose"), ReplyPart(data={key: DIFF})])
        assert got.patch == DIFF and key in got.source


def test_json_in_a_text_part_under_any_of_the_usual_keys() -> None:
    for key in ("patch", "model_patch", "diff"):
        got = extract_patch([ReplyPart(text=json.dumps({key: DIFF.rstrip()}))])
        assert got.patch == DIFF and got.source == f"JSON text part '{key}'"
    assert extract_patch([ReplyPart(text='{"patch": ""}')]).patch == ""
    not_a_diff = extract_patch([ReplyPart(text='{"patch": "I changed x.py"}')])
    assert not_a_diff.patch is None


def test_an_empty_patch_in_data_is_an_empty_patch_not_a_missing_one() -> None:
    assert extract_patch([ReplyPart(data={"patch": ""})]).patch == ""


def test_diff_files_as_bytes_or_text() -> None:
    assert extract_patch([ReplyPart(raw=DIFF.encode(), filename="fix.patch")]).patch == DIFF
    assert extract_patch([ReplyPart(text=DIFF, media_type="text/x-diff")]).patch == DIFF


def test_fenced_tagged_and_bare_diffs_in_prose() -> None:
    fenced = f"I fixed it:\n\n```diff\n{DIFF}```\n\nThanks!"
    assert extract_patch([ReplyPart(text=fenced)]).patch == DIFF
    tagged = f"<patch>\n{DIFF}</patch>"
    assert extract_patch([ReplyPart(text=tagged)]).patch == DIFF
    bare = "Patch follows.\n" + DIFF
    assert extract_patch([ReplyPart(text=bare)]).patch == DIFF
    no_final_newline = f"```diff\n{DIFF.rstrip()}\n```"
    assert extract_patch([ReplyPart(text=no_final_newline)]).patch == DIFF


def test_prose_or_code_that_is_not_a_diff_gives_no_patch() -> None:
    prose = ReplyPart(text="I could not fix this, sorry. Try changing x.py line 3.")
    code = ReplyPart(text="```python\ndef f():\n    return 1\n```")
    almost = ReplyPart(text="```diff\n--- nothing here\n```")
    got = extract_patch([prose, code, almost])
    assert got.patch is None and got.source == "no diff in the reply"
