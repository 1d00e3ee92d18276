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
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import httpx
from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from swegreen.aws import prebuilt, quotas
from swegreen.aws.dataset_upload import dataset_s3_key
from swegreen.aws.guardrails import Guardrails
from swegreen.core import errors
from swegreen.core.classify import Reason, Status, classify
from swegreen.core.config import EvalConfig, build_config
from swegreen.core.dataset import Dataset, Instance, dataset_digest, parse_rows, select_instances
from swegreen.core.errors import EvaluationFailure, SandboxCrashed
from swegreen.core.ids import check_id
from swegreen.core.metrics import RunMetrics
from swegreen.core.patches import oversized_patch
from swegreen.core.ports import PatchResult, RunRecord
from swegreen.core.recipes import RecipeBook, known_network_instances
from swegreen.core.results import InstanceResult, utcnow
from swegreen.core.rows import RowBuilder, error_row
from swegreen.core.schedule import slowest_first
from swegreen.core.sources import Prediction, parse_predictions
from swegreen.environments.catalog import builtin_recipes
from swegreen.reports.html import render_html
from swegreen.reports.publish import base_provenance, result_row, run_report
from swegreen.stores import artifacts as art

INSTANCE = "instance.json"
PREDICTION = "prediction.json"  # the row's own prediction (Resolve reads the file once)
SANDBOX_INPUT = "sandbox-input.json"
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
)
# How long the evaluate task's URLs are signed for: longer than the state machine lets the
# task run (infra/workflow.py, 3 h). They also end with the credentials that signed them
# (the Presign function's), which is why they are signed right before the task starts.
SANDBOX_URL_SECONDS = 4 * 3600
WAIT_MARGIN_SECONDS = 600
# What one row may take beyond its participant and its eval script (task start, image
# pull, artifact downloads, retries), for the rows phase's time limit.
ROW_OVERHEAD_SECONDS = 1800
MAX_EXECUTION_SECONDS = 360 * 24 * 3600  # Standard workflows run for a year at most
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


class RunRequest(BaseModel):
    """``POST /runs``'s body: the green agent's assessment request, or a patch source."""

    model_config = ConfigDict(extra="forbid")

    participants: dict[str, str] = Field(default_factory=dict)
    patches: str | None = Field(
        None, min_length=1, description="gold, empty, or the S3 key of a predictions file"
    )
    config: dict[str, Any] = Field(default_factory=dict)
    rebuild_envs: bool = Field(
        False, description="build again the environments whose earlier build failed"
    )

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

    # 75: the rows phase's execution is named "<run id>-rows" (80 characters at most)
    run_id: str = Field(min_length=1, max_length=75)

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
    config_json: str = "{}"  # for the sandbox task's environment (strings only)
    # How long the row's callback may wait (the state machine's TimeoutSecondsPath): the
    # participant's deadline, then a margin for Watch (every minute) to cancel it and
    # hand the row back.
    wait_seconds: int = 1800 + 600


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


class SandboxInput(BaseModel):
    """What the evaluate task is given (``sandbox-input.json``): the row, the patch, a
    pre-signed GET URL for each prebuilt artifact it starts from (in unpacking order) and
    a pre-signed PUT URL for each of its outputs."""

    instance: Instance
    patch: str
    uploads: dict[str, str]
    artifacts: dict[str, str] = Field(default_factory=dict)


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


