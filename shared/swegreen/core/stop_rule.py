"""When an assessment stops rather than publish a score nobody earned.

A row that ends in the evaluator's own failure (an environment that did not build, a
crashed sandbox, an internal error, a protocol the run cannot serve, a participant that
could not read the task) says nothing about the participant. Published, such rows make a
0% that reads like a verdict. So an assessment stops, failed, with nothing published,
when its first rows all end that way (the evaluator is broken here) or when they pass
``max_share`` of the rows planned.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from swegreen.core.classify import Reason, Status

# Errors of the evaluator's own making, not the patch's (a time-out, an out-of-memory or
# tampering may be the patch's doing and stay verdicts).
EVALUATOR_REASONS = frozenset(
    {
        Reason.INTERNAL_ERROR,
        Reason.REPO_UNAVAILABLE,
        Reason.ENV_SETUP_FAILED,
        Reason.INTERPRETER_NOT_FOUND,
        Reason.NO_RECIPE,
        Reason.TEST_PATCH_FAILED,
        Reason.SANDBOX_CRASHED,
        Reason.ENVIRONMENT_FAULT,
        Reason.PROTOCOL_UNAVAILABLE,
        Reason.PARTICIPANT_PROTOCOL,
        Reason.IMAGE_UNAVAILABLE,
        Reason.DISK_FULL,
    }
)
FIRST_ROWS = 3  # the first rows finished: all failed means the evaluator is broken here


@dataclass
class StopRule:
    planned: int  # rows the assessment will finish, all participants together
    max_share: float  # of ``planned``, at most, may be the evaluator's failures
    finished: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    first_detail: str = ""

    def record(self, status: str, reason: str, detail: str = "") -> str | None:
        """Count one finished row; returns why the assessment must stop, or None."""
        self.finished += 1
        if status == Status.ERROR and reason in EVALUATOR_REASONS:
            self.failures[reason] += 1
            self.first_detail = self.first_detail or " ".join(detail.split())[:300]
        return self._why(self.finished, sum(self.failures.values()))

    def tally(self, finished: int, failed: int, first_detail: str = "") -> str | None:
        """The same rule from counts alone (a pipeline that reports how many of its
        finished rows were the evaluator's failures, not which)."""
        self.finished = finished
        self.failures = Counter({"evaluator errors": failed} if failed else {})
        self.first_detail = " ".join(first_detail.split())[:300]
        return self._why(finished, failed)

    def _why(self, finished: int, failed: int) -> str | None:
        if self.max_share >= 1:  # the user publishes whatever the rows are
            return None
        first = min(FIRST_ROWS, self.planned)
        if failed and finished == failed and failed >= first:
            why = f"the first {failed} row(s) all failed"
        elif failed > self.max_share * self.planned:
            why = (
                f"{failed} of {self.planned} planned rows failed, more than the "
                f"{self.max_share:.0%} allowed (max_evaluator_error_share)"
            )
        else:
            return None
        reasons = ", ".join(f"{r} {n}" for r, n in self.failures.most_common())
        return (
            f"stopped after {finished} of {self.planned} rows: {why} for the evaluator's "
            f"own reasons ({reasons}), so no score is published; "
            f"{finished - failed} row(s) were graded. First failure: {self.first_detail}"
        )
