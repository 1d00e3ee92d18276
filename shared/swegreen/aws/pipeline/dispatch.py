"""Dispatch and Watch: a row's patch from its source, or an A2A exchange started and
followed until the participant is done or past its deadline."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
from botocore.exceptions import ClientError

from swegreen.aws.pipeline.base import PipelineBase
from swegreen.aws.pipeline.models import (
    INSTANCE,
    PREDICTION,
    BatchPatches,
    Item,
    PatchState,
)
from swegreen.core.classify import Reason
from swegreen.core.patches import EMPTY_PATCH_DETAIL, oversized_patch
from swegreen.core.sources import Prediction, parse_predictions
from swegreen.stores import artifacts as art


class DispatchStep(PipelineBase):
    """Dispatch, the callback wait, Watch and its polls."""

    async def dispatch_batch(self, item: Item) -> BatchPatches:
        """Every row's patch of a batch (its patches are known up front: Resolve batches
        no A2A rows)."""
        rows = {row.instance_id: await self.dispatch(row) for row in item.rows()}
        return BatchPatches(rows=rows, any_patch=any(s.patch_key for s in rows.values()))

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
            if pred.exchange is None:
                return self._arrived(item, pred.model_patch, pred.model_name_or_path, now)
            # the green agent asked the participant itself: the row keeps its account of it
            ex = pred.patch_result()
            state = self._arrived(
                item, ex.patch, ex.model_name_or_path, now, ex.failure, ex.detail, ex.usage, now
            )
            return state.model_copy(
                update={
                    "duration": ex.duration,
                    "conversation": ex.conversation,
                    "interaction": ex.interaction,
                }
            )
        from swegreen.a2a.exchange import outcome_of
        from swegreen.a2a.polled import PolledParticipant
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
        from swegreen.a2a.exchange import outcome_of
        from swegreen.a2a.polled import PolledParticipant

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
        if patch == "":
            # No change to test: the row is no_op (empty_patch) as the local engine decides
            # it (evaluation/evaluate.py), without a sandbox task to start and pay for.
            return PatchState(
                done=True,
                failure=Reason.EMPTY_PATCH,
                detail=EMPTY_PATCH_DETAIL,
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