class Pipeline:
    def __init__(
        self, settings: PipelineSettings, s3: Any, store: Any, service_quotas: Any = None
    ) -> None:
        self.settings = settings
        self.s3 = s3
        self.store = store
        self.service_quotas = service_quotas  # None: concurrency is left as asked

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
        return dataset_s3_key(config.dataset, config.split, self.settings.datasets_prefix)

    # ------------------------------------------------------------------ steps
    def resolve(self, event: StartEvent) -> dict[str, Any]:
        config = build_config(
            ("stack defaults", self.settings.default_config), ("request config", event.config)
        )
        if config.env_files_at_base:
            raise ValueError(
                "env_files_at_base is for local runs from forks that lack some "
                "environment_setup_commits; the pipeline's build phase names its artifacts "
                "by those commits and clones repo_url_template, which must have them all"
            )
        wanted = config.task_dialect
        if "agentswe" in ([wanted] if isinstance(wanted, str) else wanted.values()):
            raise ValueError(
                "task_dialect agentswe is for local runs: its commands run in the interactive "
                "mode's workbench, which the pipeline's polled participant calls do not offer"
            )
        key = self.dataset_key(config)
        text = self._get(key)
        if text is None:
            raise ValueError(
                f"dataset {config.dataset!r} is not in s3://{self.settings.bucket}/{key}; "
                f"upload it there: swegreen upload-dataset --bucket {self.settings.bucket} "
                f"--dataset {config.dataset} (docs/aws.md)"
            )
        rows = parse_rows(
            (json.loads(line) for line in text.splitlines() if line.strip()), source=config.dataset
        )
        dataset = Dataset(
            config.dataset, config.split, config.dataset_revision, rows, dataset_digest(rows)
        )
        instances = select_instances(dataset, config.selection())
        source, url, predictions_key, role, predictions = self._source(event, dataset)
        self.settings.guardrails.check(
            max_concurrent_rows=config.max_concurrent_rows,
            eval_timeout=config.eval_timeout,
            participant_timeout=config.participant_timeout,
            rows=len(instances),
            participant=source == "a2a",
        )
        capacity = quotas.fit(
            config.max_concurrent_rows,
            self.settings.build_concurrency,
            quotas.read_quotas(self.service_quotas)
            if self.service_quotas is not None
            else "no Service Quotas client",
            self.settings.sandbox_vcpu,
            self.settings.build_vcpu,
        )
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
                # Where (Presign's choice per row, docs/security-aws.md)
                "task_network": {
                    "closed": "isolated subnets, the VPC endpoints only",
                    "open": "the internet, for rows whose tests need it",
                    "installs": "offline, from each prepared workspace's wheelhouse",
                },
                # Tasks at once, as the account's Fargate quotas allow (quotas.py).
                "capacity": capacity.model_dump(mode="json", exclude_none=True),
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
                    "network_instances",
                },
            )
        )
        items, todo = [], []
        writes: list[tuple[str, str]] = []
        for inst in slowest_first(instances):  # the run's tail is short (schedule.py)
            if inst.instance_id in done:
                continue  # resuming a run: a stored row is final
            writes.append(
                (self._key(event.run_id, inst.instance_id, INSTANCE), inst.model_dump_json())
            )
            if inst.instance_id in predictions:  # Dispatch reads its row's, not the file
                writes.append(
                    (
                        self._key(event.run_id, inst.instance_id, PREDICTION),
                        json.dumps(dataclasses.asdict(predictions[inst.instance_id])),
                    )
                )
            todo.append(inst)
            items.append(
                Item(
                    run_id=event.run_id,
                    instance_id=inst.instance_id,
                    source=source,
                    role=role,
                    url=url,
                    predictions_key=predictions_key,
                    participant_timeout=config.participant_timeout,
                    config_json=sandbox_config,
                    wait_seconds=int(config.participant_timeout) + WAIT_MARGIN_SECONDS,
                ).model_dump()
            )
        with ThreadPoolExecutor(RESOLVE_WRITERS) as pool:  # boto3's clients are thread-safe
            list(pool.map(lambda kv: self._put(*kv), writes))
        plan = self.plan(event.run_id, todo, rebuild=event.rebuild_envs)
        prefix = f"{self.settings.runs_prefix}{event.run_id}/"
        self._put(prefix + "items.json", json.dumps(items))
        self._put(prefix + "builds.json", json.dumps([b.model_dump() for b in plan.builds]))
        self._put(prefix + "prepares.json", json.dumps([p.model_dump() for p in plan.prepares]))
        row_seconds = (
            (config.participant_timeout if source == "a2a" else 0)
            + (config.eval_timeout or 1800)
            + ROW_OVERHEAD_SECONDS
        )
        waves = math.ceil(len(items) / capacity.rows)
        return {
            "run_id": event.run_id,
            "count": len(items),
            "total": len(instances),
            "max_concurrency": capacity.rows,
            "build_concurrency": capacity.builds,
            "capacity_note": capacity.note,
            "items_key": prefix + "items.json",
            "builds_key": prefix + "builds.json",
            "builds": len(plan.builds),
            "prepares_key": prefix + "prepares.json",
            "prepares": len(plan.prepares),
            "bucket": self.settings.bucket,
            "config_json": sandbox_config,  # the build phase's tasks get it too
            # The rows phase's limit: every wave of rows at its slowest, and a row's wait
            # for room in the account (task_retry), and no more.
            "timeout_seconds": int(
                min(MAX_EXECUTION_SECONDS, max(1, waves) * row_seconds + CAPACITY_WAIT_SECONDS)
            ),
        }

    def plan(self, run_id: str, instances: list[Instance], *, rebuild: bool) -> prebuilt.Plan:
        """The build phase's work for ``instances``: the prebuilt artifacts they need that
        the bucket does not hold yet."""
        existing: set[str] = set()
        pages = self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.settings.bucket, Prefix=prebuilt.PREFIX
        )
        for page in pages:
            existing.update(o["Key"] for o in page.get("Contents", []))
        held: dict[str, set[str]] = {}
        for repo in {i.repo for i in instances}:
            pointer = self._mirror(repo)
            if pointer is not None and pointer.key in existing:
                held[repo] = set(pointer.commits)
            else:
                existing.discard(prebuilt.repo_commits_key(repo))  # no mirror behind it
        return prebuilt.plan(
            run_id,
            instances,
            builtin_recipes(),
            existing,
            held,
            rebuild_failed=rebuild,
            prepare_batch=self.settings.prepare_batch,
        )

    def _source(
        self, event: StartEvent, dataset: Dataset
    ) -> tuple[str, str | None, str | None, str, dict[str, Prediction]]:
        if event.participants:
            role, url = next(iter(event.participants.items()))
            return "a2a", url, None, role, {}
        if event.patches in ("gold", "empty"):
            return event.patches, None, None, "agent", {}
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
        return "predictions", None, event.patches, "agent", predictions

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
            own = self._get(self._key(item.run_id, item.instance_id, PREDICTION))
            if own is not None:
                pred: Prediction | None = Prediction(**json.loads(own))
            elif self._exists(self._key(item.run_id, item.instance_id, INSTANCE)):
                pred = None  # Resolve wrote every row's prediction: this row has none
            else:  # an execution Resolve started before rows had their own (an upgrade)
                preds = parse_predictions(
                    self._get(item.predictions_key) or "", item.predictions_key
                )
                pred = preds.get(item.instance_id)
            if pred is None:
                return PatchState(
                    done=True,
                    failure=Reason.NO_PATCH,
                    started=now,
                    detail=f"{item.predictions_key} has no prediction for {item.instance_id}",
                )
            return self._arrived(item, pred.model_patch, pred.model_name_or_path, now)
        from swegreen.a2a.participant_client import PolledParticipant, outcome_of
        from swegreen.core.task_dialects import AUTO

        assert item.url is not None
        stored = json.loads(item.config_json)
        template = stored.get("participant_repo_url_template") or stored.get(
            "repo_url_template", "https://github.com/{repo}.git"
        )
        try:
            async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=120.0)) as http:
                requested = stored.get("task_dialect", AUTO)
                if isinstance(requested, dict):
                    requested = requested.get(item.role, AUTO)
                task_id, exchange = await PolledParticipant(item.url, http).send(
                    inst, template, requested
                )
        except Exception as exc:  # refused, HTTP errors, garbage: this row only
            return PatchState(
                done=True,
                failure=Reason.PARTICIPANT_ERROR,
                started=now,
                detail=f"{item.role} at {item.url}: {type(exc).__name__}: {exc}"[:800],
            )
        if task_id is None:
            patch, failure, detail = outcome_of(exchange, item.role)
            arrived = self._arrived(item, patch, item.role, now, failure, detail, exchange.usage)
            return arrived.model_copy(update={"conversation": exchange.conversation})
        return PatchState(
            done=False,
            remote_task_id=task_id,
            started=now,
            model=item.role,
            deadline=now + item.participant_timeout,
            conversation=exchange.conversation,
        )

    async def dispatch_waiting(self, item: Item, token: str, sfn: Any) -> PatchState:
        """Dispatch for a row that waits on a callback: the patch goes back through
        ``token`` at once when there is one, else the row is left to ``watch``. No state
        transition is spent while a participant works, however long it takes."""
        state = await self.dispatch(item)
        if state.done:
            sfn.send_task_success(taskToken=token, output=state.model_dump_json())
        else:
            data = json.dumps({"item": item.model_dump(), "patch": state.model_dump()})
            self.store.put_waiting(item.run_id, item.instance_id, token, data)
        return state

    async def watch(self, sfn: Any, now: float | None = None, parallel: int = 16) -> dict[str, int]:
        """Poll every row that waits for its participant (the Watch function, on a
        schedule); hand each finished one back to its execution."""
        waiting = self.store.list_waiting()
        gate = asyncio.Semaphore(parallel)
        counts = {"waiting": len(waiting), "done": 0, "gone": 0}

        async def one(entry: dict[str, str]) -> None:
            data = json.loads(entry["data"])
            item = Item.model_validate(data["item"])
            state = PatchState.model_validate(data["patch"])
            async with gate:
                state = await self.poll(item, state, now)
            if not state.done:
                return
            try:
                sfn.send_task_success(taskToken=entry["token"], output=state.model_dump_json())
                counts["done"] += 1
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                if code not in ("TaskTimedOut", "TaskDoesNotExist", "InvalidToken"):
                    raise
                counts["gone"] += 1  # the execution ended (cancelled, timed out) meanwhile
            self.store.delete_waiting(entry["sk"])

        await asyncio.gather(*(one(e) for e in waiting))
        return counts

    async def poll(self, item: Item, state: PatchState, now: float | None = None) -> PatchState:
        """Ask again; give up (and cancel the remote task) at the deadline."""
        from swegreen.a2a.participant_client import PolledParticipant, outcome_of

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
                arrived = self._arrived(
                    item, patch, item.role, state.started, failure, detail, exchange.usage, now
                )
                said = {**(state.conversation or {}), **exchange.conversation}
                return arrived.model_copy(update={"conversation": said})
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
        """The evaluate task's input, artifact and upload URLs, signed last thing before
        it starts. The task holds no credentials: these URLs reach this row's objects and
        the artifacts it starts from, and no others. A row whose environment the build
        phase could not make ends here, with the build's reason (the error's type names
        the row's reason: ``_failure_of``)."""
        if state.patch_key is None:
            raise ValueError(f"{item.instance_id}: no patch to evaluate")
        inst = self.instance(item.run_id, item.instance_id)
        recipes = builtin_recipes()
        needs = prebuilt.row_needs(inst, recipes)  # NoRecipe: the row's reason
        artifacts = {}
        keys = needs.keys()
        prepared = self._exists(keys["prepared"])
        for name, key in keys.items():
            if name == "repo" and prepared:
                # the prepared workspace carries the history stores its checkout borrows
                # from; the mirror, which holds the later history, stays out of the task
                continue
            if name == "repo":  # the current mirror, as its pointer names it
                pointer = self._mirror(needs.repo)
                if pointer is None:
                    raise self._unbuilt(needs, name)
                lacking = sorted(set(needs.commits) - set(pointer.commits))
                if lacking:
                    raise errors.RepoUnavailable(
                        f"{needs.repo}: the current mirror ({pointer.key}) lacks "
                        f"{', '.join(c[:12] for c in lacking)}: another run's build replaced "
                        "the pointer after this run's; run this one again"
                    )
                key = pointer.key
            if prepared if name == "prepared" else self._exists(key):
                artifacts[name] = self._sign("get_object", key)
            elif name != "prepared":  # a missing prepared workspace is made in the task
                raise self._unbuilt(needs, name)
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
        given = SandboxInput(instance=inst, patch=patch, uploads=uploads, artifacts=artifacts)
        self._put(key, given.model_dump_json())
        network = "open" if self._needs_internet(inst, recipes, item) else "closed"
        return SandboxTicket(
            input_url=self._sign("get_object", key),
            network=network,
            awsvpc=self.settings.task_networks.get(network, {}),
        )

    @staticmethod
    def _needs_internet(inst: Instance, recipes: RecipeBook, item: Item) -> bool:
        """The rows whose tests reach real hosts upstream (as the engine decides where the
        tests get the network: testbed.policy_for)."""
        asked = json.loads(item.config_json).get("network_instances") or ()
        return (
            recipes.for_instance(inst).network
            or inst.instance_id in known_network_instances()
            or inst.instance_id in set(asked)
        )

    def _mirror(self, repo: str) -> prebuilt.MirrorPointer | None:
        return prebuilt.MirrorPointer.read(repo, self._get)

    def _exists(self, key: str) -> bool:
        try:
            self.s3.head_object(Bucket=self.settings.bucket, Key=key)
        except ClientError as exc:
            if missing_key(exc):
                return False
            raise
        return True

    def _unbuilt(self, needs: prebuilt.RowNeeds, name: str) -> EvaluationFailure:
        if name == "repo":
            return errors.RepoUnavailable(
                f"{needs.repo}: the build phase could not make its git mirror "
                "(see the build task's log)"
            )
        key = needs.env if name == "env" else needs.services[name.removeprefix("service-")]
        remembered = self._get(prebuilt.env_failed_key(key))
        if remembered is not None:
            return prebuilt.FailedBuild.model_validate_json(remembered).failure()
        return errors.EnvSetupFailed(
            f"environment {key} ({name}) was not built by the build phase (see the build "
            "task's log; a failure of the moment is built again by the next run)"
        )

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
            conversation=state.conversation if state else None,
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

        def lost(iid: str) -> InstanceResult:
            """A row the Map lost: an error row, never a silent gap."""
            inst = self.instance(run_id, iid)
            failure = EvaluationFailure("the row's step function iteration ended without a row")
            row = error_row(inst, None, failure, 1, utcnow(), time.monotonic())
            self.store.save_result(run_id, row)
            return row

        with ThreadPoolExecutor(RESOLVE_WRITERS) as pool:  # the stores are thread-safe
            results += pool.map(lost, missing)
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
        self._put(
            prefix + art.RUN_REPORT, json.dumps(run_report(record.instance_ids, results), indent=4)
        )
        finished = record.model_copy(
            update={"state": "finished", "summary": metrics.result_row(model)}
        )
        finished.provenance["finished_at"] = utcnow()
        self.store.update_run(finished)
        self.s3.put_object(
            Bucket=self.settings.bucket,
            Key=prefix + art.REPORT_HTML,
            Body=render_html(finished, results, metrics).encode(),
            ContentType="text/html; charset=utf-8",
        )
        return {
            "run_id": run_id,
            "results": f"s3://{self.settings.bucket}/{prefix}{art.RESULTS}",
            "summary": metrics.result_row(model),
        }


