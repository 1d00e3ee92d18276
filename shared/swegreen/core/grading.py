"""Grading with the official ``swebench`` grader: test log -> statuses -> F2P/P2P report.

Nothing here re-implements SWE-bench's rules. The log is parsed by the repo's official
parser and graded by ``get_eval_report`` (markers, anti-spoofing exit-code check,
prefix matching of truncated ids, SKIPPED semantics); this module only turns the
resulting nested dicts into typed counts for the decision tree.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS, EvalType, ResolvedStatus
from swebench.harness.grading import (
    get_eval_report,
    get_eval_tests_report,
    get_logs_eval,
    get_resolution_status,
)
from swebench.harness.infra_failure import TIER_ENVIRONMENT, classify_text
from swebench.harness.log_parsers import PARSER_REGISTRY
from swebench.types import TestSpec

from swegreen.core.classify import TestCounts
from swegreen.core.dataset import Instance

GRADER = "swebench"


def grader_version() -> str:
    from importlib.metadata import version

    return f"{GRADER} {version(GRADER)}"


@dataclass(frozen=True)
class Grade:
    """The graded outcome of one test log."""

    log_ok: bool  # the grader accepted the log (markers present, tests ran, not spoofed)
    counts: TestCounts
    status_map: dict[str, str]
    report: dict[str, Any]  # report.json, in the official shape
    resolution: str  # RESOLVED_FULL / RESOLVED_PARTIAL / RESOLVED_NO
    f2p_failing: list[str] = field(default_factory=list)
    p2p_failing: list[str] = field(default_factory=list)
    environment_fault: str | None = None  # the official infra classifier's verdict


def test_spec_for(
    instance: Instance, log_parser: str, eval_type: str = "pass_and_fail"
) -> TestSpec:
    if log_parser not in PARSER_REGISTRY:
        raise ValueError(
            f"unknown log parser {log_parser!r}; known: {', '.join(sorted(PARSER_REGISTRY))}"
        )
    return TestSpec(
        instance_id=instance.instance_id,
        image=instance.image or "",
        eval_script_list=[],
        repo=instance.repo,
        version=instance.version,
        FAIL_TO_PASS=list(instance.FAIL_TO_PASS),
        PASS_TO_PASS=list(instance.PASS_TO_PASS),
        log_parser=instance.log_parser or log_parser,
        eval_type=instance.eval_type or eval_type,
    )


def grade_log(
    instance: Instance,
    log_path: Path,
    log_parser: str,
    model_name: str,
    patch: str,
    eval_type: str = "pass_and_fail",
) -> Grade:
    """Grade a test log exactly as the official harness would."""
    spec = test_spec_for(instance, log_parser, eval_type)
    prediction = {
        "instance_id": instance.instance_id,
        "model_name_or_path": model_name,
        "model_patch": patch,
    }
    report = get_eval_report(spec, prediction, str(log_path), include_tests_status=True)
    status_map, log_ok = get_logs_eval(spec, str(log_path))
    entry = report[instance.instance_id]
    tests_status = entry.get("tests_status") or get_eval_tests_report(
        status_map if log_ok else {},
        {FAIL_TO_PASS: spec.FAIL_TO_PASS, PASS_TO_PASS: spec.PASS_TO_PASS},
        eval_type=EvalType(spec.eval_type),
    )
    f2p, p2p = tests_status[FAIL_TO_PASS], tests_status[PASS_TO_PASS]
    counts = TestCounts(
        f2p_passed=len(f2p["success"]),
        f2p_total=len(f2p["success"]) + len(f2p["failure"]),
        p2p_passed=len(p2p["success"]),
        p2p_total=len(p2p["success"]) + len(p2p["failure"]),
    )
    fault = None
    if not log_ok:
        hit = classify_text(log_path.read_text(errors="replace"))
        if hit and hit[1] == TIER_ENVIRONMENT:
            fault = hit[0]
    return Grade(
        log_ok=log_ok,
        counts=counts,
        status_map=status_map if log_ok else {},
        report=report,
        resolution=get_resolution_status(tests_status),
        f2p_failing=list(f2p["failure"]),
        p2p_failing=list(p2p["failure"]),
        environment_fault=fault,
    )


def unapplied_report(instance: Instance, patch: str | None) -> dict[str, Any]:
    """report.json for a patch that was never applied (the official shape, resolved False)."""
    return {
        instance.instance_id: {
            "patch_is_None": patch is None,
            "patch_exists": patch is not None,
            "patch_successfully_applied": False,
            "resolved": False,
        }
    }


FULL = ResolvedStatus.FULL.value
PARTIAL = ResolvedStatus.PARTIAL.value


def skipped_against_base(
    status_map: Mapping[str, str], base: Mapping[str, str], pass_to_pass: Sequence[str]
) -> dict[str, str]:
    """Pass-to-pass tests SKIPPED here that PASSED on the base commit (``base``: base
    validation's statuses). The official grader counts a skipped pass-to-pass test as not
    failed, yet the dataset's pass-to-pass tests pass under the gold patch by definition:
    a test the base run passed and this run skips was skipped by what the patch changed
    (django's ``skipUnlessDBFeature`` on a feature flag the patch turned off, say).
    Returns name -> why; the engine counts them as failing."""
    return {
        name: "integrity: SKIPPED here, PASSED on the base commit (base validation): "
        "counted as failing"
        for name in pass_to_pass
        if status_map.get(name) == "SKIPPED" and base.get(name) == "PASSED"
    }


def with_failing(grade: Grade, instance: Instance, tests: Mapping[str, str]) -> Grade:
    """``grade`` with ``tests`` (name -> why) counted as failing although the status the
    log gives them counts as passing for the official grader (an XFAIL, a skipped
    pass-to-pass test) because the code under test produced it: swegreen's deliberate
    difference from the official verdict (docs/fidelity.md). report.json says why, per
    test, under ``integrity``."""
    if not tests:
        return grade
    report = copy.deepcopy(grade.report)
    entry = report[instance.instance_id]
    status = entry["tests_status"]
    for key in (FAIL_TO_PASS, PASS_TO_PASS):
        moved = [t for t in status[key]["success"] if t in tests]
        status[key]["success"] = [t for t in status[key]["success"] if t not in tests]
        status[key]["failure"] = [*status[key]["failure"], *moved]
    resolution = get_resolution_status(status)
    entry["resolved"] = resolution == FULL
    entry["integrity"] = dict(tests)
    f2p, p2p = status[FAIL_TO_PASS], status[PASS_TO_PASS]
    counts = TestCounts(
        f2p_passed=len(f2p["success"]),
        f2p_total=grade.counts.f2p_total,
        p2p_passed=len(p2p["success"]),
        p2p_total=grade.counts.p2p_total,
    )
    return replace(
        grade,
        counts=counts,
        report=report,
        resolution=resolution,
        f2p_failing=list(f2p["failure"]),
        p2p_failing=list(p2p["failure"]),
    )
