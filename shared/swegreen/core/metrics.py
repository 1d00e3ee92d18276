"""Leaderboard arithmetic: per-status shares and aggregate F2P/P2P pass rates.

Everything is kept as raw counts and only divided when a result row is written, so rows
from several shards or runs add up exactly (``merge``), which AgentBeats' sharded runs
rely on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from swegreen.core.classify import Status
from swegreen.core.results import InstanceResult

STATUS_ORDER: tuple[Status, ...] = tuple(Status)


def _zero_counts() -> dict[str, int]:
    return {s.value: 0 for s in STATUS_ORDER}


class RunMetrics(BaseModel):
    """Additive totals of a set of instance results."""

    model_config = ConfigDict(extra="forbid")

    total_instances: int = 0
    counts: dict[str, int] = Field(default_factory=_zero_counts)
    reasons: dict[str, int] = Field(default_factory=dict)
    f2p_passed: int = 0
    f2p_total: int = 0
    p2p_passed: int = 0
    p2p_total: int = 0
    infrastructure_errors: int = 0
    participant_failures: int = 0
    environment_limited: int = 0
    # Rows whose tests ran; P2P tests counted as passing without running, because the
    # row's patch provably left the code unchanged (none, empty, or not applied).
    tests_ran_instances: int = 0
    p2p_passed_unrun: int = 0
    # What participants used (interactive mode; tokens where they report usage), summed
    # over resolved rows for the per-resolved means.
    interactive_instances: int = 0
    steps: int = 0
    resolved_interactive: int = 0
    resolved_steps: int = 0
    resolved_with_tokens: int = 0
    resolved_tokens: int = 0

    @classmethod
    def from_results(cls, results: Iterable[InstanceResult]) -> RunMetrics:
        counts: Counter[str] = Counter()
        reasons: Counter[str] = Counter()
        totals = Counter[str]()
        for r in results:
            counts[r.status.value] += 1
            reasons[r.reason] += 1
            totals["f2p_passed"] += r.f2p_passed
            totals["f2p_total"] += r.f2p_total
            totals["p2p_passed"] += r.p2p_passed
            totals["p2p_total"] += r.p2p_total
            totals["infrastructure_errors"] += r.is_infrastructure_error
            totals["participant_failures"] += r.is_participant_failure
            totals["environment_limited"] += r.is_environment_limited
            totals["tests_ran_instances"] += r.tests_ran
            if not r.tests_ran:
                totals["p2p_passed_unrun"] += r.p2p_passed
            steps = (r.interaction or {}).get("steps")
            tokens = tokens_of(r.participant_usage)
            resolved = r.status is Status.RESOLVED
            if steps is not None:
                totals["interactive_instances"] += 1
                totals["steps"] += int(steps)
                if resolved:
                    totals["resolved_interactive"] += 1
                    totals["resolved_steps"] += int(steps)
            if resolved and tokens is not None:
                totals["resolved_with_tokens"] += 1
                totals["resolved_tokens"] += tokens
        return cls(
            total_instances=sum(counts.values()),
            counts={**_zero_counts(), **counts},
            reasons=dict(sorted(reasons.items())),
            **totals,
        )

    def merge(self, other: RunMetrics) -> RunMetrics:
        """The metrics of the union of two disjoint sets of results."""
        counts = Counter(self.counts) + Counter(other.counts)
        reasons = Counter(self.reasons) + Counter(other.reasons)
        summed = {name: getattr(self, name) + getattr(other, name) for name in ADDITIVE}
        return RunMetrics(
            counts={**_zero_counts(), **counts}, reasons=dict(sorted(reasons.items())), **summed
        )

    def share(self, status: Status) -> float:
        return _ratio(self.counts.get(status.value, 0), self.total_instances)

    @property
    def f2p_rate(self) -> float:
        return _ratio(self.f2p_passed, self.f2p_total)

    @property
    def p2p_rate(self) -> float:
        return _ratio(self.p2p_passed, self.p2p_total)

    @property
    def mean_steps_per_resolved(self) -> float | None:
        """Commands per resolved instance (interactive mode); None when none used it."""
        return _mean(self.resolved_steps, self.resolved_interactive)

    @property
    def mean_tokens_per_resolved(self) -> float | None:
        """Tokens per resolved instance, over those whose participant reported usage."""
        return _mean(self.resolved_tokens, self.resolved_with_tokens)

    def result_row(self, green_agent_model: str) -> dict[str, Any]:
        """The seed leaderboard's row (fractions, not percents), followed by the raw counts."""
        row: dict[str, Any] = {"total_instances": self.total_instances}
        for status in STATUS_ORDER:
            row[f"{status.value}_pct"] = self.share(status)
        row["fail_to_pass_passed_pct"] = self.f2p_rate
        row["pass_to_pass_passed_pct"] = self.p2p_rate
        row["green_agent_model"] = green_agent_model
        row["mean_steps_per_resolved"] = self.mean_steps_per_resolved
        row["mean_tokens_per_resolved"] = self.mean_tokens_per_resolved
        row.update(
            counts=dict(self.counts),
            reasons=dict(self.reasons),
            fail_to_pass_passed=self.f2p_passed,
            fail_to_pass_total=self.f2p_total,
            pass_to_pass_passed=self.p2p_passed,
            pass_to_pass_total=self.p2p_total,
            infrastructure_errors=self.infrastructure_errors,
            participant_failures=self.participant_failures,
            environment_limited=self.environment_limited,
            tests_ran_instances=self.tests_ran_instances,
            pass_to_pass_passed_unrun=self.p2p_passed_unrun,
            **{name: getattr(self, name) for name in USAGE_TOTALS},
        )
        return row

    @classmethod
    def from_result_row(cls, row: Mapping[str, Any]) -> RunMetrics:
        """Rebuild the additive totals from a published result row (e.g. one shard's)."""
        return cls(
            total_instances=row["total_instances"],
            counts={**_zero_counts(), **row["counts"]},
            reasons=dict(row.get("reasons", {})),
            f2p_passed=row["fail_to_pass_passed"],
            f2p_total=row["fail_to_pass_total"],
            p2p_passed=row["pass_to_pass_passed"],
            p2p_total=row["pass_to_pass_total"],
            infrastructure_errors=row.get("infrastructure_errors", 0),
            participant_failures=row.get("participant_failures", 0),
            environment_limited=row.get("environment_limited", 0),
            tests_ran_instances=row.get("tests_ran_instances", 0),
            p2p_passed_unrun=row.get("pass_to_pass_passed_unrun", 0),
            **{name: row.get(name, 0) for name in USAGE_TOTALS},
        )


