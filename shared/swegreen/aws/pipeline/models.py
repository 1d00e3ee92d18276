"""The pipeline's events, states and limits: what its steps and the state machine pass
each other (pydantic models, validated at every Lambda's edge)."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from swegreen.aws.guardrails import Guardrails
from swegreen.aws.run_request import RunRequest
from swegreen.core.dataset import Instance
from swegreen.core.ids import check_id
from swegreen.stores import artifacts as art

INSTANCE = "instance.json"
PREDICTION = "prediction.json"  # the row's own prediction (Resolve reads the file once)
SANDBOX_INPUT = "sandbox-input.json"
SANDBOX_BATCH = "sandbox-batch.json"  # a batch task's manifest, under its first row
# Resolve's writes at once: 10,000 rows' objects in seconds, not minutes.
RESOLVE_WRITERS = 32
# What the evaluate task uploads: the artifacts the evaluator writes, but the patch (the
# pipeline's own record of what was evaluated), and the graded row.
SANDBOX_OUTPUTS = (
    art.EVAL_SCRIPT,
    art.TEST_OUTPUT,
    art.TEST_RECORD,
    art.INSTANCE_LOG,
    art.REPORT,
    art.RESULT,
    art.BASE_CENSUS,  # what configures pytest on the base commit (the engine's census)
)
# How long the state machine lets a Fargate task run (infra/states.py).
SANDBOX_TASK_SECONDS = 3 * 3600
# How long the evaluate task's URLs are signed for: one attempt's time, just past its
# deadline (the task's limit, plus the ECS retries before it starts: five, at most 120 s
# apart). Presign signs them again before every attempt, so a retry never holds a URL
# that an earlier attempt could still use, or one about to expire. They also end with
# the credentials that signed them (the Presign function's).
SANDBOX_URL_SECONDS = SANDBOX_TASK_SECONDS + 15 * 60
WAIT_MARGIN_SECONDS = 600
# What one row may take beyond its participant and its eval script (task start, image
# pull, artifact downloads, retries), for the rows phase's time limit.
ROW_OVERHEAD_SECONDS = 1800
MAX_EXECUTION_SECONDS = 360 * 24 * 3600
# A batch task's rows at most (its start is paid once for them; a Spot reclaim costs the
# rows it had not finished, which its retry evaluates).
MAX_BATCH_ROWS = 8  # Standard workflows run for a year at most
# Fargate task failures (task_retry): retried up to this many attempts in all; Spot
# twice, then on-demand.
TASK_ATTEMPTS = 5
SPOT_ATTEMPTS = 2
RETRY_BASE_SECONDS = 10.0
RETRY_MAX_SECONDS = 300.0
# A task refused for the account's limits (vCPU quota, capacity, RunTask throttled) waits
# for room, with no attempt limit, for this long after the first refusal: the row's own
# deadline for starting its task. The rows phase's time limit leaves room for it.
CAPACITY_WAIT_SECONDS = 1800
# The task's own exit status for "failed for a reason of the moment; try again"
# (sysexits' EX_TEMPFAIL): a build that lost the network, say.
EXIT_TEMPFAIL = 75


class PipelineSettings(BaseModel):
    """What the stack gives every function (environment variables)."""

    model_config = ConfigDict(frozen=True)

    table: str
    bucket: str
    runs_prefix: str = "runs/"
    datasets_prefix: str = "datasets/"
    default_config: dict[str, Any] = Field(default_factory=dict)
    grader: str = "swebench"
    # The sandbox tasks' isolation mode (their task definitions'), for the run's provenance.
    sandbox_isolation: str = "process"
    # The build phase: tasks at once, and instances prepared per task.
    build_concurrency: int = 50
    prepare_batch: int = 4
    # vCPUs of an evaluate task and of a build-phase task, to fit them to the quotas.
    sandbox_vcpu: float = 2.0
    build_vcpu: float = 4.0
    guardrails: Guardrails = Field(default_factory=Guardrails)  # per-request ceilings
    # The evaluate task's awsvpc configurations, "closed" and "open" (infra/sandbox.py).
    task_networks: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @classmethod
    def from_env(cls, env: dict[str, str]) -> PipelineSettings:
        return cls(
            table=env["SWEGREEN_TABLE"],
            bucket=env["SWEGREEN_BUCKET"],
            runs_prefix=env.get("SWEGREEN_RUNS_PREFIX", "runs/"),
            datasets_prefix=env.get("SWEGREEN_DATASETS_PREFIX", "datasets/"),
            default_config=json.loads(env.get("SWEGREEN_DEFAULT_CONFIG", "{}")),
            grader=env.get("SWEGREEN_GRADER", "swebench"),
            sandbox_isolation=env.get("SWEGREEN_SANDBOX_ISOLATION", "process"),
            build_concurrency=int(env.get("SWEGREEN_BUILD_CONCURRENCY", "50")),
            prepare_batch=int(env.get("SWEGREEN_PREPARE_BATCH", "4")),
            sandbox_vcpu=float(env.get("SWEGREEN_SANDBOX_VCPU", "2")),
            build_vcpu=float(env.get("SWEGREEN_BUILD_VCPU", "4")),
            guardrails=Guardrails.from_env(env),
            task_networks=json.loads(env.get("SWEGREEN_TASK_NETWORKS", "{}")),
        )


class StartEvent(RunRequest):
    """The execution's input: the request and the run's id (the API's request id)."""

    # 75: the rows phase's execution is named "<run id>-rows" (80 characters at most)
    run_id: str = Field(min_length=1, max_length=75)

    @field_validator("run_id")
    @classmethod
    def _safe_run_id(cls, value: str) -> str:
        return check_id(value, "run id")  # it names the run's S3 prefix


class Item(BaseModel):
    """One item of the Map: a row, or a batch of rows evaluated by one task
    (``batch``: every row's instance id, ``instance_id`` the first's)."""

    run_id: str
    instance_id: str
    source: Literal["a2a", "gold", "empty", "predictions"]
    role: str = "agent"
    url: str | None = None
    predictions_key: str | None = None
    participant_timeout: float = 1800.0
    config_json: str = "{}"  # for the sandbox task's environment (strings only)
    # How long the row's callback may wait (the state machine's TimeoutSecondsPath): the
    # participant's deadline, then a margin for Watch (every minute) to cancel it and
    # hand the row back.
    wait_seconds: int = 1800 + 600
    batch: list[str] = Field(default_factory=list)

    def rows(self) -> list[Item]:
        """The batch's rows as items of their own (a row: itself)."""
        if not self.batch:
            return [self]
        return [self.model_copy(update={"instance_id": i, "batch": []}) for i in self.batch]


class PatchState(BaseModel):
    """Where the row's patch stands: asked for, arrived, or given up on."""

    done: bool
    failure: str | None = None
    detail: str = ""
    patch_key: str | None = None
    model: str = ""
    remote_task_id: str | None = None
    started: float = 0.0
    deadline: float = 0.0
    duration: float = 0.0
    usage: dict[str, Any] | None = None
    # the task dialect, what chose it, where the patch was found (PatchResult.conversation)
    conversation: dict[str, Any] | None = None
    # the interactive mode's steps and output (PatchResult.interaction)
    interaction: dict[str, Any] | None = None


class SandboxInput(BaseModel):
    """What the evaluate task is given (``sandbox-input.json``): the row, the patch, a
    pre-signed GET URL for each prebuilt artifact it starts from (in unpacking order) and
    a pre-signed PUT URL for each of its outputs."""

    instance: Instance
    patch: str
    uploads: dict[str, str]
    artifacts: dict[str, str] = Field(default_factory=dict)


class BatchRow(BaseModel):
    """One row of a batch's manifest: its input, and the name its patch came under."""

    instance_id: str
    input_url: str
    model: str = ""


class SandboxBatch(BaseModel):
    """A batch task's manifest (``SWEGREEN_INPUT_URL``): the rows it evaluates, in order,
    each a ``SandboxInput`` of its own. A retry's lists only the rows without a result."""

    rows: list[BatchRow]


class BatchPatches(BaseModel):
    """Every row's patch state of a batch, by instance id (Dispatch of a batch)."""

    rows: dict[str, PatchState]
    # whether any row has a patch to evaluate (none: no task to start and pay for)
    any_patch: bool = False


class SandboxTicket(BaseModel):
    """Presign's result, for the evaluate task: its only way into S3, and where it runs:
    ``network`` "closed" (the VPC endpoints only) unless the row's tests need the internet
    ("open"), ``awsvpc`` that configuration's subnets and security group."""

    input_url: str
    network: str = Field("closed", pattern="^(closed|open)$")  # a container variable: a str
    awsvpc: dict[str, Any] = Field(default_factory=dict)


class ClassifyEvent(BaseModel):
    item: Item
    patch: PatchState | None = None
    error: dict[str, Any] | None = None  # a Catch's {"Error", "Cause"}


class BatchEvent(BaseModel):
    """A batch's Classify or RecordError: every row's patch state (None when Dispatch
    failed) and the batch's error, if any."""

    item: Item
    patches: BatchPatches | None = None
    error: dict[str, Any] | None = None


class Attempt(BaseModel):
    """Where a Fargate task's retries stand: the attempt about to run, on what capacity,
    and how long to wait before it."""

    number: int = 1
    capacity: Literal["FARGATE_SPOT", "FARGATE"] = "FARGATE_SPOT"
    wait_seconds: int = 0
    retry: bool = True
    why: str = ""
    # waiting for capacity: since when (epoch seconds; 0 = not refused yet), how many times
    waiting_since: float = 0.0
    refusals: int = 0


class TaskRetryEvent(BaseModel):
    error: dict[str, Any]  # the task state's Catch: {"Error", "Cause"}
    attempt: Attempt = Field(default_factory=Attempt)


class ExecutionStopped(BaseModel):
    """EventBridge's "Step Functions Execution Status Change" for an execution that ended
    without finishing (its ``detail``: the execution's name is the run id)."""

    name: str
    status: Literal["ABORTED", "TIMED_OUT", "FAILED"]
    error: str | None = None
    cause: str | None = None

    def run_state(self) -> tuple[str, str]:
        """The run's state and error, as GET /runs/{id} reports them."""
        if self.status == "ABORTED":
            return "cancelled", f"the execution was stopped: {self.cause or 'no reason given'}"
        if self.status == "TIMED_OUT":
            return "failed", "the execution timed out"
        return "failed", self.cause or self.error or "the execution failed"


def rows_execution_arn(rows_machine_arn: str, run_id: str) -> str:
    """The execution of a run's rows phase (infra/workflow.py names it so)."""
    execution = rows_machine_arn.replace(":stateMachine:", ":execution:")
    return f"{execution}:{run_id}-rows"
