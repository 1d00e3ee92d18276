"""The AWS pipeline's steps, as functions over the store and S3.

Resolve (select rows) -> per row: Dispatch (get the patch, or start asking the
participant), Poll (until the participant is done or its deadline), the prepare task
(fills the shared cache), Presign (the evaluate task's input and upload URLs), the
evaluate task (applies the patch, runs the tests), Classify (the decision tree; the row is
written) or RecordError (an ``error`` row) -> Aggregate (the leaderboard). The Lambda
handlers in ``functions/`` validate events and call these; the state machine in ``infra/``
wires them. Nothing here imports the grader: the heavy work is the sandbox tasks'.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from swegreen import artifacts as art
from swegreen.classify import Reason, Status, classify
from swegreen.config import EvalConfig, build_config
from swegreen.dataset import Dataset, Instance, dataset_digest, parse_rows, select_instances
from swegreen.errors import EvaluationFailure, SandboxCrashed
from swegreen.ids import check_id
from swegreen.metrics import RunMetrics
from swegreen.patches import oversized_patch
from swegreen.ports import PatchResult, RunRecord
from swegreen.publish import base_provenance, result_row
from swegreen.results import InstanceResult, utcnow
from swegreen.rows import RowBuilder, error_row
from swegreen.sources import parse_predictions

INSTANCE = "instance.json"
SANDBOX_INPUT = "sandbox-input.json"
# What the evaluate task uploads: the artifacts the evaluator writes, but the patch (the
# pipeline's own record of what was evaluated), and the graded row.
SANDBOX_OUTPUTS = (
    art.EVAL_SCRIPT,
    art.TEST_OUTPUT,
    art.TEST_RECORD,
    art.INSTANCE_LOG,
    art.REPORT,
    art.RESULT,
)
# How long the evaluate task's URLs are signed for: longer than the state machine lets the
# task run (infra/workflow.py, 3 h). They also end with the credentials that signed them
# (the Presign function's), which is why they are signed right before the task starts.
SANDBOX_URL_SECONDS = 4 * 3600


class PipelineSettings(BaseModel):
    """What the stack gives every function (environment variables)."""

    model_config = ConfigDict(frozen=True)

    table: str
    bucket: str
    runs_prefix: str = "runs/"
    datasets_prefix: str = "datasets/"
    default_config: dict[str, Any] = Field(default_factory=dict)
    distributed_threshold: int = 40
    poll_seconds: int = 30
    grader: str = "swebench"
    # The sandbox tasks' isolation mode (their task definitions'), for the run's provenance.
    sandbox_isolation: str = "process"

    @classmethod
    def from_env(cls, env: dict[str, str]) -> PipelineSettings:
        return cls(
            table=env["SWEGREEN_TABLE"],
            bucket=env["SWEGREEN_BUCKET"],
            runs_prefix=env.get("SWEGREEN_RUNS_PREFIX", "runs/"),
            datasets_prefix=env.get("SWEGREEN_DATASETS_PREFIX", "datasets/"),
            default_config=json.loads(env.get("SWEGREEN_DEFAULT_CONFIG", "{}")),
            distributed_threshold=int(env.get("SWEGREEN_DISTRIBUTED_THRESHOLD", "40")),
            poll_seconds=int(env.get("SWEGREEN_POLL_SECONDS", "30")),
            grader=env.get("SWEGREEN_GRADER", "swebench"),
            sandbox_isolation=env.get("SWEGREEN_SANDBOX_ISOLATION", "process"),
        )


class RunRequest(BaseModel):
    """``POST /runs``'s body: the green agent's assessment request, or a patch source."""

    model_config = ConfigDict(extra="forbid")

    participants: dict[str, str] = Field(default_factory=dict)
    patches: str | None = Field(
        None, min_length=1, description="gold, empty, or the S3 key of a predictions file"
    )
    config: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_source(self) -> RunRequest:
        if bool(self.participants) == bool(self.patches):
            raise ValueError(
                "give either participants (A2A URLs) or patches (gold, empty, an S3 key)"
            )
        if len(self.participants) > 1:
            raise ValueError("a run evaluates one participant; start one run per participant")
        for role, url in self.participants.items():
            check_id(role, "participant role")
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"participant {role!r}: {url!r} is not an http(s) URL")
        return self


class StartEvent(RunRequest):
    """The execution's input: the request and the run's id (the API's request id)."""

    run_id: str = Field(min_length=1, max_length=80)

    @field_validator("run_id")
    @classmethod
    def _safe_run_id(cls, value: str) -> str:
        return check_id(value, "run id")  # it names the run's S3 prefix


class Item(BaseModel):
    """One row of the Map."""

    run_id: str
    instance_id: str
    source: Literal["a2a", "gold", "empty", "predictions"]
    role: str = "agent"
    url: str | None = None
    predictions_key: str | None = None
    participant_timeout: float = 1800.0
    poll_seconds: int = 30
    config_json: str = "{}"  # for the sandbox task's environment (strings only)


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


class SandboxInput(BaseModel):
    """What the evaluate task is given (``sandbox-input.json``): the row, the patch, and a
    pre-signed PUT URL for each of its outputs."""

    instance: Instance
    patch: str
    uploads: dict[str, str]


class SandboxTicket(BaseModel):
    """Presign's result, for the evaluate task's environment: its only way into S3."""

    input_url: str


class ClassifyEvent(BaseModel):
    item: Item
    patch: PatchState | None = None
    error: dict[str, Any] | None = None  # a Catch's {"Error", "Cause"}


class Pipeline:
    def __init__(self, settings: PipelineSettings, s3: Any, store: Any) -> None:
        self.settings = settings
        self.s3 = s3
        self.store = store

    # ------------------------------------------------------------------ helpers
    def _key(self, run_id: str, instance_id: str, name: str) -> str:
        return self.settings.runs_prefix + art.instance_key(run_id, instance_id, name)

    def _get(self, key: str) -> str | None:
        try:
            return self.s3.get_object(Bucket=self.settings.bucket, Key=key)["Body"].read().decode()
        except self.s3.exceptions.NoSuchKey:
            return None

    def _put(self, key: str, text: str) -> None:
        self.s3.put_object(Bucket=self.settings.bucket, Key=key, Body=text.encode())

    def instance(self, run_id: str, instance_id: str) -> Instance:
        text = self._get(self._key(run_id, instance_id, INSTANCE))
        if text is None:
            raise ValueError(f"{instance_id} was not resolved for run {run_id}")
        return Instance.model_validate_json(text)

    def dataset_key(self, config: EvalConfig) -> str:
        if config.dataset.startswith("s3://"):
            return config.dataset.split("/", 3)[3]
        slug = config.dataset.replace("/", "__")
        return f"{self.settings.datasets_prefix}{slug}/{config.split}.jsonl"

    # ------------------------------------------------------------------ steps
    def resolve(self, event: StartEvent) -> dict[str, Any]:
        config = build_config(
            ("stack defaults", self.settings.default_config), ("request config", event.config)
        )
        key = self.dataset_key(config)
        text = self._get(key)
        if text is None:
            raise ValueError(
                f"dataset {config.dataset!r} is not in s3://{self.settings.bucket}/{key}; "
                "upload it there (see docs/aws.md)"
            )
        rows = parse_rows(
            (json.loads(line) for line in text.splitlines() if line.strip()), source=config.dataset
        )
        dataset = Dataset(
            config.dataset, config.split, config.dataset_revision, rows, dataset_digest(rows)
        )
        instances = select_instances(dataset, config.selection())
        source, url, predictions_key, role = self._source(event, dataset)
        record = RunRecord(
            run_id=event.run_id,
            dataset=dataset.name,
            split=dataset.split,
            dataset_revision=dataset.revision,
            dataset_digest=dataset.digest,
            patch_source=f"a2a:{role}" if source == "a2a" else (event.patches or ""),
            config=config.public(),
            instance_ids=[i.instance_id for i in instances],
            provenance={
                **base_provenance(dataset, config, self.settings.grader),
                "pipeline": "aws",
                # What the tests ran under, whatever the request asked for.
                "isolation": self.settings.sandbox_isolation,
            },
        )
        record = self.store.begin_run(record)
        done = set(self.store.get_results(event.run_id))
        sandbox_config = json.dumps(
            config.model_dump(
                mode="json",
                include={
                    "repo_url_template",
                    "participant_repo_url_template",
                    "eval_timeout",
                    "max_attempts",
                    "base_validation",
                    "max_patch_bytes",
                },
            )
        )
        items = []
        for inst in instances:
            if inst.instance_id in done:
                continue  # resuming a run: a stored row is final
            self._put(self._key(event.run_id, inst.instance_id, INSTANCE), inst.model_dump_json())
            items.append(
                Item(
                    run_id=event.run_id,
                    instance_id=inst.instance_id,
                    source=source,
                    role=role,
                    url=url,
                    predictions_key=predictions_key,
                    participant_timeout=config.participant_timeout,
                    poll_seconds=self.settings.poll_seconds,
                    config_json=sandbox_config,
                ).model_dump()
            )
        items_key = f"{self.settings.runs_prefix}{event.run_id}/items.json"
        self._put(items_key, json.dumps(items))
        distributed = len(items) > self.settings.distributed_threshold
        return {
            "run_id": event.run_id,
            "count": len(items),
            "total": len(instances),
            "max_concurrency": config.max_concurrent_rows,
            "distributed": distributed,
            "items": [] if distributed else items,
            "items_key": items_key,
            "bucket": self.settings.bucket,
        }

    def _source(
        self, event: StartEvent, dataset: Dataset
    ) -> tuple[str, str | None, str | None, str]:
        if event.participants:
            role, url = next(iter(event.participants.items()))
            return "a2a", url, None, role
        if event.patches in ("gold", "empty"):
            return event.patches, None, None, "agent"
        assert event.patches is not None
        text = self._get(event.patches)
        if text is None:
            raise ValueError(
                f"predictions file s3://{self.settings.bucket}/{event.patches} does not exist"
            )
        predictions = parse_predictions(text, event.patches)
        unknown = sorted(set(predictions) - set(dataset.by_id()))
        if unknown:
            raise ValueError(
                f"{event.patches}: predictions for instance ids not in the dataset: "
                f"{', '.join(unknown[:5])}"
            )
        return "predictions", None, event.patches, "agent"

    async def dispatch(self, item: Item, now: float | None = None) -> PatchState:
        """Give the row its patch, or start asking the participant for it."""
        now = time.time() if now is None else now
        inst = self.instance(item.run_id, item.instance_id)
        if item.source == "gold":
            return self._arrived(item, inst.patch, "gold", now)
        if item.source == "empty":
            return self._arrived(item, "", "empty", now)
        if item.source == "predictions":
            assert item.predictions_key is not None
            preds = parse_predictions(self._get(item.predictions_key) or "", item.predictions_key)
            pred = preds.get(item.instance_id)
            if pred is None:
                return PatchState(
                    done=True,
                    failure=Reason.NO_PATCH,
                    started=now,
                    detail=f"{item.predictions_key} has no prediction for {item.instance_id}",
                )
            return self._arrived(item, pred.model_patch, pred.model_name_or_path, now)
        from swegreen.agent.participant_client import PolledParticipant, outcome_of

        assert item.url is not None
        stored = json.loads(item.config_json)
        template = stored.get("participant_repo_url_template") or stored.get(
            "repo_url_template", "https://github.com/{repo}.git"
        )
        try:
            async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=120.0)) as http:
                task_id, exchange = await PolledParticipant(item.url, http).send(inst, template)
        except Exception as exc:  # refused, HTTP errors, garbage: this row only
            return PatchState(
                done=True,
                failure=Reason.PARTICIPANT_ERROR,
                started=now,
                detail=f"{item.role} at {item.url}: {type(exc).__name__}: {exc}"[:800],
            )
        if task_id is None:
            patch, failure, detail = outcome_of(exchange, item.role)
            return self._arrived(item, patch, item.role, now, failure, detail, exchange.usage)
        return PatchState(
            done=False,
            remote_task_id=task_id,
            started=now,
            model=item.role,
            deadline=now + item.participant_timeout,
        )

    async def poll(self, item: Item, state: PatchState, now: float | None = None) -> PatchState:
        """Ask again; give up (and cancel the remote task) at the deadline."""
        from swegreen.agent.participant_client import PolledParticipant, outcome_of

        now = time.time() if now is None else now
        assert item.url is not None and state.remote_task_id is not None
        async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=120.0)) as http:
            participant = PolledParticipant(item.url, http)
            try:
                exchange = await participant.poll(state.remote_task_id)
            except Exception as exc:
                return state.model_copy(
                    update={
                        "done": True,
                        "failure": Reason.PARTICIPANT_ERROR,
                        "detail": f"polling {item.url}: {exc}"[:800],
                    }
                )
            if exchange.done:
                patch, failure, detail = outcome_of(exchange, item.role)
                return self._arrived(
                    item, patch, item.role, state.started, failure, detail, exchange.usage, now
                )
            if now >= state.deadline:
                await participant.cancel(state.remote_task_id)
                return state.model_copy(
                    update={
                        "done": True,
                        "failure": Reason.PARTICIPANT_TIMEOUT,
                        "duration": now - state.started,
                        "detail": f"{item.role} did not finish within "
                        f"{item.participant_timeout:g} s; its task was cancelled",
                    }
                )
        return state

    def _arrived(
        self,
        item: Item,
        patch: str | None,
        model: str,
        started: float,
        failure: str | None = None,
        detail: str = "",
        usage: dict[str, Any] | None = None,
        now: float | None = None,
    ) -> PatchState:
        now = time.time() if now is None else now
        if patch is None:
            return PatchState(
                done=True,
                failure=failure or Reason.NO_PATCH,
                detail=detail,
                model=model,
                started=started,
                duration=now - started,
                usage=usage,
            )
        limit = json.loads(item.config_json).get("max_patch_bytes")
        if limit is not None and (oversized := oversized_patch(patch, limit)) is not None:
            # Never stored: the row is no_op (patch_too_large), as the sandbox would make it.
            return PatchState(
                done=True,
                failure=Reason.PATCH_TOO_LARGE,
                detail=f"{oversized.detail} (sha256 {oversized.info.sha256})",
                model=model,
                started=started,
                duration=now - started,
                usage=usage,
            )
        key = self._key(item.run_id, item.instance_id, art.PATCH)
        self._put(key, patch)
        return PatchState(
            done=True,
            patch_key=key,
            model=model,
            detail=detail,
            started=started,
            duration=now - started,
            usage=usage,
        )

    def presign(self, item: Item, state: PatchState) -> SandboxTicket:
        """The evaluate task's input and upload URLs, signed last thing before it starts.
        The task holds no credentials: these URLs reach this row's objects and no others."""
        if state.patch_key is None:
            raise ValueError(f"{item.instance_id}: no patch to evaluate")
        inst = self.instance(item.run_id, item.instance_id)
        patch = self._get(state.patch_key)
        if patch is None:
            raise ValueError(
                f"{item.instance_id}: s3://{self.settings.bucket}/{state.patch_key} is gone"
            )
        # A row retried after a crash must not pick up an earlier attempt's verdict.
        self.s3.delete_object(
            Bucket=self.settings.bucket, Key=self._key(item.run_id, item.instance_id, art.RESULT)
        )
        uploads = {
            name: self._sign("put_object", self._key(item.run_id, item.instance_id, name))
            for name in SANDBOX_OUTPUTS
        }
        key = self._key(item.run_id, item.instance_id, SANDBOX_INPUT)
        self._put(key, SandboxInput(instance=inst, patch=patch, uploads=uploads).model_dump_json())
        return SandboxTicket(input_url=self._sign("get_object", key))

    def _sign(self, method: str, key: str) -> str:
        return self.s3.generate_presigned_url(
            method,
            Params={"Bucket": self.settings.bucket, "Key": key},
            ExpiresIn=SANDBOX_URL_SECONDS,
        )

    def classify_row(self, event: ClassifyEvent) -> dict[str, Any]:
        """The row's verdict through the decision tree, written (an upsert: retries rewrite it)."""
        item, state = event.item, event.patch
        inst = self.instance(item.run_id, item.instance_id)
        patch = PatchResult(
            None,
            state.model if state else item.role,
            failure=state.failure if state else None,
            detail=state.detail if state else "",
            duration=state.duration if state else 0.0,
            usage=state.usage if state else None,
        )
        if event.error is not None:
            failure = _failure_of(event.error)
            row = error_row(inst, patch, failure, 1, utcnow(), time.monotonic())
        elif state is None or state.patch_key is None:
            builder = RowBuilder(inst, patch, utcnow(), time.monotonic())
            row = builder.unapplied(patch.failure or Reason.NO_PATCH, patch.detail or "no patch")
        else:
            text = self._get(self._key(item.run_id, item.instance_id, art.RESULT))
            if text is None:
                failure = SandboxCrashed(
                    "the sandbox task ended without a result (it crashed or was stopped)"
                )
                row = error_row(inst, patch, failure, 1, utcnow(), time.monotonic())
            else:
                row = _checked(InstanceResult.model_validate_json(text), state)
        self.store.save_result(item.run_id, row)
        self._put(
            self._key(item.run_id, item.instance_id, art.RESULT), row.model_dump_json(indent=2)
        )
        # The evaluate task is over: its upload URLs (live for hours yet) go with its input.
        self.s3.delete_object(
            Bucket=self.settings.bucket,
            Key=self._key(item.run_id, item.instance_id, SANDBOX_INPUT),
        )
        return {"instance_id": row.instance_id, "status": row.status.value, "reason": row.reason}

    def aggregate(self, run_id: str) -> dict[str, Any]:
        """The leaderboard of the run: always written, whatever rows failed."""
        record = self.store.get_run(run_id)
        if record is None:
            raise ValueError(f"no run {run_id}")
        stored = self.store.get_results(run_id)
        results = [stored[i] for i in record.instance_ids if i in stored]
        missing = [i for i in record.instance_ids if i not in stored]
        for iid in missing:  # a row the Map lost: an error row, never a silent gap
            inst = self.instance(run_id, iid)
            failure = EvaluationFailure("the row's step function iteration ended without a row")
            row = error_row(inst, None, failure, 1, utcnow(), time.monotonic())
            self.store.save_result(run_id, row)
            results.append(row)
        metrics = RunMetrics.from_results(results)
        model = record.config.get("green_agent_model", "")
        role = (
            record.patch_source.removeprefix("a2a:")
            if record.patch_source.startswith("a2a:")
            else "agent"
        )
        row = result_row(record, metrics, results, model, {role: record.patch_source})
        prefix = f"{self.settings.runs_prefix}{run_id}/"
        self._put(
            prefix + art.RESULTS,
            json.dumps({"participants": {role: record.patch_source}, "results": [row]}, indent=2),
        )
        self._put(prefix + art.INSTANCES, "".join(r.model_dump_json() + "\n" for r in results))
        finished = record.model_copy(
            update={"state": "finished", "summary": metrics.result_row(model)}
        )
        finished.provenance["finished_at"] = utcnow()
        self.store.update_run(finished)
        return {
            "run_id": run_id,
            "results": f"s3://{self.settings.bucket}/{prefix}{art.RESULTS}",
            "summary": metrics.result_row(model),
        }


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


