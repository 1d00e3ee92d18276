"""Resolve: the run's rows (selection, predictions, each row's own objects), the build
phase's plan, the Maps' concurrency fitted to the account's quotas."""

from __future__ import annotations

import dataclasses
import json
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from swegreen.aws import cost_model, prebuilt, quotas
from swegreen.aws.pipeline.base import PipelineBase
from swegreen.aws.pipeline.models import (
    CAPACITY_WAIT_SECONDS,
    INSTANCE,
    MAX_BATCH_ROWS,
    MAX_EXECUTION_SECONDS,
    PREDICTION,
    RESOLVE_WRITERS,
    ROW_OVERHEAD_SECONDS,
    WAIT_MARGIN_SECONDS,
    Item,
    StartEvent,
)
from swegreen.core.config import EvalConfig, build_config
from swegreen.core.dataset import Dataset, Instance, dataset_digest, parse_rows, select_instances
from swegreen.core.errors import NoRecipe
from swegreen.core.ports import RunRecord
from swegreen.core.recipes import tests_need_network
from swegreen.core.schedule import balanced, slowest_first
from swegreen.core.sources import Prediction, parse_predictions
from swegreen.environments.catalog import builtin_recipes
from swegreen.reports.publish import base_provenance


@dataclasses.dataclass(frozen=True)
class Held:
    rows: int
    vcpu: float


