"""Running an evaluation over many instances: concurrency, retries, resume, results.

Every finished row is stored before the next event is reported, so a run killed at any
point loses only rows in flight; re-running the same run id evaluates only rows that are
not stored yet (or whose patch changed, for file-based sources).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from swegreen.core.classify import Status
from swegreen.core.config import EvalConfig
from swegreen.core.dataset import Dataset, Instance
from swegreen.core.errors import EvaluationFailure
from swegreen.core.metrics import RunMetrics
from swegreen.core.patches import is_blank, sha256
from swegreen.core.ports import (
    ArtifactStore,
    PatchResult,
    PatchSource,
    ProgressCallback,
    ProgressEvent,
    ResultStore,
    RowEvaluator,
    RunRecord,
)
from swegreen.core.results import InstanceResult, utcnow
from swegreen.core.rows import error_row
from swegreen.reports.html import render_html
from swegreen.reports.publish import base_provenance, result_row, run_report
from swegreen.stores import artifacts as art

RETRY_BACKOFF = (2.0, 10.0, 30.0)


@dataclass
class RunOutcome:
    record: RunRecord
    results: list[InstanceResult]
    metrics: RunMetrics
    result_row: dict[str, Any]
    evaluated: int
    resumed: int


@dataclass
class Runner:
    evaluator: RowEvaluator
    store: ResultStore
    artifacts: ArtifactStore
    progress: ProgressCallback | None = None
    retry_backoff: Sequence[float] = RETRY_BACKOFF
    # the host's secrets out of what the store keeps (the run's own config included)
    scrub: Callable[[str], str] = str
    _counts: Counter[str] = field(default_factory=Counter)

    async def run(
        self,
        *,
        run_id: str,
        dataset: Dataset,
        instances: Sequence[Instance],
        source: PatchSource,
        config: EvalConfig,
        participants: dict[str, str] | None = None,
        provenance: dict[str, Any] | None = None,
        retry_errors: bool = False,
    ) -> RunOutcome:
        from swegreen.core.grading import grader_version  # the local engine grades in-process

        provenance = {
            **(provenance or {}),
            **base_provenance(dataset, config, grader_version(), instances),
        }
        record = RunRecord(
            run_id=run_id,
            dataset=dataset.name,
            split=dataset.split,
            dataset_revision=dataset.revision,
            dataset_digest=dataset.digest,
            patch_source=source.name,
            patches_path=str(path.resolve()) if (path := getattr(source, "path", None)) else None,
            config=config.public(),
            local_config=json.loads(self.scrub(json.dumps(config.model_dump(mode="json")))),
            instance_ids=[i.instance_id for i in instances],
            provenance=provenance,
        )
        record = await asyncio.to_thread(self.store.begin_run, record)
        self.artifacts.write_text(
            art.run_key(run_id, art.RUN_INFO), record.model_dump_json(indent=2)
        )
        stored = await asyncio.to_thread(self.store.get_results, run_id)
        pending: list[Instance] = []
        self._counts = Counter()
        total = len(instances)
        for inst in instances:
            prior = stored.get(inst.instance_id)
            if prior is not None and not await self._needs_rerun(prior, inst, source, retry_errors):
                self._counts[prior.status.value] += 1
                await self._emit(
                    ProgressEvent(
                        "skipped",
                        inst.instance_id,
                        prior,
                        done=self._done,
                        total=total,
                        counts=dict(self._counts),
                    )
                )
            else:
                pending.append(inst)

        pending = self.evaluator.plan(pending)
        semaphore = asyncio.Semaphore(config.max_concurrent_rows)

        async def one(inst: Instance) -> None:
            async with semaphore:
                await self._emit(
                    ProgressEvent(
                        "started",
                        inst.instance_id,
                        done=self._done,
                        total=total,
                        counts=dict(self._counts),
                    )
                )
                result = await self._evaluate_row(run_id, inst, source, config)
                await asyncio.to_thread(self.store.save_result, run_id, result)
                self.artifacts.write_text(
                    art.instance_key(run_id, inst.instance_id, art.RESULT),
                    result.model_dump_json(indent=2),
                )
                self._counts[result.status.value] += 1
                await self._emit(
                    ProgressEvent(
                        "finished",
                        inst.instance_id,
                        result,
                        done=self._done,
                        total=total,
                        counts=dict(self._counts),
                    )
                )

        async with asyncio.TaskGroup() as tg:
            for inst in pending:
                tg.create_task(one(inst))

        return await self.publish(
            record,
            instances,
            participants or {"agent": source.name},
            evaluated=len(pending),
            resumed=total - len(pending),
        )

    @property
    def _done(self) -> int:
        return sum(self._counts.values())

    async def publish(
        self,
        record: RunRecord,
        instances: Sequence[Instance],
        participants: dict[str, str],
        evaluated: int = 0,
        resumed: int = 0,
    ) -> RunOutcome:
        """Write the run's results (AgentBeats shape), per-instance rows and summary."""
        stored = await asyncio.to_thread(self.store.get_results, record.run_id)
        results = [stored[i.instance_id] for i in instances if i.instance_id in stored]
        metrics = RunMetrics.from_results(results)
        model = record.config.get("green_agent_model", "")
        row = result_row(record, metrics, results, model, participants)
        run_id = record.run_id
        self.artifacts.write_text(
            art.run_key(run_id, art.RESULTS),
            json.dumps({"participants": participants, "results": [row]}, indent=2),
        )
        self.artifacts.write_text(
            art.run_key(run_id, art.INSTANCES), "".join(r.model_dump_json() + "\n" for r in results)
        )
        self.artifacts.write_text(
            art.run_key(run_id, art.RUN_REPORT),
            json.dumps(run_report([i.instance_id for i in instances], results), indent=4),
        )
        finished = record.model_copy(
            update={"state": "finished", "summary": metrics.result_row(model)}
        )
        finished.provenance["finished_at"] = utcnow()
        await asyncio.to_thread(self.store.update_run, finished)
        self.artifacts.write_text(
            art.run_key(run_id, art.RUN_INFO), finished.model_dump_json(indent=2)
        )
        self.artifacts.write_text(
            art.run_key(run_id, art.REPORT_HTML),
            render_html(
                finished,
                results,
                metrics,
                lambda iid, name: self.artifacts.exists(art.instance_key(run_id, iid, name)),
            ),
        )
        return RunOutcome(finished, results, metrics, row, evaluated, resumed)

    async def _needs_rerun(
        self, prior: InstanceResult, inst: Instance, source: PatchSource, retry_errors: bool
    ) -> bool:
        if retry_errors and prior.status is Status.ERROR:
            return True
        if source.deterministic:
            # Upstream's cache is keyed by run id only, so an edited prediction is silently
            # never re-evaluated. Here a changed patch is a new evaluation of that row.
            patch = await source.get_patch(inst)
            now = None if is_blank(patch.patch) else sha256(patch.patch or "")
            return now != prior.patch_sha256
        return False

    async def _evaluate_row(
        self, run_id: str, inst: Instance, source: PatchSource, config: EvalConfig
    ) -> InstanceResult:
        started, t0 = utcnow(), time.monotonic()
        patch: PatchResult | None = None
        try:
            patch = await source.get_patch(inst)
        except EvaluationFailure as exc:  # the interactive mode's workspace could not be made
            return error_row(inst, patch, exc, 1, started, t0)
        except Exception as exc:  # a bug must cost one row, never the run
            failure = EvaluationFailure(f"internal error: {exc!r}", log_tail=traceback.format_exc())
            return error_row(inst, patch, failure, 1, started, t0)
        if patch.extra.get("transcript"):  # once, not per evaluation attempt
            self.artifacts.write_text(
                art.instance_key(run_id, inst.instance_id, art.TRANSCRIPT),
                json.dumps(patch.extra["transcript"], indent=1),
            )

        async def note(message: str) -> None:
            await self._emit(ProgressEvent("note", inst.instance_id, message=message))

        return await evaluate_with_retries(
            self.evaluator, run_id, inst, patch, config.max_attempts, self.retry_backoff, note
        )

    async def _emit(self, event: ProgressEvent) -> None:
        if self.progress is None:
            return
        outcome = self.progress(event)
        if inspect.isawaitable(outcome):
            await outcome


