"""Leaderboard arithmetic: shares, pass rates as sums over sums, exact additivity."""

from __future__ import annotations

import json
import random
import time
from importlib import resources

from swegreen.core.classify import Reason, Status
from swegreen.core.dataset import parse_rows
from swegreen.core.errors import EnvSetupFailed
from swegreen.core.intervals import wilson
from swegreen.core.metrics import RunMetrics
from swegreen.core.ports import PatchResult
from swegreen.core.results import InstanceResult
from swegreen.core.rows import RowBuilder, error_row

from .helpers import raw_row


def row(
    iid: str,
    status: Status,
    f2p: tuple[int, int],
    p2p: tuple[int, int],
    reason: str = "r",
    error_kind: str | None = None,
) -> InstanceResult:
    return InstanceResult(
        instance_id=iid,
        repo="o/r",
        status=status,
        reason=reason,
        error_kind=error_kind,
        f2p_passed=f2p[0],
        f2p_total=f2p[1],
        p2p_passed=p2p[0],
        p2p_total=p2p[1],
    )


def test_result_row_has_the_seed_names_as_fractions() -> None:
    results = [
        row("a", Status.RESOLVED, (2, 2), (3, 3)),
        row("b", Status.NO_OP, (0, 1), (5, 5)),
        row("c", Status.REGRESSION, (0, 3), (1, 2)),
        row(
            "d",
            Status.ERROR,
            (0, 0),
            (0, 0),
            reason=Reason.REPO_UNAVAILABLE,
            error_kind="infrastructure",
        ),
    ]
    r = RunMetrics.from_results(results).result_row("ollama/qwen2.5-coder:7b")
    assert r["total_instances"] == 4
    assert r["resolved_pct"] == 0.25
    assert r["no_op_pct"] == 0.25
    assert r["regression_pct"] == 0.25
    assert r["error_pct"] == 0.25
    assert (
        r["breaking_resolved_pct"]
        == r["partially_resolved_pct"]
        == r["work_in_progress_pct"]
        == 0.0
    )
    # sums over sums, not a mean of per-instance ratios: (2+0+0)/(2+1+3), (3+5+1)/(3+5+2)
    assert r["fail_to_pass_passed_pct"] == round(2 / 6, 6)
    assert r["pass_to_pass_passed_pct"] == 0.9
    assert r["fail_to_pass_passed"] == 2 and r["fail_to_pass_total"] == 6
    assert r["pass_to_pass_passed"] == 9 and r["pass_to_pass_total"] == 10
    assert r["green_agent_model"] == "ollama/qwen2.5-coder:7b"
    assert r["infrastructure_errors"] == 1
    assert list(r)[:11] == [
        "total_instances",
        "resolved_pct",
        "breaking_resolved_pct",
        "partially_resolved_pct",
        "work_in_progress_pct",
        "regression_pct",
        "no_op_pct",
        "error_pct",
        "fail_to_pass_passed_pct",
        "pass_to_pass_passed_pct",
        "green_agent_model",
    ]


def test_no_rows_and_no_tests_never_divide_by_zero() -> None:
    r = RunMetrics.from_results([]).result_row("m")
    assert r["total_instances"] == 0
    assert r["resolved_pct"] == 0.0 and r["pass_to_pass_passed_pct"] == 0.0
    only_errors = RunMetrics.from_results([row("a", Status.ERROR, (0, 0), (0, 0))])
    assert only_errors.f2p_rate == 0.0 and only_errors.share(Status.ERROR) == 1.0


def test_participant_failures_are_kept_apart_from_infrastructure_errors() -> None:
    m = RunMetrics.from_results(
        [
            row("a", Status.NO_OP, (0, 1), (1, 1), reason=Reason.PARTICIPANT_TIMEOUT),
            row("b", Status.NO_OP, (0, 1), (1, 1), reason=Reason.PARTICIPANT_ERROR),
            row(
                "c",
                Status.ERROR,
                (0, 0),
                (0, 0),
                reason=Reason.ENV_SETUP_FAILED,
                error_kind="infrastructure",
            ),
            row(
                "d",
                Status.ERROR,
                (0, 0),
                (0, 0),
                reason=Reason.TEST_TIMEOUT,
                error_kind="evaluation",
            ),
        ]
    )
    assert m.participant_failures == 2
    assert m.infrastructure_errors == 1
    assert m.counts["error"] == 2


def test_shards_add_up_exactly_to_the_whole_run() -> None:
    rng = random.Random(7)
    statuses = list(Status)
    results = []
    for i in range(60):
        f2p_total, p2p_total = rng.randint(0, 5), rng.randint(0, 9)
        result = row(
            f"i{i}",
            rng.choice(statuses),
            (rng.randint(0, f2p_total), f2p_total),
            (rng.randint(0, p2p_total), p2p_total),
            reason=rng.choice(["x", "y"]),
        )
        if rng.random() < 0.5:  # some used the interactive mode, some reported tokens
            result.interaction = {"steps": rng.randint(1, 40)}
        if rng.random() < 0.5:
            result.participant_usage = {
                "prompt_tokens": rng.randint(0, 900),
                "completion_tokens": 9,
            }
        results.append(result)
    unvalidated = frozenset(f"i{i}" for i in range(0, 60, 5))
    whole = RunMetrics.from_results(results, unvalidated)
    assert whole.validated_instances == 48
    shards = [RunMetrics.from_results(results[k::7], unvalidated) for k in range(7)]
    merged = shards[0]
    for shard in shards[1:]:
        merged = merged.merge(shard)
    assert merged == whole
    # and from the published rows alone, as a leaderboard would receive them
    rebuilt = RunMetrics()
    for shard in shards:
        rebuilt = rebuilt.merge(RunMetrics.from_result_row(shard.result_row("m")))
    assert rebuilt.result_row("m") == whole.result_row("m")