def missing_key(exc: ClientError) -> bool:
    """Whether S3 answered "no such object" (HEAD says 404, GET NoSuchKey)."""
    return exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound")


def rows_execution_arn(rows_machine_arn: str, run_id: str) -> str:
    """The execution of a run's rows phase (infra/workflow.py names it so)."""
    execution = rows_machine_arn.replace(":stateMachine:", ":execution:")
    return f"{execution}:{run_id}-rows"


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
            "conversation": state.conversation or row.conversation,
            "model_name_or_path": row.model_name_or_path or state.model,
        }
    )


# Failures a Lambda step raises on purpose, by their type's name (a Lambda error's
# ``errorType``): the row keeps their reason and whether it was the infrastructure's.
_NAMED_FAILURES: dict[str, type[EvaluationFailure]] = {
    cls.__name__: cls
    for cls in (
        errors.RepoUnavailable,
        errors.EnvSetupFailed,
        errors.InterpreterNotFound,
        errors.NoRecipe,
        errors.SandboxCrashed,
    )
}
# A task that never started because the account had no room for it: RunTask's
# ``failures`` (the .sync state fails with AmazonECS.Unknown and the refusal in its cause)
# or RunTask throttled. Matched in the state's error and cause.
_NO_ROOM = (
    "You've reached the limit on the number of vCPUs",
    "vCPU limit",
    "Capacity is unavailable",
    "RESOURCE:FARGATE",
    "ThrottlingException",
    "Rate exceeded",
    "LimitExceededException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
)
# What a stopped task's description (or a task that did not start) says when the
# infrastructure, not the row, failed it: Spot reclaimed it, the image or the network did
# not come up, ECS failed.
_INFRASTRUCTURE = (
    "SpotInterruption",
    "TerminationNotice",
    "CannotPullContainerError",
    "ResourceInitializationError",
    "TaskFailedToStart",
    "Timeout waiting for network interface",
    "ServiceUnavailable",
    "AmazonECS.Unknown",
    "ECS.AmazonECSException",
    "ECS.ServerException",
)


