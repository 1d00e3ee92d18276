"""The ``aws`` backend: an assessment evaluated by the AWS pipeline instead of in-process.

One run per participant is started through the front door (``POST /runs``, the same
request JSON the green agent received), then followed (``GET /runs/{id}``) until it is
finished or failed; progress is relayed to the A2A caller as rows complete, and the
finished runs' result rows become the artifact, as a local assessment's would. The stop
rule (stop_rule.py) reads each run's count of the evaluator's own failures: when it says
stop, every run is stopped and the assessment fails with nothing published.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import httpx

from swegreen.agent.assessment import (
    AgentSettings,
    AssessmentFailed,
    AssessmentOutcome,
    Notify,
    summary_line,
)
from swegreen.agent.request import AssessmentRequest
from swegreen.aws.front_door_client import FrontDoorClient, FrontDoorError
from swegreen.core.config import EvalConfig
from swegreen.core.stop_rule import StopRule

log = logging.getLogger("swegreen.agent")
# Stops in flight after their assessment was cancelled (kept referenced until done).
_STOPPING: set[asyncio.Future[None]] = set()


STOP_ATTEMPTS = 5  # DELETE tries per run when an assessment is cancelled


class RemoteAssessment:
    def __init__(self, settings: AgentSettings, request: AssessmentRequest, notify: Notify) -> None:
        assert settings.front_door is not None
        self.settings = settings
        self.front_door = settings.front_door
        self.request = request
        self.notify = notify
        self.done: dict[str, int] = {}
        self.total: dict[str, int] = {}
        self.config = {**settings.defaults, **request.config}
        default = EvalConfig.model_fields["max_evaluator_error_share"].default
        self.max_share = float(self.config.get("max_evaluator_error_share", default))

    async def prepare(self) -> str:
        # The pipeline selects the rows (its Resolve step); a bad selection fails the run,
        # which is reported as the assessment's failure.
        roles = ", ".join(self.request.participants)
        return f"evaluating for {roles} on the AWS pipeline at {self.front_door.url}"

    def status_line(self) -> str:
        parts = [
            f"{role} {self.done.get(role, 0)}/{self.total.get(role, '?')}"
            for role in self.request.participants
        ]
        return "rows done: " + ", ".join(parts)

    async def run(self) -> AssessmentOutcome:
        config = self.config
        timeout = httpx.Timeout(30.0, read=60.0)
        async with httpx.AsyncClient(timeout=timeout) as http:
            client = FrontDoorClient(self.front_door, http)
            runs: dict[str, str] = {}
            try:
                for role, url in self.request.participants.items():
                    runs[role] = await client.start({"participants": {role: url}, "config": config})
                    await self.notify(f"{role}: started run {runs[role]}")
                follows = [
                    asyncio.ensure_future(self._follow(client, role, run_id))
                    for role, run_id in runs.items()
                ]
                try:
                    rows = await asyncio.gather(*follows)
                finally:  # one run failed: stop following the others (they go on on AWS)
                    for follow in follows:
                        follow.cancel()
            except (FrontDoorError, httpx.HTTPError) as exc:
                # the API failed past its retries: the runs it started would go on billing
                await self._stop(runs)
                raise AssessmentFailed(f"the AWS pipeline's API: {exc}") from None
            except Exception:
                # a failed run, the stop rule, or a bug: nothing is published, and the other
                # runs would spend for nothing
                await self._stop(runs)
                raise
            except asyncio.CancelledError:
                # The A2A task was cancelled: so are the runs (and their Fargate tasks). The
                # stop has its own client and outlives a second cancellation of this task.
                stopping = asyncio.ensure_future(self._stop(runs))
                _STOPPING.add(stopping)
                stopping.add_done_callback(_STOPPING.discard)
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(stopping)
                raise
        lines = [summary_line(row) for row in rows]
        return AssessmentOutcome(list(rows), "\n".join(lines))

    async def _stop(self, runs: dict[str, str]) -> None:
        """DELETE each run until its record says it ended (at most STOP_ATTEMPTS times):
        a 202 from a failed stop, an API Gateway error that comes back as 404, or a cancel
        that comes before the run's record must not leave it running."""
        async with httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as http:
            client = FrontDoorClient(self.front_door, http)
            for run_id in runs.values():
                for attempt in range(STOP_ATTEMPTS):
                    try:
                        stopping = await client.stop(run_id)
                        log.info("run %s: %s", run_id, "stopping" if stopping else "not found")
                    except (FrontDoorError, httpx.HTTPError) as exc:
                        log.warning("could not stop run %s (try %d): %s", run_id, attempt + 1, exc)
                    await asyncio.sleep(min(2.0**attempt, 10.0))
                    try:
                        state = await client.run(run_id)
                    except (FrontDoorError, httpx.HTTPError):
                        continue
                    if state is not None and state["state"] != "running":
                        log.info("run %s: %s", run_id, state["state"])
                        break
                else:
                    log.warning("run %s: still says running after %d stops", run_id, STOP_ATTEMPTS)

    async def _follow(self, client: FrontDoorClient, role: str, run_id: str) -> dict[str, Any]:
        started = time.monotonic()
        while True:
            state = await client.run(run_id)
            if state is None:
                if time.monotonic() - started > self.front_door.start_timeout:
                    raise AssessmentFailed(
                        f"{role}: run {run_id} did not start within "
                        f"{self.front_door.start_timeout:g} s"
                    )
            elif state["state"] in ("failed", "cancelled"):
                raise AssessmentFailed(
                    f"{role}: run {run_id} {state['state']}: {state.get('error', '?')}"
                )
            else:
                await self._progress(role, state)
                if state["state"] == "finished":
                    published = await client.results(run_id)
                    (row,) = published["results"]
                    row["participant"] = role
                    return row
            await asyncio.sleep(self.front_door.poll_seconds)

    async def _progress(self, role: str, state: dict[str, Any]) -> None:
        run = state.get("run") or {}
        # "total" since the ids left the record item (dynamo_store.py); older stacks: the ids
        total = int(state.get("total") or 0) or len(run.get("instance_ids", []))
        self.total[role] = total or self.total.get(role, 0)
        done = int(state.get("done", 0))
        if done != self.done.get(role, -1):
            self.done[role] = done
            await self.notify(f"{role}: {done}/{self.total[role]} rows done on AWS")
        if self.total[role]:
            rule = StopRule(self.total[role], self.max_share)
            why = rule.tally(
                done, int(state.get("evaluator_failures", 0)), state.get("first_failure", "")
            )
            if why is not None:
                raise AssessmentFailed(f"{role}: {why}")
