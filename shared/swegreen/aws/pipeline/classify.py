"""Classify and RecordError: the task's graded row checked and written, or the row's error
with its reason (a failure a step raised on purpose keeps its own)."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from swegreen.aws.pipeline.base import PipelineBase
from swegreen.aws.pipeline.models import (
    SANDBOX_BATCH,
    SANDBOX_INPUT,
    BatchEvent,
    ClassifyEvent,
    Item,
    PatchState,
)
from swegreen.aws.pipeline.task_retry import out_of_memory
from swegreen.core import errors
from swegreen.core.classify import Reason, Status, classify
from swegreen.core.errors import EvaluationFailure, SandboxCrashed, unevaluated
from swegreen.core.ports import PatchResult
from swegreen.core.results import InstanceResult, utcnow
from swegreen.core.rows import RowBuilder, error_row
from swegreen.stores import artifacts as art


class ClassifyStep(PipelineBase):
    """Classify (and RecordError, which calls it with an error)."""

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
            interaction=state.interaction if state else None,
        )
        never = unevaluated(patch.failure, patch.detail) if state is not None else None
        if event.error is not None or never is not None:
            failure = never or _failure_of(event.error)
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

    def batch_events(self, event: BatchEvent) -> list[ClassifyEvent]:
        """A batch's rows, each as its own Classify event: a row whose engine wrote its
        result is classified from it, even when the batch's task failed after it (a Spot
        reclaim, a later row's crash); the others get the batch's error."""
        out = []
        for row in event.item.rows():
            state = event.patches.rows.get(row.instance_id) if event.patches else None
            graded = event.error is None or self._exists(
                self._key(row.run_id, row.instance_id, art.RESULT)
            )
            out.append(ClassifyEvent(item=row, patch=state, error=None if graded else event.error))
        return out

    def batch_done(self, item: Item) -> None:
        """The batch task is over: its manifest (live URLs) goes."""
        self.s3.delete_object(
            Bucket=self.settings.bucket,
            Key=self._key(item.run_id, item.instance_id, SANDBOX_BATCH),
        )


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
            "interaction": state.interaction or row.interaction,
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
        if out_of_memory(document):
            return errors.OutOfMemory(
                f"the {task} task was killed for its memory use "
                f"({document.get('StoppedReason', '?')}); a larger sandbox_memory_mib may help"
            )
        cause = f"task stopped ({document.get('StoppedReason', '?')}), exit codes {codes}"
    if sandbox:
        return SandboxCrashed(f"the {task} task failed ({name}): {cause[:1500]}")
    return EvaluationFailure(f"a pipeline step failed ({name}): {cause[:1500]}")
