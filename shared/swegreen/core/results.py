"""The per-instance result row: what a run records for every instance it evaluated."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from swegreen.core.classify import PARTICIPANT_FAILURES, Status, TestCounts

RESULT_SCHEMA_VERSION = 1
ErrorKind = Literal["infrastructure", "evaluation"]


def utcnow() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class Durations(BaseModel):
    """Seconds spent in each phase of one row (0 when the phase did not run). The phases
    follow one another with no gap, so they add up to ``total``."""

    model_config = ConfigDict(extra="forbid")

    participant: float = 0.0
    setup: float = 0.0
    # The part of setup (and of base validation) spent building the environment or the
    # prepared workspace this row was the first to need: 0 when both were reused.
    env_build: float = 0.0
    # the patch applied and checked, the benchmark's files put back (on the Docker
    # backend also the checks between the eval script's install and test phases)
    apply: float = 0.0
    # the eval script's own run (on the Docker backend: its two execs)
    tests: float = 0.0
    # after the tests: the log graded, the artifacts written, the workspace let go
    grading: float = 0.0
    # between a failed attempt and the next (the retry's backoff)
    waiting: float = 0.0
    # participant + setup + apply + tests + grading + waiting (env_build is within setup)
    total: float = 0.0


class InstanceResult(BaseModel):
    """One row of a run. Stored, published and summed; its fields are a public contract."""

    model_config = ConfigDict(extra="ignore")

    schema_version: int = RESULT_SCHEMA_VERSION
    instance_id: str
    repo: str
    status: Status
    reason: str
    detail: str = ""
    error_kind: ErrorKind | None = None
    model_name_or_path: str = ""
    patch_applied: bool = False
    tests_ran: bool = False
    apply_method: str | None = None
    f2p_passed: int = 0
    f2p_total: int = 0
    p2p_passed: int = 0
    p2p_total: int = 0
    f2p_failing: list[str] = Field(default_factory=list)
    p2p_failing: list[str] = Field(default_factory=list)
    patch_sha256: str | None = None
    patch_bytes: int = 0
    patch_files: list[str] = Field(default_factory=list)
    # Test files and test configuration the participant changed, put back before the tests
    # ran (by its patch, or by its code during the eval-time install): tamper.py.
    tampered: bool = False
    tampered_files: list[str] = Field(default_factory=list)
    isolation: str | None = None  # the sandbox the participant's code ran in (sandbox/local.py)
    test_exit_code: int | None = None  # the test command's, as the engine saw it
    attempts: int = 1
    # error rows: whether evaluating it again may end otherwise (a failure of the moment),
    # or fails the same way until something is fixed (a missing commit, a build's error)
    retry_may_help: bool | None = None
    durations: Durations = Field(default_factory=Durations)
    test_command_seconds: float = 0.0  # inside the eval script (the benchmark's denominator)
    base_validation: dict[str, Any] | None = None
    # --regression-check, resolved rows only (evaluation/regression_check.py): the tests
    # the gold patch passes and this patch does not, over the touched modules' test files.
    # A flag: the verdict stays the official one.
    regression_check: dict[str, Any] | None = None
    # Where its interpreter came from (conda package, the user's, this machine's), and how
    # the environment was made where it differs from upstream's way (testbed.py): files
    # read at another commit, build sources from an offline directory.
    environment: dict[str, Any] = Field(default_factory=dict)
    participant_usage: dict[str, Any] | None = None
    # Interactive mode only: steps, command_seconds, output_bytes, setup_seconds, ended.
    interaction: dict[str, Any] | None = None
    # A2A participants only: dialect, dialect_chosen_by, reply (where the patch was found).
    conversation: dict[str, Any] | None = None
    diagnosis: str | None = None
    started_at: str = Field(default_factory=utcnow)
    finished_at: str = Field(default_factory=utcnow)

    @property
    def counts(self) -> TestCounts:
        return TestCounts(self.f2p_passed, self.f2p_total, self.p2p_passed, self.p2p_total)

    @property
    def is_infrastructure_error(self) -> bool:
        return self.status is Status.ERROR and self.error_kind == "infrastructure"

    @property
    def is_participant_failure(self) -> bool:
        return self.reason in PARTICIPANT_FAILURES

    @property
    def resolved_with_regressions(self) -> bool:
        """Resolved, and the regression check found a test gold passes that this fails."""
        check = self.regression_check or {}
        return self.status is Status.RESOLVED and bool(check.get("regression_count"))

    @property
    def is_environment_limited(self) -> bool:
        """Base validation found F2P passing or P2P failing without any patch."""
        return bool(self.base_validation) and self.base_validation.get("ok") is False


# The fields a grading of the test log decides (``swegreen regrade`` replaces only these).
GRADED_FIELDS = (
    "status",
    "reason",
    "detail",
    "error_kind",
    "patch_applied",
    "tests_ran",
    "f2p_passed",
    "f2p_total",
    "p2p_passed",
    "p2p_total",
    "f2p_failing",
    "p2p_failing",
)


def unapplied_counts(f2p_total: int, p2p_total: int) -> TestCounts:
    """Counts for a patch that was never applied: the repository stayed at the base commit.

    By the dataset's definition F2P tests fail and P2P tests pass there, so a row without
    a patch counts its F2P tests as failed and its P2P tests as kept, exactly what running
    them would show (base validation reports any instance where that does not hold).
    """
    return TestCounts(0, f2p_total, p2p_total, p2p_total)
