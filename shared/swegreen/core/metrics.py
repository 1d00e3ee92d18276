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

from swegreen.core import gold_stability
from swegreen.core.classify import Status
from swegreen.core.intervals import WILSON, headline, headline_method, wilson
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
    # rows whose gold patch is validated here (core/gold_stability.py), and those resolved
    validated_instances: int = 0
    validated_resolved: int = 0
    # --regression-check: resolved rows it compared, and those failing a test gold passes
    regression_checked: int = 0
    resolved_with_regressions: int = 0
    # rows and resolved rows per repository: the headline's clustered interval (additive)
    by_repo: dict[str, list[int]] = Field(default_factory=dict)

    @classmethod
    def from_results(
        cls, results: Iterable[InstanceResult], not_validated: frozenset[str] | None = None
    ) -> RunMetrics:
        """``not_validated``: rows whose gold patch is not validated here (by default the
        packaged evidence, core/gold_stability.py)."""
        unvalidated = gold_stability.not_validated() if not_validated is None else not_validated
        counts: Counter[str] = Counter()
        reasons: Counter[str] = Counter()
        totals = Counter[str]()
        by_repo: dict[str, list[int]] = {}
        for r in results:
            counts[r.status.value] += 1
            cell = by_repo.setdefault(r.repo, [0, 0])
            cell[0] += 1
            cell[1] += r.status is Status.RESOLVED
            reasons[r.reason] += 1
            if r.instance_id not in unvalidated:
                totals["validated_instances"] += 1
                totals["validated_resolved"] += r.status is Status.RESOLVED
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
            if resolved and (r.regression_check or {}).get("ran"):
                totals["regression_checked"] += 1
                totals["resolved_with_regressions"] += r.resolved_with_regressions
            if resolved and tokens is not None:
                totals["resolved_with_tokens"] += 1
                totals["resolved_tokens"] += tokens
        return cls(
            total_instances=sum(counts.values()),
            counts={**_zero_counts(), **counts},
            reasons=dict(sorted(reasons.items())),
            by_repo=dict(sorted(by_repo.items())),
            **totals,
        )

    def merge(self, other: RunMetrics) -> RunMetrics:
        """The metrics of the union of two disjoint sets of results."""
        counts = Counter(self.counts) + Counter(other.counts)
        reasons = Counter(self.reasons) + Counter(other.reasons)
        summed = {name: getattr(self, name) + getattr(other, name) for name in ADDITIVE}
        by_repo = {
            repo: [
                a + b
                for a, b in zip(
                    self.by_repo.get(repo, [0, 0]), other.by_repo.get(repo, [0, 0]), strict=True
                )
            ]
            for repo in sorted({*self.by_repo, *other.by_repo})
        }
        return RunMetrics(
            counts={**_zero_counts(), **counts},
            reasons=dict(sorted(reasons.items())),
            by_repo=by_repo,
            **summed,
        )

    def interval(self, status: Status) -> tuple[float, float]:
        """95% interval of a status's share: Wilson's; resolved's also clustered by
        repository (core/intervals.py)."""
        if status is Status.RESOLVED and self.by_repo:
            return headline(self._clusters())
        return wilson(self.counts.get(status.value, 0), self.total_instances)

    def interval_methods(self) -> dict[str, Any]:
        """What each ``*_ci`` is, as results.json, the console and the report say it."""
        return {
            "level": 0.95,
            "resolved_pct_ci": headline_method(self._clusters()),
            "others": WILSON,
        }

    def _clusters(self) -> dict[str, tuple[int, int]]:
        return {r: (hits, rows) for r, (rows, hits) in self.by_repo.items()}

    @property
    def resolved_validated_rate(self) -> float | None:
        """Resolved over the rows whose gold patch is validated here; None without any."""
        if not self.validated_instances:
            return None
        return _ratio(self.validated_resolved, self.validated_instances)

    @property
    def resolved_validated_interval(self) -> tuple[float, float]:
        return wilson(self.validated_resolved, self.validated_instances)

    @property
    def f2p_interval(self) -> tuple[float, float]:
        return wilson(self.f2p_passed, self.f2p_total)

    @property
    def p2p_interval(self) -> tuple[float, float]:
        return wilson(self.p2p_passed, self.p2p_total)

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
        # 95% intervals of every rate (core/intervals.py), after the seed's fields
        for status in STATUS_ORDER:
            row[f"{status.value}_pct_ci"] = _rounded(self.interval(status))
        # no interval of a rate over rows whose tests never ran (there is no rate)
        ran = self.tests_ran_instances > 0
        row["fail_to_pass_passed_pct_ci"] = _rounded(self.f2p_interval) if ran else None
        row["pass_to_pass_passed_pct_ci"] = _rounded(self.p2p_interval) if ran else None
        # the same over the rows whose gold patch resolves here every time (gold_stability)
        row["resolved_pct_validated"] = self.resolved_validated_rate
        row["resolved_pct_validated_ci"] = _rounded(self.resolved_validated_interval)
        row["resolved_pct_validated_by"] = gold_stability.source()
        row["intervals"] = self.interval_methods()
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
            resolved_by_repo={r: list(v) for r, v in self.by_repo.items()},
            **{name: getattr(self, name) for name in USAGE_TOTALS},
            **{name: getattr(self, name) for name in (*REGRESSION_TOTALS, *VALIDATED_TOTALS)},
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
            by_repo={r: list(v) for r, v in (row.get("resolved_by_repo") or {}).items()},
            **{
                name: row.get(name, 0)
                for name in (*USAGE_TOTALS, *REGRESSION_TOTALS, *VALIDATED_TOTALS)
            },
        )


USAGE_TOTALS = (
    "interactive_instances",
    "steps",
    "resolved_interactive",
    "resolved_steps",
    "resolved_with_tokens",
    "resolved_tokens",
)
REGRESSION_TOTALS = ("regression_checked", "resolved_with_regressions")
VALIDATED_TOTALS = ("validated_instances", "validated_resolved")
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
    *REGRESSION_TOTALS,
    *VALIDATED_TOTALS,
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


def _rounded(interval: tuple[float, float]) -> list[float]:
    return [round(interval[0], 6), round(interval[1], 6)]
