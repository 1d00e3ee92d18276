"""The project's exception family.

Adapters raise these; only the edges (CLI, A2A server, Lambda handlers) turn them into
exit codes, responses or ``error`` rows. Every message is written for the person who
has to fix the problem: what was wrong and what to do.
"""

from __future__ import annotations


class SweGreenError(Exception):
    """Base class: an error whose message is meant for the user."""


class ConfigError(SweGreenError):
    """A configuration value is missing, unknown or invalid."""


class DatasetError(SweGreenError):
    """The dataset cannot be loaded or a selection does not match it."""


class PredictionsError(SweGreenError):
    """A predictions file cannot be read or is inconsistent with the dataset."""


class StoreError(SweGreenError):
    """The result store refuses an operation (e.g. a run id reused for another dataset)."""


class EvaluationFailure(SweGreenError):
    """Evaluating one instance failed for a reason that is not the participant's patch.

    ``reason`` is the machine-readable reason recorded on the ``error`` row;
    ``infrastructure`` failures (network, disk, a broken environment build) are reported
    apart from participant failures and retried a bounded number of times, unless they
    are ``permanent``: the same input would fail the same way again (an object missing
    from the source, a recipe that cannot build, no interpreter), so a retry only costs time.
    """

    reason: str = "internal_error"
    infrastructure: bool = True
    permanent: bool = False

    def __init__(self, message: str, *, log_tail: str = "", permanent: bool | None = None) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        if permanent is not None:
            self.permanent = permanent
        # what the attempt had spent when it failed (phase -> seconds; the test command's
        # own seconds): an error row records them, not zeros
        self.spent: dict[str, float] = {}
        self.test_command_seconds = 0.0

    @property
    def retryable(self) -> bool:
        return self.infrastructure and not self.permanent


class RepoUnavailable(EvaluationFailure):
    reason = "repo_unavailable"


class ImageUnavailable(EvaluationFailure):
    """The Docker backend could not pull or find the row's instance image."""

    reason = "image_unavailable"


class DiskFull(EvaluationFailure):
    """The next image pull, environment build or prepared workspace would leave less free
    disk than the run keeps in reserve (a full disk breaks everything on the machine;
    pulled images cannot be removed through AgentBeats' Docker gateway)."""

    reason = "disk_full"
    permanent = True


class EnvSetupFailed(EvaluationFailure):
    reason = "env_setup_failed"


class NoRecipe(EvaluationFailure):
    """No environment recipe exists for the instance's (repo, version): retrying cannot help."""

    reason = "no_recipe"
    infrastructure = False
    permanent = True


class InterpreterNotFound(EnvSetupFailed):
    reason = "interpreter_not_found"
    permanent = True


class TestPatchFailed(EvaluationFailure):
    """The dataset's own test patch did not apply: a dataset or workspace defect."""

    reason = "test_patch_failed"
    __test__ = False  # not a pytest test class


class SandboxCrashed(EvaluationFailure):
    reason = "sandbox_crashed"


class TestTimeout(EvaluationFailure):
    """The eval script ran past its time limit. Possibly the patch's fault, so not retried."""

    reason = "test_timeout"
    __test__ = False  # not a pytest test class
    infrastructure = False


class OutOfMemory(EvaluationFailure):
    """The evaluation's container was killed for its memory use: like a time-out, possibly
    the patch's doing, so the row's verdict and not retried."""

    reason = "out_of_memory"
    infrastructure = False


class DiskLimitExceeded(EvaluationFailure):
    """A sandboxed run wrote more than its disk limit and was stopped: like a time-out,
    possibly the patch's doing, so the row's verdict and not retried."""

    reason = "disk_limit_exceeded"
    infrastructure = False


class EnvironmentFault(EvaluationFailure):
    """The test log shows an environment fault (out of memory, no network, ...)."""

    reason = "environment_fault"


class ProtocolUnavailable(EvaluationFailure):
    """The participant speaks a protocol this run cannot serve (the AgentSWE protocol's
    commands need the interactive mode's workbench): the run's configuration, not the
    participant, so the row is an error, and the same on every retry."""

    reason = "protocol_unavailable"
    permanent = True


class ParticipantProtocol(EvaluationFailure):
    """The participant answered that it could not read the task: it was never evaluated,
    so the row is an error (never a ``no_op`` that scores it), the same on every retry."""

    reason = "participant_protocol"
    infrastructure = False
    permanent = True


# A patch source's failure reasons that make an ``error`` row rather than a ``no_op``:
# the participant was never evaluated.
UNEVALUATED = {cls.reason: cls for cls in (ProtocolUnavailable, ParticipantProtocol)}


def unevaluated(reason: str | None, detail: str) -> EvaluationFailure | None:
    """The failure to raise for a patch source's ``reason``, where it is one of those."""
    cls = UNEVALUATED.get(reason or "")
    return cls(detail) if cls is not None else None


class SandboxUnavailable(SweGreenError):
    """The requested isolation cannot run on this host; the run does not start."""


class LogTampering(EvaluationFailure):
    """The test log contradicts what the test runner itself recorded: the row is an error,
    never a silent pass. Not retried: the same patch would do the same again."""

    reason = "log_tampering"
    infrastructure = False


class WorkspaceTampering(EvaluationFailure):
    """Participant code replaced part of the workspace the engine works through (the
    checkout or its ``.git`` turned into a symlink, say): the engine stops rather than
    follow it onto the host. Not retried: the same patch would do the same again."""

    reason = "workspace_tampering"
    infrastructure = False
    permanent = True