def _task_description(error: dict[str, Any]) -> dict[str, Any] | None:
    with contextlib.suppress(ValueError, TypeError):
        document = json.loads(str(error.get("Cause", "")))
        if isinstance(document, dict) and "Containers" in document:
            return document
    return None


def _out_of_memory(task: dict[str, Any]) -> bool:
    texts = [str(task.get("StoppedReason", ""))]
    texts += [str(c.get("Reason", "")) for c in task.get("Containers", [])]
    return any("OutOfMemory" in t for t in texts)


def task_retry(
    event: TaskRetryEvent, rng: random.Random | None = None, now: float | None = None
) -> Attempt:
    """After a Fargate task failed: whether to run it again, on what capacity, after how
    long. A task the account had no room for (vCPU quota, no capacity, RunTask throttled)
    waits for room with full jitter until CAPACITY_WAIT_SECONDS after the first refusal,
    however many attempts that takes: a quota is a wait, never a verdict. Other
    infrastructure failures (Spot reclaimed the task, the image did not pull, the network
    did not come up, the task's own "try again" exit status) are retried TASK_ATTEMPTS
    times in all; both go on-demand once Spot failed twice. An out-of-memory kill or a
    crash of the task's own code is not retried (the row's error says which)."""
    rng = rng or random.Random()
    now = time.time() if now is None else now
    attempt = event.attempt
    name = str(event.error.get("Error", ""))
    cause = str(event.error.get("Cause", ""))
    task = _task_description(event.error)
    codes = [c.get("ExitCode") for c in (task or {}).get("Containers", [])]
    waiting_since, refusals = attempt.waiting_since, attempt.refusals
    if task is not None and _out_of_memory(task):
        why, retry = "the container ran out of memory", False
    elif EXIT_TEMPFAIL in codes:
        why, retry = "the task asked to be tried again", True
    elif any(marker in name or marker in cause for marker in _NO_ROOM):
        waiting_since, refusals = waiting_since or now, refusals + 1
        waited = now - waiting_since
        why = f"no room in the account ({name}: {_reason_of(cause)}); waited {waited:.0f} s"
        if waited >= CAPACITY_WAIT_SECONDS:
            return attempt.model_copy(
                update={
                    "retry": False,
                    "wait_seconds": 0,
                    "why": f"{why}, past the {CAPACITY_WAIT_SECONDS} s a row waits for room",
                    "waiting_since": waiting_since,
                    "refusals": refusals,
                }
            )
        number = attempt.number + 1
        ceiling = min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** (refusals - 1))
        left = CAPACITY_WAIT_SECONDS - waited
        return Attempt(
            number=number,
            capacity="FARGATE" if number > SPOT_ATTEMPTS else "FARGATE_SPOT",
            wait_seconds=max(1, int(min(left, rng.uniform(1, ceiling)))),
            retry=True,
            why=why,
            waiting_since=waiting_since,
            refusals=refusals,
        )
    elif any(marker in name or marker in cause for marker in _INFRASTRUCTURE):
        why, retry = f"infrastructure ({name})", True
    else:
        why, retry = f"the task failed ({name}, exit codes {codes})", False
    tries = attempt.number - attempt.refusals  # refusals never ran: they do not count
    if retry and tries >= TASK_ATTEMPTS:
        why, retry = f"{why}; {tries} attempts made", False
    number = attempt.number + 1
    ceiling = min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** (tries - 1))
    return Attempt(
        number=number,
        capacity="FARGATE" if number > SPOT_ATTEMPTS else "FARGATE_SPOT",
        wait_seconds=int(rng.uniform(1, ceiling)) if retry else 0,
        retry=retry,
        why=why,
        waiting_since=waiting_since,
        refusals=refusals,
    )