async def evaluate_with_retries(
    evaluator: RowEvaluator,
    run_id: str,
    inst: Instance,
    patch: PatchResult,
    max_attempts: int,
    backoff: Sequence[float] = RETRY_BACKOFF,
    note: Callable[[str], Awaitable[None]] | None = None,
) -> InstanceResult:
    """One row: evaluated, retried when the infrastructure fails, an ``error`` row at worst."""
    started, t0 = utcnow(), time.monotonic()
    attempt = 0
    spent: dict[str, float] = {}  # by the attempts that failed: the row's time, all of it
    try:
        for attempt in range(1, max_attempts + 1):
            try:
                result = await evaluator.evaluate(run_id, inst, patch)
                return _with_spent(result.model_copy(update={"attempts": attempt}), spent)
            except EvaluationFailure as exc:
                for phase, seconds in exc.spent.items():
                    spent[phase] = spent.get(phase, 0.0) + seconds
                if not exc.retryable or attempt == max_attempts:
                    return error_row(inst, patch, exc, attempt, started, t0, spent)
                waited = time.monotonic()
                if note is not None:
                    await note(f"attempt {attempt} failed ({exc.reason}); retrying")
                await asyncio.sleep(backoff[min(attempt - 1, len(backoff) - 1)])
                spent["waiting"] = spent.get("waiting", 0.0) + time.monotonic() - waited
    except Exception as exc:  # a bug must cost one row, never the run
        failure = EvaluationFailure(f"internal error: {exc!r}", log_tail=traceback.format_exc())
        return error_row(inst, patch, failure, max(attempt, 1), started, t0)
    raise AssertionError("max_attempts is at least 1")


def _with_spent(result: InstanceResult, spent: dict[str, float]) -> InstanceResult:
    """A row that succeeded after failed attempts, their phases' time added to its own."""
    if not spent:
        return result
    durations = result.durations.model_copy(
        update={k: getattr(result.durations, k) + v for k, v in spent.items()}
    )
    return result.model_copy(update={"durations": durations})