def _checked(row: InstanceResult, state: PatchState) -> InstanceResult:
    """The sandbox's graded row, re-classified here: the decision tree is this step's job."""
    if row.status is not Status.ERROR and row.tests_ran:
        status, reason = classify(row.patch_applied, row.counts)
        if (status, reason) != (row.status, row.reason):
            row = row.model_copy(update={"status": status, "reason": str(reason)})
    durations = row.durations.model_copy(
        update={"participant": state.duration, "total": row.durations.total + state.duration}
    )
    return row.model_copy(
        update={
            "durations": durations,
            "participant_usage": state.usage,
            "model_name_or_path": row.model_name_or_path or state.model,
        }
    )


def _failure_of(error: dict[str, Any]) -> EvaluationFailure:
    """A Catch's error as an infrastructure failure: what failed, and why, readably."""
    name = str(error.get("Error", "States.TaskFailed"))
    cause = str(error.get("Cause", ""))
    document: Any = None
    with contextlib.suppress(ValueError):
        document = json.loads(cause)
    sandbox = name.startswith("ECS.")
    task = "sandbox"
    if isinstance(document, dict) and "errorMessage" in document:  # a Lambda's exception
        cause = f"{document.get('errorType', name)}: {document['errorMessage']}"
    elif isinstance(document, dict) and "Containers" in document:  # an ECS task description
        sandbox = True
        containers = document.get("Containers", [])
        codes = [c.get("ExitCode") for c in containers]
        if any(c.get("Name") == "prepare" for c in containers):
            task = "prepare"
        cause = f"task stopped ({document.get('StoppedReason', '?')}), exit codes {codes}"
    if sandbox:
        return SandboxCrashed(f"the {task} task failed ({name}): {cause[:1500]}")
    return EvaluationFailure(f"a pipeline step failed ({name}): {cause[:1500]}")