def test_steps_and_tokens_per_resolved_instance() -> None:
    a = row("a", Status.RESOLVED, (1, 1), (1, 1))
    a.interaction, a.participant_usage = {"steps": 4}, {"total_tokens": 1000}
    b = row("b", Status.RESOLVED, (1, 1), (1, 1))
    b.interaction = {"steps": 10}  # no usage reported: not in the token mean
    c = row("c", Status.NO_OP, (0, 1), (1, 1), reason=Reason.BUDGET_EXHAUSTED)
    c.interaction, c.participant_usage = (
        {"steps": 100},
        {"prompt_tokens": 5, "completion_tokens": 5},
    )
    d = row("d", Status.RESOLVED, (1, 1), (1, 1))  # answered with a patch at once
    d.participant_usage = {"input_tokens": 300, "output_tokens": 200}
    metrics = RunMetrics.from_results([a, b, c, d])
    published = metrics.result_row("m")
    assert published["mean_steps_per_resolved"] == 7.0  # (4 + 10) / 2: c did not resolve
    assert published["mean_tokens_per_resolved"] == 750.0  # (1000 + 500) / 2
    assert published["interactive_instances"] == 3 and published["steps"] == 114
    assert published["participant_failures"] == 1  # budget_exhausted is the participant's
    none = RunMetrics.from_results([row("e", Status.RESOLVED, (1, 1), (1, 1))]).result_row("m")
    assert none["mean_steps_per_resolved"] is None and none["mean_tokens_per_resolved"] is None


def test_pass_rates_cannot_flatter_a_run_of_errors_and_silence() -> None:
    """Error rows count their instance's tests as not passing; P2P tests of a row whose
    code stayed unchanged count as kept, but are shown apart, as are rows that ran tests."""
    row_data = raw_row(1, FAIL_TO_PASS='["t1", "t2"]', PASS_TO_PASS='["t3", "t4", "t5"]')
    [inst] = parse_rows([row_data])
    errored = error_row(inst, None, EnvSetupFailed("no build"), 1, "now", time.monotonic())
    assert (errored.f2p_passed, errored.f2p_total, errored.p2p_passed, errored.p2p_total) == (
        0,
        2,
        0,
        3,
    )
    silent = RowBuilder(inst, PatchResult(None, "x"), "now", time.monotonic()).unapplied(
        Reason.NO_PATCH, "nothing"
    )
    graded = row("g", Status.RESOLVED, (1, 1), (2, 2)).model_copy(update={"tests_ran": True})
    metrics = RunMetrics.from_results([errored, silent, graded])
    assert (metrics.f2p_passed, metrics.f2p_total) == (1, 5)
    assert (metrics.p2p_passed, metrics.p2p_total) == (5, 8)  # 3 unrun + 2 run, of 3+3+2
    out = metrics.result_row("m")
    assert out["tests_ran_instances"] == 1 and out["pass_to_pass_passed_unrun"] == 3
    assert RunMetrics.from_result_row(out) == metrics
    only_errors = RunMetrics.from_results(
        [errored, errored.model_copy(update={"instance_id": "b"})]
    )
    assert only_errors.f2p_rate == 0.0 and only_errors.p2p_rate == 0.0


def test_the_validated_denominator_leaves_out_rows_gold_does_not_resolve_here() -> None:
    """The packaged evidence lists psf__requests-1724 (gold breaks P2P here, every run);
    a row it does not list counts in both rates."""
    listed = json.loads((resources.files("swegreen") / "data" / "gold_stability.json").read_text())
    assert "psf__requests-1724" in listed["rows"]
    for iid, entry in listed["rows"].items():  # every listing says why, with a verdict per run
        verdicts = entry["verdicts"]
        assert verdicts and entry["why"], iid
        graded = [v for v in verdicts.values() if not v.startswith("error")]
        assert not graded or any(not v.startswith("resolved") for v in graded), iid
    results = [
        row("psf__requests-1724", Status.BREAKING_RESOLVED, (1, 1), (0, 1)),
        row("psf__requests-863", Status.RESOLVED, (1, 1), (1, 1)),
        row("psf__requests-5414", Status.NO_OP, (0, 1), (1, 1)),
    ]
    metrics = RunMetrics.from_results(results)
    assert (metrics.validated_instances, metrics.validated_resolved) == (2, 1)
    published = metrics.result_row("m")
    assert published["resolved_pct"] == round(1 / 3, 6)
    assert published["resolved_pct_validated"] == 0.5
    assert published["resolved_pct_validated_ci"] == [round(x, 6) for x in wilson(1, 2)]
    assert RunMetrics.from_results([]).result_row("m")["resolved_pct_validated"] is None
