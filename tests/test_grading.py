"""Grading goes through the official grader: its markers, anti-spoofing and prefix rules."""

from __future__ import annotations

import json
from pathlib import Path

from swegreen.core.classify import Status, classify
from swegreen.core.dataset import parse_rows
from swegreen.core.grading import FULL, grade_log, skipped_against_base, with_failing

from .helpers import raw_row

START, END = ">>>>> Start Test Output", ">>>>> End Test Output"


def instance(f2p: list[str], p2p: list[str]):
    return parse_rows([raw_row(1, FAIL_TO_PASS=json.dumps(f2p), PASS_TO_PASS=json.dumps(p2p))])[0]


def grade(
    tmp_path: Path,
    body: str,
    f2p: list[str],
    p2p: list[str],
    exit_code: int | None = 0,
    parser: str = "parse_log_pytest",
):
    log = f"+ git apply -v -\n+ : '{START}'\n{body}\n+ : '{END}'\n"
    if exit_code is not None:
        log += f">>>>> Test Exit Code: {exit_code}\n"
    path = tmp_path / "test_output.txt"
    path.write_text(log)
    return grade_log(instance(f2p, p2p), path, parser, "m", "diff")


def test_a_passing_log_resolves_and_report_has_the_official_shape(tmp_path: Path) -> None:
    g = grade(tmp_path, "PASSED t.py::a\nPASSED t.py::b", ["t.py::a"], ["t.py::b"])
    assert g.log_ok and (g.counts.f2p_passed, g.counts.p2p_passed) == (1, 1)
    entry = g.report["o__r-1"]
    assert entry["resolved"] is True and entry["patch_successfully_applied"] is True
    assert entry["tests_status"]["FAIL_TO_PASS"] == {"success": ["t.py::a"], "failure": []}


def test_missing_f2p_counts_as_failed_and_skipped_p2p_as_kept(tmp_path: Path) -> None:
    g = grade(
        tmp_path,
        "SKIPPED t.py::b\nFAILED t.py::c - boom",
        ["t.py::a"],
        ["t.py::b", "t.py::c"],
        exit_code=1,
    )
    assert (g.counts.f2p_passed, g.counts.f2p_total) == (0, 1)
    assert (g.counts.p2p_passed, g.counts.p2p_total) == (1, 2)
    assert g.p2p_failing == ["t.py::c"]
    assert classify(True, g.counts)[0] is Status.REGRESSION


def test_truncated_parametrized_ids_match_by_prefix(tmp_path: Path) -> None:
    g = grade(tmp_path, "PASSED t.py::test_fmt[log(photon/s)]", ["t.py::test_fmt[log(photon"], [])
    assert g.counts.f2p_passed == 1


def test_a_log_that_contradicts_its_exit_code_is_rejected(tmp_path: Path) -> None:
    """A patch can print PASSED lines itself; the recorded exit code gives it away."""
    g = grade(tmp_path, "PASSED t.py::a\nPASSED t.py::b", ["t.py::a"], ["t.py::b"], exit_code=1)
    assert not g.log_ok
    assert (g.counts.f2p_passed, g.counts.p2p_passed) == (0, 0)
    assert g.report["o__r-1"]["resolved"] is False


def test_a_log_without_markers_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "test_output.txt"
    path.write_text("PASSED t.py::a\n")
    g = grade_log(instance(["t.py::a"], []), path, "parse_log_pytest", "m", "diff")
    assert not g.log_ok and g.counts.f2p_passed == 0


def test_out_of_memory_is_flagged_as_an_environment_fault(tmp_path: Path) -> None:
    g = grade(tmp_path, "Killed", ["t.py::a"], [], exit_code=137)
    assert not g.log_ok and g.environment_fault == "out_of_memory"


def test_repo_specific_parsers_are_used(tmp_path: Path) -> None:
    body = "test_add (calc.tests.T) ... ok\ntest_sub (calc.tests.T) ... FAIL"
    g = grade(
        tmp_path,
        body,
        ["test_add (calc.tests.T)"],
        ["test_sub (calc.tests.T)"],
        exit_code=1,
        parser="parse_log_django",
    )
    assert (g.counts.f2p_passed, g.counts.p2p_passed) == (1, 0)


def test_a_skip_the_base_run_did_not_show_counts_as_failing(tmp_path: Path) -> None:
    """The official grader keeps a skipped pass-to-pass test; a test the base commit passed
    and this run skips was skipped by the patch (a feature flag turned off), so swegreen
    counts it failing, says why, and leaves skips the base run also showed alone."""
    body = "PASSED t.py::a\nSKIPPED t.py::b\nSKIPPED t.py::c\nPASSED t.py::d"
    official = grade(tmp_path, body, ["t.py::a"], ["t.py::b", "t.py::c", "t.py::d"])
    assert official.resolution == FULL  # what the official grader says
    base = {"t.py::b": "PASSED", "t.py::c": "SKIPPED", "t.py::d": "PASSED"}
    inst = instance(["t.py::a"], ["t.py::b", "t.py::c", "t.py::d"])
    forced = skipped_against_base(official.status_map, base, inst.PASS_TO_PASS)
    assert list(forced) == ["t.py::b"] and "PASSED on the base commit" in forced["t.py::b"]
    ours = with_failing(official, inst, forced)
    assert (ours.counts.p2p_passed, ours.counts.p2p_total) == (2, 3)
    assert ours.p2p_failing == ["t.py::b"]
    assert classify(True, ours.counts) == classify(True, official.counts.__class__(1, 1, 2, 3))
    assert classify(True, ours.counts)[0] is Status.BREAKING_RESOLVED
    entry = ours.report["o__r-1"]
    assert entry["resolved"] is False and entry["integrity"] == forced
    assert official.report["o__r-1"]["resolved"] is True  # the original is left as it was
    assert with_failing(official, inst, {}) is official