def _reason_of(cause: str) -> str:
    """RunTask's refusal reason when the cause carries its ``failures``, else the cause."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        document = json.loads(cause)
        failures = document.get("Failures") or document.get("failures") or []
        reasons = [str(f.get("Reason") or f.get("reason") or "") for f in failures]
        if any(reasons):
            return "; ".join(r for r in reasons if r)[:300]
    return cause[:300]


def _failure_of(error: dict[str, Any]) -> EvaluationFailure:
    """A Catch's error as a failure of the row: what failed, and why, readably."""
    name = str(error.get("Error", "States.TaskFailed"))
    cause = str(error.get("Cause", ""))
    document: Any = None
    with contextlib.suppress(ValueError):
        document = json.loads(cause)
    sandbox = name.startswith(("ECS.", "AmazonECS."))
    task = "sandbox"
    if isinstance(document, dict) and "errorMessage" in document:  # a Lambda's exception
        named = _NAMED_FAILURES.get(str(document.get("errorType", "")))
        if named is not None:
            return named(str(document["errorMessage"])[:1500])
        cause = f"{document.get('errorType', name)}: {document['errorMessage']}"
    elif isinstance(document, dict) and "Containers" in document:  # an ECS task description
        sandbox = True
        containers = document.get("Containers", [])
        codes = [c.get("ExitCode") for c in containers]
        names = {c.get("Name") for c in containers}
        task = next((n for n in ("build", "prepare") if n in names), "evaluate")
        if _out_of_memory(document):
            return errors.OutOfMemory(
                f"the {task} task was killed for its memory use "
                f"({document.get('StoppedReason', '?')}); a larger sandbox_memory_mib may help"
            )
        cause = f"task stopped ({document.get('StoppedReason', '?')}), exit codes {codes}"
    if sandbox:
        return SandboxCrashed(f"the {task} task failed ({name}): {cause[:1500]}")
    return EvaluationFailure(f"a pipeline step failed ({name}): {cause[:1500]}")
