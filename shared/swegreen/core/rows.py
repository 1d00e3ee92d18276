"""Building result rows: what is known of a row before its verdict, and error rows.

Kept apart from evaluation so that the AWS Lambdas can build rows (participant failures,
errors) without importing the official grader and its heavy dependencies.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from swegreen.core.classify import Status, TestCounts
from swegreen.core.dataset import Instance
from swegreen.core.errors import EvaluationFailure
from swegreen.core.patches import PatchInfo, inspect_patch
from swegreen.core.ports import PatchResult
from swegreen.core.results import Durations, InstanceResult, unapplied_counts, utcnow


@dataclass
class RowBuilder:
    """What is known of a row before its verdict."""

    instance: Instance
    patch: PatchResult
    started: str
    t0: float
    info: PatchInfo | None = None
    apply_method: str | None = None
    base_validation: dict[str, Any] | None = None
    test_command_seconds: float = 0.0
    durations: Durations = field(default_factory=Durations)
    tampered_files: list[str] = field(default_factory=list)
    isolation: str | None = None
    test_exit_code: int | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    _phase: tuple[str, float] | None = None

    def __post_init__(self) -> None:
        self.durations.participant = self.patch.duration

    def begin(self, phase: str) -> None:
        """Time ``phase`` from now, ending the one before: a phase a failure cuts short
        still counts, so an ``error`` row says where its time went."""
        self.end()
        self._phase = (phase, time.monotonic())

    def end(self) -> None:
        if self._phase is not None:
            name, t = self._phase
            setattr(self.durations, name, getattr(self.durations, name) + time.monotonic() - t)
            self._phase = None

    def spent(self) -> dict[str, float]:
        """The phases' seconds so far (the running one ended), for a failure to carry."""
        self.end()
        return {
            k: v
            for k, v in self.durations.model_dump().items()
            if k not in ("participant", "total") and v
        }

    def result(
        self,
        status: Status,
        reason: str,
        detail: str,
        *,
        counts: TestCounts,
        applied: bool,
        tests_ran: bool,
        f2p_failing: list[str] | None = None,
        p2p_failing: list[str] | None = None,
    ) -> InstanceResult:
        self.end()
        self.durations.total = time.monotonic() - self.t0 + self.patch.duration
        text = self.patch.patch or ""
        return InstanceResult(
            instance_id=self.instance.instance_id,
            repo=self.instance.repo,
            status=status,
            reason=str(reason),
            detail=detail,
            model_name_or_path=self.patch.model_name_or_path,
            patch_applied=applied,
            tests_ran=tests_ran,
            apply_method=self.apply_method,
            f2p_passed=counts.f2p_passed,
            f2p_total=counts.f2p_total,
            p2p_passed=counts.p2p_passed,
            p2p_total=counts.p2p_total,
            f2p_failing=f2p_failing or [],
            p2p_failing=p2p_failing or [],
            patch_sha256=self.info.sha256 if self.info else None,
            patch_bytes=len(text.encode("utf-8", "surrogateescape")),
            patch_files=self.info.paths if self.info else [],
            tampered=bool(self.tampered_files),
            tampered_files=list(dict.fromkeys(self.tampered_files)),
            isolation=self.isolation,
            test_exit_code=self.test_exit_code,
            durations=self.durations.model_copy(),
            participant_usage=self.patch.usage,
            interaction=self.patch.interaction,
            conversation=self.patch.conversation,
            base_validation=self.base_validation,
            environment=dict(self.environment),
            test_command_seconds=self.test_command_seconds,
            started_at=self.started,
            finished_at=utcnow(),
        )

    def unapplied(self, reason: str, detail: str) -> InstanceResult:
        counts = unapplied_counts(len(self.instance.FAIL_TO_PASS), len(self.instance.PASS_TO_PASS))
        return self.result(
            Status.NO_OP,
            reason,
            detail,
            counts=counts,
            applied=False,
            tests_ran=False,
            f2p_failing=list(self.instance.FAIL_TO_PASS),
        )


def error_row(
    instance: Instance,
    patch: PatchResult | None,
    failure: EvaluationFailure,
    attempts: int,
    started: str,
    t0: float,
    spent: dict[str, float] | None = None,
) -> InstanceResult:
    """The ``error`` row for an evaluation that could not be completed, with the time its
    attempts really spent in each phase (``spent``, else what the failure carries)."""
    patch = patch or PatchResult(None, "")
    row = RowBuilder(
        instance, patch, started, t0, info=inspect_patch(patch.patch) if patch.patch else None
    )
    for phase, seconds in (failure.spent if spent is None else spent).items():
        setattr(row.durations, phase, getattr(row.durations, phase) + seconds)
    row.test_command_seconds = failure.test_command_seconds
    detail = str(failure)
    if failure.log_tail:
        detail += "\n--- log tail ---\n" + failure.log_tail[-2000:]
    result = row.result(
        Status.ERROR,
        failure.reason,
        detail,
        # Every test of the instance counts, none as passing: a run whose rows fail to
        # evaluate must not show a pass rate it never measured.
        counts=TestCounts(0, len(instance.FAIL_TO_PASS), 0, len(instance.PASS_TO_PASS)),
        applied=False,
        tests_ran=False,
    )
    kind = "infrastructure" if failure.infrastructure else "evaluation"
    return result.model_copy(
        update={
            "error_kind": kind,
            "attempts": attempts,
            "retry_may_help": not failure.permanent,
        }
    )
