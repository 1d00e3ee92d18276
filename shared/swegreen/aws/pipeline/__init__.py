"""The AWS pipeline's steps, as functions over the store and S3.

Resolve (select rows; plan the build phase: which prebuilt artifacts the rows need and
which are missing) -> build phase (trusted tasks: git mirrors and environments, then
prepared workspaces; swegreen.aws.build_phase) -> per row: Dispatch (the patch, or an
A2A exchange started; the row then waits on a callback token that Watch completes when the
participant is done or past its deadline), Presign (the evaluate task's input, artifact
and upload URLs), the evaluate task (applies the patch, runs the tests), Classify (the
decision tree; the row is written) or RecordError (an ``error`` row) -> Aggregate (the
leaderboard). Failed Fargate tasks go through ``task_retry``: capacity, Spot
interruptions and image pulls are retried with jitter (on-demand after Spot failed twice),
an out-of-memory kill is the row's verdict. The Lambda handlers in ``functions/``
validate events and call these; the state machine in ``infra/`` wires them. Nothing here
imports the grader: the heavy work is the sandbox tasks'.

One module per step; ``Pipeline`` is all of them over one set of clients (what a
Lambda handler builds), and this package's names are its public surface.
"""

from __future__ import annotations

from swegreen.aws.pipeline.aggregate import AggregateStep
from swegreen.aws.pipeline.base import PipelineBase, missing_key
from swegreen.aws.pipeline.classify import ClassifyStep
from swegreen.aws.pipeline.dispatch import DispatchStep
from swegreen.aws.pipeline.models import (
    CAPACITY_WAIT_SECONDS,
    EXIT_TEMPFAIL,
    INSTANCE,
    MAX_EXECUTION_SECONDS,
    PREDICTION,
    RESOLVE_WRITERS,
    RETRY_BASE_SECONDS,
    RETRY_MAX_SECONDS,
    ROW_OVERHEAD_SECONDS,
    SANDBOX_INPUT,
    SANDBOX_OUTPUTS,
    SANDBOX_URL_SECONDS,
    SPOT_ATTEMPTS,
    TASK_ATTEMPTS,
    WAIT_MARGIN_SECONDS,
    Attempt,
    BatchEvent,
    BatchPatches,
    BatchRow,
    ClassifyEvent,
    ExecutionStopped,
    Item,
    PatchState,
    PipelineSettings,
    SandboxBatch,
    SandboxInput,
    SandboxTicket,
    StartEvent,
    TaskRetryEvent,
    rows_execution_arn,
)
from swegreen.aws.pipeline.presign import PresignStep
from swegreen.aws.pipeline.resolve import ResolveStep
from swegreen.aws.pipeline.task_retry import task_retry
from swegreen.aws.run_request import PATCHES_PATTERN, PREDICTIONS_PREFIX, RunRequest


class Pipeline(ResolveStep, DispatchStep, PresignStep, ClassifyStep, AggregateStep):
    """Every step, over the same settings, S3 client, store and quotas client."""


__all__ = [
    "CAPACITY_WAIT_SECONDS",
    "EXIT_TEMPFAIL",
    "INSTANCE",
    "MAX_EXECUTION_SECONDS",
    "PATCHES_PATTERN",
    "PREDICTION",
    "PREDICTIONS_PREFIX",
    "RESOLVE_WRITERS",
    "RETRY_BASE_SECONDS",
    "RETRY_MAX_SECONDS",
    "ROW_OVERHEAD_SECONDS",
    "SANDBOX_INPUT",
    "SANDBOX_OUTPUTS",
    "SANDBOX_URL_SECONDS",
    "SPOT_ATTEMPTS",
    "TASK_ATTEMPTS",
    "WAIT_MARGIN_SECONDS",
    "Attempt",
    "BatchEvent",
    "BatchPatches",
    "BatchRow",
    "ClassifyEvent",
    "ExecutionStopped",
    "Item",
    "PatchState",
    "Pipeline",
    "PipelineBase",
    "PipelineSettings",
    "RunRequest",
    "SandboxBatch",
    "SandboxInput",
    "SandboxTicket",
    "StartEvent",
    "TaskRetryEvent",
    "missing_key",
    "rows_execution_arn",
    "task_retry",
]
