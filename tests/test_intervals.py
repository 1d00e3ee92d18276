"""95% intervals: checked against values computed by hand and published tables."""

from __future__ import annotations

import pytest

from swegreen.core.classify import Reason, Status
from swegreen.core.intervals import Z95, clustered, headline, wilson
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
    # the headline is the wider of Wilson's and the clustered one
    low, high = headline({"a": (10, 10), "b": (0, 10)})
    assert (low, high) == (0.0, 1.0)
    even = {"a": (5, 10), "b": (5, 10)}  # no spread between them: Wilson's remains
    assert headline(even) == pytest.approx(wilson(10, 20))


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
    assert r["no_op_pct_ci"] == pytest.approx(list(wilson(1, 4)), abs=1e-6)
    for status in Status:
        low, high = r[f"{status.value}_pct_ci"]
        assert low <= r[f"{status.value}_pct"] <= high
    # a published row rebuilds the same totals (a shard's, read back)
    assert RunMetrics.from_result_row(r).by_repo == whole.by_repo
