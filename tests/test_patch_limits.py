"""Huge patches and replies: refused early and cheaply, never applied, graded or stored."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import pytest

from swegreen.core.classify import Reason, Status
from swegreen.core.config import DEFAULT_MAX_PATCH_BYTES, EvalConfig
from swegreen.core.dataset import Instance, load_dataset
from swegreen.core.patch_extraction import ReplyPart, extract_patch
from swegreen.core.patches import inspect_patch, oversized_patch
from swegreen.core.ports import PatchResult
from swegreen.evaluation.engine import LocalSettings
from swegreen.sample import SampleBenchmark
from swegreen.stores import artifacts as art

from .conftest import RunSample

DIFF = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"


@dataclass
class Fixed:
    patch: str
    name: str = "fixed"
    deterministic: bool = True

    async def get_patch(self, instance: Instance) -> PatchResult:
        return PatchResult(self.patch, "fixed")


def test_the_limit_counts_utf8_bytes_and_is_inclusive() -> None:
    assert oversized_patch(None, 10) is None
    assert oversized_patch("x" * 10, 10) is None
    assert oversized_patch("é" * 5, 10) is None  # 10 bytes
    too_big = oversized_patch("é" * 6, 10)
    assert too_big is not None
    assert too_big.info.size == 12 and too_big.info.files == ()
    assert too_big.info.sha256 == hashlib.sha256(("é" * 6).encode()).hexdigest()
    assert too_big.detail.startswith(
        "the patch is 12 bytes; the limit is 10 (config key max_patch_bytes)"
    )


def test_max_patch_bytes_is_a_validated_config_key() -> None:
    assert EvalConfig().max_patch_bytes == DEFAULT_MAX_PATCH_BYTES == 5_000_000
    assert EvalConfig(max_patch_bytes=100).max_patch_bytes == 100
    with pytest.raises(ValueError, match="max_patch_bytes"):
        EvalConfig(max_patch_bytes=0)


def test_a_patch_over_the_default_limit_is_no_op_and_never_stored(
    run_sample: RunSample, settings: LocalSettings, sample: SampleBenchmark
) -> None:
    """The review's case: a valid diff (the gold fix plus a big new file) over 5 MB."""
    gold = load_dataset(str(sample.dataset)).by_id()["sample__calculator-1"].patch
    filler = "+" + "x" * 99 + "\n"
    lines = DEFAULT_MAX_PATCH_BYTES // len(filler) + 1
    huge = gold + (
        f"diff --git a/big.txt b/big.txt\nnew file mode 100644\n--- /dev/null\n+++ b/big.txt\n"
        f"@@ -0,0 +1,{lines} @@\n" + filler * lines
    )
    size = len(huge.encode())
    assert size > DEFAULT_MAX_PATCH_BYTES

    outcome = run_sample(Fixed(huge), run_id="huge", instance_ids=["sample__calculator-1"])
    [row] = outcome.results
    assert (row.status, row.reason) == (Status.NO_OP, Reason.PATCH_TOO_LARGE)
    assert row.detail.startswith(
        f"the patch is {size} bytes; the limit is {DEFAULT_MAX_PATCH_BYTES} "
        "(config key max_patch_bytes)"
    )
    assert not row.patch_applied and not row.tests_ran and row.apply_method is None
    assert row.durations.setup == 0.0  # no checkout, no environment: refused first
    assert row.patch_bytes == size
    assert row.patch_sha256 == hashlib.sha256(huge.encode()).hexdigest()
    assert row.f2p_passed == 0 and row.p2p_passed == row.p2p_total  # counted as unapplied
    inst = settings.output_dir / "huge" / "instances" / "sample__calculator-1"
    stored = (inst / art.PATCH).read_text()
    assert len(stored.encode()) < 4000
    assert row.patch_sha256 in stored and str(size) in stored
    report = json.loads((inst / art.REPORT).read_text())["sample__calculator-1"]
    assert report["resolved"] is False and report["patch_successfully_applied"] is False
    assert outcome.result_row["reasons"] == {"patch_too_large": 1}


def test_the_limit_comes_from_the_config(run_sample: RunSample) -> None:
    outcome = run_sample("gold", run_id="small-limit", max_rows=2, max_patch_bytes=100)
    assert {(r.status, r.reason) for r in outcome.results} == {
        (Status.NO_OP, Reason.PATCH_TOO_LARGE)
    }
    assert all("the limit is 100 (config key max_patch_bytes)" in r.detail for r in outcome.results)


# Hostile replies: each takes seconds when scanned linearly and hours when quadratically;
# the per-test timeout is the bound.
@pytest.mark.timeout(120)
def test_unclosed_tags_and_fences_in_a_huge_reply_cost_one_pass() -> None:
    for text in (
        "<patch>" * 2_000_000,
        "```diff\n" * 2_000_000,
        "```python\n" * 1_000_000 + DIFF,
    ):
        got = extract_patch([ReplyPart(text=text)])
        if DIFF in text:
            assert got.patch == DIFF and got.source == "bare diff"
        else:
            assert got.patch is None


@pytest.mark.timeout(120)
def test_a_diff_header_full_of_b_slashes_is_parsed_in_linear_time() -> None:
    header = "diff --git a/x" + " b/x" * 1_000_000
    info = inspect_patch(header + "\n")
    assert len(info.files) == 1
    got = extract_patch([ReplyPart(text="Here:\n" + header + "\n--- a/x\n+++ b/x\n")])
    assert got.patch is not None and got.source == "bare diff"


def test_a_huge_diff_in_a_reply_is_found_whole_and_left_to_the_limit() -> None:
    big = DIFF + "+" + "y" * 6_000_000 + "\n"
    for reply in (f"Fixed it:\n```diff\n{big}```\nbye", f"<patch>\n{big}</patch>", big):
        got = extract_patch([ReplyPart(text=reply)])
        assert got.patch == big
        assert oversized_patch(got.patch, DEFAULT_MAX_PATCH_BYTES) is not None
