"""The decision tree, case by case, and its agreement with the official resolution."""

from __future__ import annotations

import itertools

import pytest
from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS
from swebench.harness.grading import get_resolution_status

from swegreen.core.classify import Reason, Status, TestCounts, classify


@pytest.mark.parametrize(
    ("counts", "status", "reason"),
    [
        # all F2P pass and all P2P pass -> resolved
        (TestCounts(2, 2, 3, 3), Status.RESOLVED, Reason.ALL_TESTS_PASS),
        # all F2P pass, P2P broken -> breaking_resolved
        (TestCounts(2, 2, 2, 3), Status.BREAKING_RESOLVED, Reason.P2P_BROKEN),
        # all P2P pass, some F2P pass -> partially_resolved
        (TestCounts(1, 2, 3, 3), Status.PARTIALLY_RESOLVED, Reason.SOME_F2P_FAIL),
        # all P2P pass, no F2P pass -> no_op
        (TestCounts(0, 2, 3, 3), Status.NO_OP, Reason.NO_F2P_PASS),
        # some F2P pass, P2P broken -> work_in_progress
        (TestCounts(1, 2, 0, 3), Status.WORK_IN_PROGRESS, Reason.SOME_F2P_FAIL_P2P_BROKEN),
        # no F2P pass, P2P broken -> regression
        (TestCounts(0, 2, 2, 3), Status.REGRESSION, Reason.NO_F2P_PASS_P2P_BROKEN),
    ],
)
def test_decision_tree_for_an_applied_patch(
    counts: TestCounts, status: Status, reason: Reason
) -> None:
    assert classify(True, counts) == (status, reason)


def test_patch_not_applied_is_no_op_whatever_the_counts() -> None:
    assert classify(False, TestCounts(2, 2, 3, 3)) == (Status.NO_OP, Reason.PATCH_DOES_NOT_APPLY)
    assert classify(False, None)[0] is Status.NO_OP


def test_empty_p2p_list_counts_as_all_p2p_pass() -> None:
    assert classify(True, TestCounts(1, 1, 0, 0))[0] is Status.RESOLVED
    assert classify(True, TestCounts(1, 2, 0, 0))[0] is Status.PARTIALLY_RESOLVED
    assert classify(True, TestCounts(0, 2, 0, 0))[0] is Status.NO_OP


def test_inconsistent_counts_are_refused() -> None:
    with pytest.raises(ValueError):
        TestCounts(3, 2, 0, 0)
    with pytest.raises(ValueError):
        TestCounts(0, 1, -1, 0)


def test_tree_never_contradicts_the_official_resolution() -> None:
    """resolved == RESOLVED_FULL and partially_resolved == RESOLVED_PARTIAL, exhaustively."""
    for f2p_total, p2p_total in itertools.product(range(0, 4), range(0, 4)):
        for f2p_passed, p2p_passed in itertools.product(range(f2p_total + 1), range(p2p_total + 1)):
            report = {
                FAIL_TO_PASS: {
                    "success": ["f"] * f2p_passed,
                    "failure": ["f"] * (f2p_total - f2p_passed),
                },
                PASS_TO_PASS: {
                    "success": ["p"] * p2p_passed,
                    "failure": ["p"] * (p2p_total - p2p_passed),
                },
            }
            official = get_resolution_status(report)
            status, _ = classify(True, TestCounts(f2p_passed, f2p_total, p2p_passed, p2p_total))
            assert (status is Status.RESOLVED) == (official == "RESOLVED_FULL"), report
            assert (status is Status.PARTIALLY_RESOLVED) == (official == "RESOLVED_PARTIAL"), report


def test_every_reason_has_words_for_people() -> None:
    from swegreen.core.classify import REASON_WORDS, Reason

    assert set(REASON_WORDS) == {r.value for r in Reason}
    assert all(words.strip() for words in REASON_WORDS.values())
