"""The ``aws`` backend: an assessment graded by the AWS pipeline instead of in-process.

Who asks the participants (``FrontDoorSettings.exchange``):

- ``green_agent`` (the default; what works on AgentBeats, where the participants live in
  the runner's network and nothing on AWS can reach them): the green agent selects the
  rows and asks each participant for its patches itself, as a local assessment does (the
  interactive mode's turns in its own workbenches); it sends the patches, each with its
  exchange's account (``sources.exchange_entry``), through ``PUT /predictions``, and
  starts a run that grades that file (``POST /runs {"patches": key}``).
- ``pipeline``: the run is started with the participant's URL (the request's JSON as
  the green agent received it) and the pipeline's Dispatch and Watch functions ask it.

Either way one run per participant is then followed (``GET /runs/{id}``) until it is
finished or failed; progress is relayed to the A2A caller as rows complete, and the
finished runs' result rows become the artifact, as a local assessment's would. The stop
rule (stop_rule.py) reads each run's count of the evaluator's own failures: when it says
stop, every run is stopped and the assessment fails with nothing published.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import httpx

from swegreen.agent.assessment import (
    NOT_OFFERED,
    AgentSettings,
    AssessmentFailed,
    AssessmentOutcome,
    Notify,
    participant_for,
    select_rows,
    summary_line,
)
from swegreen.agent.request import AssessmentRequest
from swegreen.aws.front_door_client import FrontDoorClient, FrontDoorError
from swegreen.core.config import EvalConfig
from swegreen.core.dataset import Dataset, Instance
from swegreen.core.ports import PatchResult
from swegreen.core.sources import exchange_entry
from swegreen.core.stop_rule import StopRule

log = logging.getLogger("swegreen.agent")
# Stops in flight after their assessment was cancelled (kept referenced until done).
_STOPPING: set[asyncio.Future[None]] = set()


STOP_ATTEMPTS = 5  # DELETE tries per run when an assessment is cancelled

# Config the green agent uses for its side of an exchange or for choosing rows, not sent
# with a run that grades its patches: the run is given the chosen rows by id, and how
# many rows run at once on AWS is the pipeline's choice (what the account's quotas fit).
EXCHANGE_SIDE = frozenset(
    {
        "max_rows",
        "num_instances",
        "repos",
        "shard_index",
        "num_shards",
        "max_concurrent_rows",
        "participant_timeout",
        "participant_repo_url_template",
        "time_budget_minutes",
        "interactive",
        "max_steps",
        "command_timeout",
        "command_output_bytes",
        "max_output_bytes",
        "task_dialect",
        "environments",
        "isolation",
        "docker_images",
        "docker_pull",
        "docker_disk_reserve_gb",
        "docker_memory_mb",
        "docker_pids",
    }
)


class RemoteAssessment:
    def __init__(
        self,
        settings: AgentSettings,
        request: AssessmentRequest,
        notify: Notify,
        parsed: EvalConfig | None = None,
    ) -> None:
        assert settings.front_door is not None
        self.settings = settings
        self.front_door = settings.front_door
        self.request = request
        self.notify = notify
        self.done: dict[str, int] = {}
        self.total: dict[str, int] = {}
        self.asked: dict[str, int] = {}  # patches in, per participant (green_agent exchange)
        self.config = {**settings.defaults, **request.config}
        self.parsed = parsed
        default = EvalConfig.model_fields["max_evaluator_error_share"].default
        self.max_share = float(self.config.get("max_evaluator_error_share", default))
        self._rows: tuple[EvalConfig, Dataset, list[Instance]] | None = None

    @property
    def green_exchange(self) -> bool:
        return self.front_door.exchange == "green_agent"

    async def prepare(self) -> str:
        roles = ", ".join(self.request.participants)
        if not self.green_exchange:
            # The pipeline selects the rows (its Resolve step); a bad selection fails the
            # run, which is reported as the assessment's failure.
            return f"evaluating for {roles} on the AWS pipeline at {self.front_door.url}"
        assert self.parsed is not None, "the green agent's exchange needs the parsed config"
        self._rows = await select_rows(self.settings.local, self.parsed)
        _, dataset, instances = self._rows
        return (
            f"asking {roles} for {len(instances)} instance(s) of {dataset.name} here, "
            f"grading their patches on the AWS pipeline at {self.front_door.url}"
        )

    def status_line(self) -> str:
        parts = []
        for role in self.request.participants:
            if role in self.asked and role not in self.total:
                parts.append(f"{role} {self.asked[role]} patch(es) in")
            else:
                parts.append(f"{role} {self.done.get(role, 0)}/{self.total.get(role, '?')}")
        return "rows done: " + ", ".join(parts)

    async def run(self) -> AssessmentOutcome:
        config = self.config
        timeout = httpx.Timeout(30.0, read=60.0)
        async with httpx.AsyncClient(timeout=timeout) as http:
            client = FrontDoorClient(self.front_door, http)
            runs: dict[str, str] = {}
            try:
                for role, url in self.request.participants.items():
                    if self.green_exchange:
                        runs[role] = await self._graded(client, role, url)
                    else:
                        runs[role] = await client.start(
                            {"participants": {role: url}, "config": config}
                        )
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
                self._same_rows(role, run_id, state)
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

    # ---------------------------------------------------- the green agent's exchange
    async def _graded(self, client: FrontDoorClient, role: str, url: str) -> str:
        """Ask ``role`` for every chosen row's patch here, send the patches, and start the
        run that grades them: its id."""
        assert self._rows is not None, "prepare() first"
        config, _, instances = self._rows
        results = await self._exchange(role, url, config, instances)
        text = predictions_file(results)
        graded = {k: v for k, v in self.config.items() if k not in EXCHANGE_SIDE}
        graded["instance_ids"] = [i.instance_id for i in instances]
        graded["max_rows"] = -1
        # on disk before it leaves: an upload that fails is sent again from here, without
        # asking the participant a second time
        kept = keep_predictions(self.settings.local.output_dir, role, text, graded)
        try:
            key = await client.upload_predictions(text)
        except (FrontDoorError, httpx.HTTPError) as exc:
            raise AssessmentFailed(
                f"{role}: the {len(results)} patch(es) could not be sent ({exc}). They are "
                f"kept at {kept}; grade them without asking {role} again: swegreen "
                f"upload-predictions {kept} --api-url {self.front_door.url} --start"
            ) from exc
        await self.notify(f"{role}: {len(results)} patch(es) sent ({key}; kept at {kept})")
        return await client.start({"patches": key, "config": graded})

    async def _exchange(
        self, role: str, url: str, config: EvalConfig, instances: list[Instance]
    ) -> dict[str, PatchResult]:
        """Each row's patch from the participant, ``max_concurrent_rows`` at a time, as a
        local assessment asks for them (same client, dialects, budget and workbenches)."""
        engine = None
        workbenches = None
        if config.interactive:
            from swegreen.evaluation.engine import build_engine

            engine = build_engine(
                self.settings.local,
                config,
                self.settings.host_env,
                isolation=self.settings.isolation,
                scrubber=self.settings.scrubber,
            )
            workbenches = engine.workbenches()
            if not workbenches.available:
                await self.notify(NOT_OFFERED)
        gate = asyncio.Semaphore(config.max_concurrent_rows)
        self.asked[role] = 0
        results: dict[str, PatchResult] = {}
        timeout = httpx.Timeout(30.0, read=300.0)
        try:
            async with httpx.AsyncClient(timeout=timeout, follow_redirects=True) as http:
                participant = participant_for(
                    role, url, config, http, workbenches, config.environments == "docker"
                )

                async def one(inst: Instance) -> None:
                    async with gate:
                        result = await participant.get_patch(inst)
                    results[inst.instance_id] = result
                    self.asked[role] += 1
                    got = "a patch" if result.patch else (result.failure or "no patch")
                    await self.notify(
                        f"{role}/{inst.instance_id}: {got} "
                        f"({self.asked[role]}/{len(instances)} asked)"
                    )

                await asyncio.gather(*(one(inst) for inst in instances))
        finally:
            if engine is not None:
                engine.close()
        return {i.instance_id: results[i.instance_id] for i in instances}

    def _same_rows(self, role: str, run_id: str, state: dict[str, Any]) -> None:
        """The pipeline grades the rows the participant was shown: its copy of the dataset
        is the green agent's (same digest), or nothing it says is published."""
        if self._rows is None or not state.get("run"):
            return
        _, dataset, _ = self._rows
        theirs = state["run"].get("dataset_digest")
        if theirs and theirs != dataset.digest:
            raise AssessmentFailed(
                f"{role}: run {run_id} grades {dataset.name} with digest {theirs[:12]}, "
                f"but the participant was shown rows of digest {dataset.digest[:12]}: upload "
                "the green agent's copy to the pipeline (swegreen upload-dataset) and run again"
            )


def predictions_file(results: dict[str, PatchResult]) -> str:
    """The JSONL the pipeline grades: one entry per row, with its exchange's account."""
    lines = [json.dumps(exchange_entry(i, result)) for i, result in results.items()]
    return "\n".join(lines) + "\n"


KEPT_DIR = "aws-predictions"


def keep_predictions(output_dir: Path, role: str, text: str, config: dict[str, Any]) -> Path:
    """``text`` written whole (a temporary file renamed) under ``output_dir``, named by its
    content, beside the run config that grades it (``<file>.config.json``, what
    ``swegreen upload-predictions --start`` sends)."""
    folder = output_dir / KEPT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = folder / f"{role}-{digest}.jsonl"
    for target, body in ((path.with_suffix(".config.json"), json.dumps(config)), (path, text)):
        partial = target.with_name(target.name + ".partial")
        partial.write_text(body)
        os.replace(partial, target)
    return path
