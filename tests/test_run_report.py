"""The official run-level report's shape and upstream's mapping of each kind of row."""

from __future__ import annotations

from swegreen.core.classify import Status
from swegreen.core.results import InstanceResult
from swegreen.reports.publish import run_report


def row(
    iid: str, status: Status, reason: str, ran: bool, kind: str | None = None
) -> InstanceResult:
    return InstanceResult(
        instance_id=iid, repo="o/r", status=status, reason=reason, tests_ran=ran, error_kind=kind
    )


def test_each_kind_of_row_lands_where_upstream_puts_it() -> None:
    rows = [
        row("a", Status.RESOLVED, "all_tests_pass", True),
        row("b", Status.REGRESSION, "no_f2p_pass_p2p_broken", True),
        row("c", Status.NO_OP, "empty_patch", False),
        row("d", Status.NO_OP, "participant_timeout", False),
        row("e", Status.NO_OP, "patch_does_not_apply", False),  # upstream: no report -> error
        row("f", Status.ERROR, "repo_unavailable", False, "infrastructure"),
        row("g", Status.ERROR, "test_timeout", False, "evaluation"),
    ]
    report = run_report(["a", "b", "c", "d", "e", "f", "g", "h"], rows)
    assert report["schema_version"] == 2
    assert report["total_instances"] == 8 and report["incomplete_ids"] == ["h"]
    assert report["submitted_ids"] == list("abcdefg")
    assert report["completed_ids"] == ["a", "b"]
    assert report["resolved_ids"] == ["a"] and report["unresolved_ids"] == ["b"]
    assert report["empty_patch_ids"] == ["c", "d"]
    assert report["error_ids"] == ["e", "f", "g"] and report["infra_failure_ids"] == ["f"]
    assert report["failure_reasons"] == {
        "e": "patch_does_not_apply",
        "f": "repo_unavailable",
        "g": "test_timeout",
    }
    counts = {k: v for k, v in report.items() if k.endswith("_instances")}
    assert counts == {
        "total_instances": 8,
        "submitted_instances": 7,
        "completed_instances": 2,
        "resolved_instances": 1,
        "unresolved_instances": 1,
        "infra_failure_instances": 1,
        "ambiguous_failure_instances": 0,
        "empty_patch_instances": 2,
        "error_instances": 3,
    }
