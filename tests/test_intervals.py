"""95% intervals: checked against values computed by hand and published tables."""

from __future__ import annotations

import pytest

from swegreen.core.classify import Reason, Status
from swegreen.core.intervals import MIN_CLUSTERS, Z95, clustered, headline, headline_method, wilson
from swegreen.core.metrics import RunMetrics
from swegreen.core.results import InstanceResult


def test_wilson_matches_known_values() -> None:
    # Wilson score intervals at 95% (e.g. Newcombe 1998, table I; or any calculator)
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson(81, 263) == pytest.approx((0.2553, 0.3662), abs=1e-4)
    assert wilson(0, 0) == (0.0, 1.0)
    assert pytest.approx(1.96, abs=1e-3) == Z95


def test_the_clustered_interval_widens_with_the_spread_between_repositories() -> None:
    # p = 0.5; spread (6-5)^2 + (4-5)^2 = 2; C/(C-1) = 2: se = sqrt(4)/20 = 0.1
    assert clustered({"a": (6, 10), "b": (4, 10)}) == pytest.approx(
        (0.5 - Z95 * 0.1, 0.5 + Z95 * 0.1)
    )
    # one repository all resolved, the other none: se = sqrt(2 * 50) / 20 = 0.5
    assert clustered({"a": (10, 10), "b": (0, 10)}) == (0.0, 1.0)
    assert clustered({"a": (3, 10)}) == (0.0, 1.0)  # nothing to estimate the spread from
    # the headline is the wider of Wilson's and the clustered one, over enough repositories
    split = {f"r{n}": ((10, 10) if n % 2 else (0, 10)) for n in range(MIN_CLUSTERS)}
    assert headline(split) == pytest.approx(clustered(split))
    assert clustered(split)[1] - clustered(split)[0] > wilson(50, 100)[1] - wilson(50, 100)[0]
    even = {f"r{n}": (5, 10) for n in range(MIN_CLUSTERS)}  # no spread: Wilson's remains
    assert headline(even) == pytest.approx(wilson(50, 100))
    assert headline_method(even).startswith("the wider of Wilson's score interval")


def test_too_few_repositories_to_cluster_by_leave_wilson_s_interval_unclipped() -> None:
    """1 resolved of 8 rows over 3 repositories: the clustered normal interval would run
    below 0 and be clipped there ([0.0-47.1]); with so few clusters the headline is
    Wilson's, and says so."""
    few = {"a": (1, 3), "b": (0, 3), "c": (0, 2)}
    assert clustered(few)[0] == 0.0  # clipped
    assert headline(few) == pytest.approx(wilson(1, 8))
    assert headline(few)[0] > 0.0
    assert "too few to cluster by" in headline_method(few)


def row(iid: str, repo: str, status: Status) -> InstanceResult:
    return InstanceResult(
        instance_id=iid, repo=repo, status=status, reason=Reason.ALL_TESTS_PASS, detail=""
    )


def test_every_rate_of_a_result_row_carries_its_interval_and_shards_add_up() -> None:
    results = [
        row("a1", "o/a", Status.RESOLVED),
        row("a2", "o/a", Status.RESOLVED),
        row("b1", "o/b", Status.NO_OP),
        row("b2", "o/b", Status.RESOLVED),
    ]
    whole = RunMetrics.from_results(results)
    merged = RunMetrics.from_results(results[:2]).merge(RunMetrics.from_results(results[2:]))
    assert merged.by_repo == whole.by_repo == {"o/a": [2, 2], "o/b": [2, 1]}
    r = whole.result_row("m")
    assert r["resolved_pct_ci"] == pytest.approx(
        list(headline({"o/a": (2, 2), "o/b": (1, 2)})), abs=1e-6
    )
    assert r["intervals"] == {
        "level": 0.95,
        "resolved_pct_ci": headline_method({"o/a": (2, 2), "o/b": (1, 2)}),
        "others": "Wilson's score interval",
    }
    assert r["no_op_pct_ci"] == pytest.approx(list(wilson(1, 4)), abs=1e-6)
    for status in Status:
        low, high = r[f"{status.value}_pct_ci"]
        assert low <= r[f"{status.value}_pct"] <= high
    # a published row rebuilds the same totals (a shard's, read back)
    assert RunMetrics.from_result_row(r).by_repo == whole.by_repo


def test_rates_over_rows_whose_tests_never_ran_have_no_interval() -> None:
    no_test = InstanceResult(
        instance_id="x1", repo="o/x", status=Status.ERROR, reason=Reason.ALL_TESTS_PASS,
        detail="", f2p_total=3, p2p_total=19,
    )  # fmt: skip
    r = RunMetrics.from_results([no_test]).result_row("m")
    assert r["fail_to_pass_passed_pct_ci"] is None and r["pass_to_pass_passed_pct_ci"] is None