USAGE_TOTALS = (
    "interactive_instances",
    "steps",
    "resolved_interactive",
    "resolved_steps",
    "resolved_with_tokens",
    "resolved_tokens",
)
ADDITIVE = (
    "total_instances",
    "f2p_passed",
    "f2p_total",
    "p2p_passed",
    "p2p_total",
    "infrastructure_errors",
    "participant_failures",
    "environment_limited",
    "tests_ran_instances",
    "p2p_passed_unrun",
    *USAGE_TOTALS,
)


def tokens_of(usage: Mapping[str, Any] | None) -> int | None:
    """Tokens a participant reported: ``total_tokens``, else prompt + completion (OpenAI's
    and litellm's names); None when it reported none."""
    if not usage:
        return None
    try:
        if usage.get("total_tokens") is not None:
            return int(usage["total_tokens"])
        parts = [
            usage.get(k)
            for k in ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens")
        ]
        found = [int(v) for v in parts if v is not None]
    except (TypeError, ValueError):
        return None
    return sum(found) if found else None


def _mean(total: int, count: int) -> float | None:
    return round(total / count, 2) if count else None


def _ratio(numerator: int, denominator: int) -> float:
    # Nothing counted means nothing passed: 0.0, never a division by zero.
    return round(numerator / denominator, 6) if denominator else 0.0