class ResolveStep(PipelineBase):
    """Resolve, and the plan it makes."""

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
        if config.regression_check:
            raise ValueError(
                "regression_check is for local runs for now: the pipeline's sandbox tasks "
                "evaluate one patch each and keep no cache of the gold side between tasks"
            )
        wanted = config.task_dialect
        if "agentswe" in ([wanted] if isinstance(wanted, str) else wanted.values()):
            raise ValueError(
                "task_dialect agentswe is for local runs: its commands run in the interactive "
                "mode's workbench, which the pipeline's polled participant calls do not offer"
            )
        key = self.dataset_key(config)
        text = self._get_named(
            key,
            f"dataset {config.dataset!r} is not in s3://{self.settings.bucket}/{key}; "
            f"upload it there: swegreen upload-dataset --bucket {self.settings.bucket} "
            f"--dataset {config.dataset} (docs/aws-deploy.md)",
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
        asked = "max_concurrent_rows" in {**self.settings.default_config, **event.config}
        capacity, wanted, advice = self._capacity(event.run_id, config, asked, len(instances))
        if not asked:
            config = config.model_copy(update={"max_concurrent_rows": capacity.rows})
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
                **base_provenance(dataset, config, self.settings.grader, instances),
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
        template = Item(
            run_id=event.run_id,
            instance_id="",
            source=source,
            role=role,
            url=url,
            predictions_key=predictions_key,
            participant_timeout=config.participant_timeout,
            config_json=sandbox_config,
            wait_seconds=int(config.participant_timeout) + WAIT_MARGIN_SECONDS,
        )
        if event.batch and source == "a2a":
            raise ValueError(
                "batch is for patches known up front (gold, empty, a predictions file): an "
                "A2A participant's rows each wait on their own patch"
            )
        batching = event.batch if event.batch is not None else source != "a2a"
        groups = self._groups(todo, capacity.rows, config) if batching else [[i] for i in todo]
        for group in groups:
            ids = [i.instance_id for i in group]
            update = {"instance_id": ids[0], "batch": ids if len(ids) > 1 else []}
            items.append(template.model_copy(update=update).model_dump())
        plan = self.plan(event.run_id, todo, rebuild=event.rebuild_envs)
        # What the run will take and cost, recorded before any row starts (GET /runs/{id}).
        forecast = self.forecast(todo, plan, capacity, wanted, advice, source, config, batching)
        record.provenance["estimate"] = forecast.model_dump(mode="json")
        if event.dry_run:
            self.store.update_run(record.model_copy(update={"state": "estimated"}))
            return {"run_id": event.run_id, "dry_run": True, "count": len(todo)}
        self.store.update_run(record)
        with ThreadPoolExecutor(RESOLVE_WRITERS) as pool:  # boto3's clients are thread-safe
            list(pool.map(lambda kv: self._put(*kv), writes))
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
        row_seconds *= max((len(g) for g in groups), default=1)  # a batch's rows, one by one
        return {
            "run_id": event.run_id,
            "dry_run": False,
            "count": len(todo),
            "items": len(items),
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

    def _groups(self, todo: list[Instance], tasks: int, config: EvalConfig) -> list[list[Instance]]:
        """The rows in batches of about equal expected time, one task each: as many as
        the tasks that run at once (one wave), at most ``MAX_BATCH_ROWS`` rows each; a row
        whose tests need the internet alone (the batch's network is one)."""
        recipes = builtin_recipes()
        asked = config.network_instances or ()
        open_rows, closed = [], []
        for inst in todo:
            try:
                needs = tests_need_network(recipes.for_instance(inst), inst.instance_id, asked)
            except NoRecipe:
                needs = False  # Presign says why the row cannot run
            (open_rows if needs else closed).append(inst)
        return balanced(closed, tasks, max_size=MAX_BATCH_ROWS) + [[i] for i in open_rows]

    def _capacity(
        self, run_id: str, config: EvalConfig, asked: bool, rows: int
    ) -> tuple[quotas.Capacity, int, list[str]]:
        """The run's concurrency fitted to the account's quotas (unset: as many rows at
        once as they fit: on AWS a run pays per task, not per hour waited, and a 500-row
        run at 1 at a time takes hours), less what the runs beside it hold; and what the
        estimate offers beside its figures: the rows at once asked for (else docs/aws.md's
        fast run) and the quota requests that would give them."""
        fargate = (
            quotas.read_quotas(self.service_quotas)
            if self.service_quotas is not None
            else "no Service Quotas client"
        )
        lambda_limit = (
            quotas.read_lambda_limit(self.lambda_client) if self.lambda_client is not None else None
        )
        held = self._held(run_id)
        capacity = quotas.fit(
            config.max_concurrent_rows if asked else None,
            self.settings.build_concurrency,
            fargate,
            self.settings.sandbox_vcpu,
            self.settings.build_vcpu,
            ceiling=self.settings.guardrails.max_concurrent_rows,
            lambda_limit=lambda_limit,
            in_use=held.rows,
            in_use_vcpu=held.vcpu,
        )
        wanted = min(
            config.max_concurrent_rows if asked else quotas.FAST_ROWS,
            self.settings.guardrails.max_concurrent_rows,
            max(1, rows),
        )
        advice: list[str] = []
        if capacity.rows < wanted and not isinstance(fargate, str):
            region = self.s3.meta.region_name or "us-east-1"
            advice = quotas.requests(
                wanted, self.settings.sandbox_vcpu, fargate, lambda_limit, region
            )
        return capacity, wanted, advice

    def _held(self, run_id: str) -> Held:
        """What the other running runs hold of the quotas they share with this one: their
        rows at once, and the Fargate vCPUs of those rows or of their build phase's tasks
        (a run builds before its rows start: whichever is more), from what Resolve
        recorded for them (capacity, and the estimate's builds and prepares)."""
        rows, vcpu = 0, 0.0
        for record in self.store.list_running():
            if record.run_id == run_id:
                continue
            capacity = record.provenance.get("capacity") or {}
            estimate = record.provenance.get("estimate") or {}
            its_rows = int(capacity.get("rows", 0))
            work = int(estimate.get("builds", 0)) + int(estimate.get("prepares", 0))
            builds = min(int(capacity.get("builds", 0)), work)
            rows += its_rows
            vcpu += max(its_rows * self.settings.sandbox_vcpu, builds * self.settings.build_vcpu)
        return Held(rows, vcpu)

    def forecast(
        self,
        todo: list[Instance],
        plan: prebuilt.Plan,
        capacity: quotas.Capacity,
        wanted: int,
        advice: list[str],
        source: str,
        config: EvalConfig,
        batching: bool,
    ) -> cost_model.Estimate:
        """The run's estimate: its rows at the concurrency the quotas allow, after the build
        phase for what the bucket lacks (an A2A participant taking its whole timeout)."""
        repos = {i.instance_id: i.repo for i in todo}
        return cost_model.estimate(
            [i.repo for i in todo],
            concurrency=capacity.rows,
            asked_concurrency=config.max_concurrent_rows,
            wanted=wanted,
            raise_quota=advice,
            build_concurrency=capacity.builds,
            mirrors=[b.repo for b in plan.builds if b.kind == "repo"],
            envs=[b.repo for b in plan.builds if b.kind == "env"],
            prepares=[[repos.get(i, "") for i in p.instance_ids] for p in plan.prepares],
            participant_minutes=config.participant_timeout / 60 if source == "a2a" else 0.0,
            vcpu=self.settings.sandbox_vcpu,
            region=self.s3.meta.region_name or "us-east-1",
            max_batch_rows=MAX_BATCH_ROWS if batching else 1,
        )

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
        text = self._get_named(
            event.patches,
            f"predictions file s3://{self.settings.bucket}/{event.patches} does not exist; "
            "send it first (PUT /predictions, or swegreen's aws backend does it) or check "
            "the key",
        )
        predictions = parse_predictions(text, event.patches)
        unknown = sorted(set(predictions) - set(dataset.by_id()))
        if unknown:
            raise ValueError(
                f"{event.patches}: predictions for instance ids not in the dataset: "
                f"{', '.join(unknown[:5])}"
            )
        return "predictions", None, event.patches, "agent", predictions
