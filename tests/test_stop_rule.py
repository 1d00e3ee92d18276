"""An assessment whose rows the evaluator itself fails stops, failed, with nothing
published: the rule alone, then through the real green agent over A2A."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from swegreen.core.stop_rule import StopRule
from tests.helpers import Server, start, stop
from tests.test_agent import assess


@pytest.fixture(scope="module")
def green_agent(session_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    out = tmp_path_factory.mktemp("stop")
    servers = [start(["serve"], session_cache, out, "green")]
    try:
        yield servers[0]
    finally:
        stop(servers)


@pytest.fixture(scope="module")
def gold_participant(
    session_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    out = tmp_path_factory.mktemp("gold")
    args = ["participant", "gold", "--dataset", "swegreen:sample"]
    servers = [start(args, session_cache, out, "gold")]
    try:
        yield servers[0]
    finally:
        stop(servers)


def test_the_first_rows_all_failing_stop_the_assessment() -> None:
    rule = StopRule(planned=500, max_share=0.1)
    assert rule.record("error", "env_setup_failed", "pip  failed\n at step 3") is None
    assert rule.record("error", "internal_error") is None
    why = rule.record("error", "env_setup_failed")
    assert why is not None and "the first 3 row(s) all failed" in why
    assert "env_setup_failed 2, internal_error 1" in why and "pip failed at step 3" in why
    assert "0 row(s) were graded" in why


def test_a_graded_row_among_the_first_keeps_it_going_until_the_share_is_passed() -> None:
    rule = StopRule(planned=20, max_share=0.1)
    assert rule.record("resolved", "all_tests_pass") is None
    assert rule.record("error", "sandbox_crashed") is None
    assert rule.record("error", "sandbox_crashed") is None  # 2 of 20: 10%, not more
    why = rule.record("error", "repo_unavailable")
    assert why is not None and "3 of 20 planned rows failed, more than the 10% allowed" in why


def test_the_patchs_own_errors_and_verdicts_never_stop_it() -> None:
    """A time-out, an out-of-memory or tampering may be the patch's doing: verdicts."""
    rule = StopRule(planned=3, max_share=0.1)
    for status, reason in [
        ("error", "test_timeout"),
        ("error", "out_of_memory"),
        ("no_op", "participant_error"),
    ]:
        assert rule.record(status, reason) is None


def test_a_small_run_stops_at_its_first_failure_and_one_turns_the_rule_off() -> None:
    assert StopRule(planned=3, max_share=0.1).record("error", "protocol_unavailable")
    lenient = StopRule(planned=3, max_share=1.0)
    assert lenient.record("error", "internal_error") is None  # the first rows, all failed
    assert lenient.record("error", "internal_error") is None
    assert lenient.record("error", "internal_error") is None


def test_counts_alone_give_the_same_decision() -> None:
    """The aws backend knows only how many of a run's finished rows failed (run.vtl)."""
    assert StopRule(planned=20, max_share=0.1).tally(2, 1) is None
    why = StopRule(planned=20, max_share=0.1).tally(3, 3, "sandbox_crashed: exit 3\n at x")
    assert why is not None and "the first 3 row(s) all failed" in why
    assert "evaluator errors 3" in why and "sandbox_crashed: exit 3 at x" in why
    why = StopRule(planned=20, max_share=0.1).tally(10, 3)
    assert why is not None and "3 of 20 planned rows failed" in why
    assert StopRule(planned=2, max_share=1.0).tally(2, 2) is None


def test_the_green_agent_ends_failed_and_publishes_nothing(
    green_agent: Server, gold_participant: Server
) -> None:
    """Rows the run cannot serve (the AgentSWE protocol without the interactive mode):
    the task ends failed, says why and how many rows were graded, and has no artifact."""
    request = {
        "participants": {"agent": gold_participant.url},
        "config": {
            "dataset": "swegreen:sample",
            "max_rows": 3,
            "interactive": False,
            "task_dialect": "agentswe",
        },
    }
    outcome = asyncio.run(assess(green_agent.url, request))
    assert outcome.state == "TASK_STATE_FAILED", outcome.statuses
    assert outcome.artifacts == []
    final = outcome.statuses[-1]
    assert "failed: stopped after" in final and "protocol_unavailable" in final, final
    assert "no score is published" in final and "row(s) were graded" in final, final


def test_a_published_result_says_how_many_rows_were_graded(
    green_agent: Server, gold_participant: Server
) -> None:
    request = {
        "participants": {"agent": gold_participant.url},
        "config": {"dataset": "swegreen:sample", "max_rows": 1},
    }
    outcome = asyncio.run(assess(green_agent.url, request))
    assert outcome.state == "TASK_STATE_COMPLETED", outcome.statuses
    assert "1 of 1 rows graded" in outcome.texts[0], outcome.texts
