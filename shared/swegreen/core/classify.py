"""The decision tree that turns a graded evaluation into one status.

Pure functions only. ``resolved`` here coincides with the official harness's
RESOLVED_FULL and ``partially_resolved`` with RESOLVED_PARTIAL; the other statuses split
the official "unresolved" by what happened to the pass-to-pass tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    RESOLVED = "resolved"
    BREAKING_RESOLVED = "breaking_resolved"
    PARTIALLY_RESOLVED = "partially_resolved"
    WORK_IN_PROGRESS = "work_in_progress"
    REGRESSION = "regression"
    NO_OP = "no_op"
    ERROR = "error"


class Reason(StrEnum):
    """Machine-readable reason recorded on every row, beside its status."""

    # Graded outcomes (the patch applied and the tests ran).
    ALL_TESTS_PASS = "all_tests_pass"
    P2P_BROKEN = "p2p_broken"
    SOME_F2P_FAIL = "some_f2p_fail"
    SOME_F2P_FAIL_P2P_BROKEN = "some_f2p_fail_p2p_broken"
    NO_F2P_PASS = "no_f2p_pass"
    NO_F2P_PASS_P2P_BROKEN = "no_f2p_pass_p2p_broken"
    # No patch was applied (status no_op).
    EMPTY_PATCH = "empty_patch"
    NO_PATCH = "no_patch"
    PATCH_MALFORMED = "patch_malformed"
    PATCH_OUTSIDE_REPO = "patch_outside_repo"
    PATCH_TOO_LARGE = "patch_too_large"
    PATCH_DOES_NOT_APPLY = "patch_does_not_apply"
    PARTICIPANT_ERROR = "participant_error"
    PARTICIPANT_TIMEOUT = "participant_timeout"
    BUDGET_EXHAUSTED = "budget_exhausted"  # interactive mode: steps or output used up
    # Evaluation failures (status error); names match errors.EvaluationFailure.reason.
    REPO_UNAVAILABLE = "repo_unavailable"
    ENV_SETUP_FAILED = "env_setup_failed"
    INTERPRETER_NOT_FOUND = "interpreter_not_found"
    NO_RECIPE = "no_recipe"
    TEST_PATCH_FAILED = "test_patch_failed"
    TEST_TIMEOUT = "test_timeout"
    SANDBOX_CRASHED = "sandbox_crashed"
    OUT_OF_MEMORY = "out_of_memory"
    DISK_LIMIT_EXCEEDED = "disk_limit_exceeded"
    ENVIRONMENT_FAULT = "environment_fault"
    LOG_TAMPERING = "log_tampering"
    WORKSPACE_TAMPERING = "workspace_tampering"
    PROTOCOL_UNAVAILABLE = "protocol_unavailable"
    IMAGE_UNAVAILABLE = "image_unavailable"  # the Docker backend: no instance image
    DISK_FULL = "disk_full"  # a pull or a build would leave too little disk
    # The participant said it could not read the task: it was never evaluated.
    PARTICIPANT_PROTOCOL = "participant_protocol"
    INTERNAL_ERROR = "internal_error"


# Each reason in words, for people (the console's end of a run, report listings).
REASON_WORDS: dict[str, str] = {
    "all_tests_pass": "all F2P and P2P tests pass",
    "p2p_broken": "all F2P pass, some P2P broken",
    "some_f2p_fail": "some F2P pass, P2P kept",
    "some_f2p_fail_p2p_broken": "some F2P pass, P2P broken",
    "no_f2p_pass": "no F2P passes, P2P kept",
    "no_f2p_pass_p2p_broken": "no F2P passes, P2P broken",
    "empty_patch": "the patch was empty",
    "no_patch": "no patch was given",
    "patch_malformed": "the patch is not a valid diff",
    "patch_outside_repo": "the patch writes outside the repository",
    "patch_too_large": "the patch is over the size limit",
    "patch_does_not_apply": "the patch does not apply",
    "participant_error": "the participant failed",
    "participant_timeout": "the participant ran out of time",
    "budget_exhausted": "the participant used up its steps or output",
    "repo_unavailable": "the repository (or a commit) could not be had",
    "env_setup_failed": "the environment could not be built",
    "interpreter_not_found": "no interpreter of the version the row needs",
    "no_recipe": "no recipe for the row's repository and version",
    "test_patch_failed": "the benchmark's test patch did not apply",
    "test_timeout": "the tests ran past their time limit",
    "sandbox_crashed": "the sandbox failed",
    "out_of_memory": "the tests ran out of memory",
    "disk_limit_exceeded": "the tests wrote past the disk limit",
    "environment_fault": "the environment was broken by the tests",
    "log_tampering": "the test log was tampered with",
    "workspace_tampering": "the workspace was tampered with",
    "protocol_unavailable": "the participant could not be reached",
    "image_unavailable": "no instance image",
    "disk_full": "too little free disk for the image or build",
    "participant_protocol": "the participant could not read the task",
    "internal_error": "an internal error (a bug; see the row's log)",
}


PARTICIPANT_FAILURES = frozenset(
    {Reason.PARTICIPANT_ERROR, Reason.PARTICIPANT_TIMEOUT, Reason.BUDGET_EXHAUSTED}
)


@dataclass(frozen=True)
class TestCounts:
    """How many fail-to-pass and pass-to-pass tests passed, out of how many graded."""

    __test__ = False  # not a pytest test class

    f2p_passed: int
    f2p_total: int
    p2p_passed: int
    p2p_total: int

    def __post_init__(self) -> None:
        if not (0 <= self.f2p_passed <= self.f2p_total and 0 <= self.p2p_passed <= self.p2p_total):
            raise ValueError(f"inconsistent test counts: {self}")

    @property
    def all_f2p_pass(self) -> bool:
        return self.f2p_passed == self.f2p_total

    @property
    def all_p2p_pass(self) -> bool:
        # An empty P2P list counts as "all P2P pass" (11 Verified rows have none).
        return self.p2p_passed == self.p2p_total


def classify(patch_applied: bool, counts: TestCounts | None) -> tuple[Status, Reason]:
    """The decision tree for an evaluation that ran to completion.

    Evaluation failures (setup, timeout) never reach this function: they are ``error``
    rows built from the failure's own reason.
    """
    if not patch_applied or counts is None:
        return Status.NO_OP, Reason.PATCH_DOES_NOT_APPLY
    some_f2p = counts.f2p_passed > 0
    if counts.all_f2p_pass and counts.all_p2p_pass:
        return Status.RESOLVED, Reason.ALL_TESTS_PASS
    if counts.all_f2p_pass:
        return Status.BREAKING_RESOLVED, Reason.P2P_BROKEN
    if counts.all_p2p_pass:
        if some_f2p:
            return Status.PARTIALLY_RESOLVED, Reason.SOME_F2P_FAIL
        return Status.NO_OP, Reason.NO_F2P_PASS
    if some_f2p:
        return Status.WORK_IN_PROGRESS, Reason.SOME_F2P_FAIL_P2P_BROKEN
    return Status.REGRESSION, Reason.NO_F2P_PASS_P2P_BROKEN
