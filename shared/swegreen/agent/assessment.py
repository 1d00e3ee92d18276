"""One assessment: every participant evaluated on the selected instances, with progress.

Kept free of A2A server types: the executor turns ``notify`` calls into ``working``
status updates and the returned rows into the final artifact.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from swegreen import __version__
from swegreen.a2a.participant_client import A2AParticipant
from swegreen.agent.request import AssessmentRequest, RequestError
from swegreen.aws.front_door_client import FrontDoorSettings
from swegreen.core.classify import Status
from swegreen.core.config import EvalConfig
from swegreen.core.dataset import Dataset, Instance, load_dataset, select_instances
from swegreen.core.diagnosis import Diagnoser
from swegreen.core.errors import SweGreenError
from swegreen.core.ids import check_id
from swegreen.core.metrics import RunMetrics
from swegreen.core.plan import Plan, plan, plan_record, what_fits
from swegreen.core.ports import ProgressEvent, Workbenches
from swegreen.core.scrub import Scrubber
from swegreen.core.stop_rule import StopRule
from swegreen.evaluation.engine import Engine, LocalSettings, build_engine, choose_backend
from swegreen.sample import resolve_sample
from swegreen.sandbox.isolation import Isolation
from swegreen.stores import artifacts as art

Notify = Callable[[str], Awaitable[None]]


class AssessmentFailed(SweGreenError):
    """The assessment could not produce results (the task ends ``failed``)."""


@dataclass
class AgentSettings:
    """What the green agent's host provides; the assessment's config comes per request.
    With ``front_door`` set (the ``aws`` backend), rows are evaluated by the AWS pipeline."""

    local: LocalSettings
    defaults: dict[str, Any] = field(default_factory=dict)
    host_env: dict[str, str] = field(default_factory=dict)
    scrubber: Scrubber | None = None  # default: the secrets of host_env
    isolation: Isolation | None = None
    llm_mock_response: str | None = None
    heartbeat: float = 30.0
    diagnose: bool = True
    front_door: FrontDoorSettings | None = None


@dataclass
class AssessmentOutcome:
    rows: list[dict[str, Any]]
    summary: str


class Assessment:
    def __init__(
        self,
        settings: AgentSettings,
        request: AssessmentRequest,
        config: EvalConfig,
        assessment_id: str,
        notify: Notify,
    ) -> None:
        self.settings = settings
        self.request = request
        self.config = config
        self.id = assessment_id
        self.notify = notify
        self.counts: Counter[str] = Counter()
        self.done = 0
        self.total = 0
        self.running: set[str] = set()
        self.stop_rule = StopRule(0, config.max_evaluator_error_share)
        self._stopped: str | None = None  # why the stop rule ended the assessment
        self._work: asyncio.Task[AssessmentOutcome] | None = None
        self._plan: tuple[EvalConfig, Dataset, list[Instance]] | None = None
        self.time_plan: Plan | None = None
        self._backend = "engine"  # engine, docker or aws: where rows are graded

    async def prepare(self) -> str:
        """Load and select rows; any problem here is the request's (it is rejected).
        Returns what will be done, for the caller."""
        for role in self.request.participants:
            try:
                check_id(self.run_id(role), f"the run id of participant {role!r} (task id + role)")
            except ValueError as exc:
                raise RequestError(str(exc)) from None
        self._plan = await self._select()
        config, dataset, instances = self._plan
        self._backend = await asyncio.to_thread(self._backend_for, config)
        self.time_plan = self._time_plan(config, len(instances))
        if not self.time_plan.fits:
            raise RequestError(
                f"this shard cannot finish in time: {self.time_plan.describe()}. "
                f"{what_fits(self.time_plan)}; or set time_budget_minutes (0: no check)"
            )
        roles = ", ".join(self.request.participants)
        return (
            f"evaluating {len(instances)} instance(s) of {dataset.name} for {roles}, "
            f"{config.max_concurrent_rows} at a time; {self.time_plan.describe()}"
        )

    async def _select(self) -> tuple[EvalConfig, Dataset, list[Instance]]:
        return await select_rows(self.settings.local, self.config)

    async def run(self) -> AssessmentOutcome:
        assert self._plan is not None, "prepare() first"
        config, dataset, instances = self._plan
        self.total = len(instances) * len(self.request.participants)
        self.stop_rule = StopRule(self.total, config.max_evaluator_error_share)
        self._work = asyncio.create_task(self._evaluate_all(config, dataset, instances))
        try:
            outcome = await self._work
        except asyncio.CancelledError:
            if self._stopped is None:
                raise
        if self._stopped is not None:  # the stop rule ended it: nothing is published
            raise AssessmentFailed(self._stopped)
        return outcome

    async def _evaluate_all(
        self, config: EvalConfig, dataset: Dataset, instances: list[Instance]
    ) -> AssessmentOutcome:
        rows, lines = [], []
        timeout = httpx.Timeout(30.0, read=300.0)
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=True) as http:
            for role, url in self.request.participants.items():
                row, line = await self._evaluate(role, url, http, config, dataset, instances)
                rows.append(row)
                lines.append(line)
        return AssessmentOutcome(rows, "\n".join(lines))

    def _backend_for(self, config: EvalConfig) -> str:
        """Where rows are graded: engine, docker (``auto`` asks the daemon) or aws."""
        if self.settings.front_door is not None:
            return "aws"
        if config.environments == "auto":
            return choose_backend(config, self.settings.host_env)
        return config.environments

    def _time_plan(self, config: EvalConfig, rows: int) -> Plan:
        return plan(
            rows=rows,
            participants=len(self.request.participants),
            concurrent=config.max_concurrent_rows,
            participant_timeout=config.participant_timeout,
            eval_timeout=config.eval_timeout,
            backend=self._backend,
            budget_minutes=config.time_budget(),
        )

    def run_id(self, role: str) -> str:
        """Each participant's rows are a run of their own; the id names its directories."""
        return f"{self.id}-{role}"

    def status_line(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items())) or "none yet"
        busy = f"; evaluating {', '.join(sorted(self.running))}" if self.running else ""
        return f"{self.done}/{self.total} rows done ({counts}){busy}"

    async def _evaluate(
        self,
        role: str,
        url: str,
        http: httpx.AsyncClient,
        config: EvalConfig,
        dataset: Dataset,
        instances: list[Instance],
    ) -> tuple[dict[str, Any], str]:
        engine = build_engine(
            self.settings.local,
            config,
            self.settings.host_env,
            progress=lambda event: self._progress(role, event),
            isolation=self.settings.isolation,
            scrubber=self.settings.scrubber,
        )
        workbenches = engine.workbenches() if config.interactive else None
        if workbenches is not None and not workbenches.available:
            await self.notify(NOT_OFFERED)
        participant = participant_for(
            role, url, config, http, workbenches, docker=self._backend == "docker"
        )
        try:
            outcome = await engine.runner.run(
                run_id=self.run_id(role),
                dataset=dataset,
                instances=instances,
                source=participant,
                config=config,
                participants={role: url},
                provenance={
                    "green_agent": f"swegreen {__version__}",
                    "participant": {role: url},
                    "sandbox": engine.describe(),
                    "time_plan": plan_record(self.time_plan),
                },
            )
            summary, diagnosed = await self._diagnose(engine, outcome.record.run_id, config)
            if diagnosed:  # rows gained diagnoses: publish them
                outcome = await engine.runner.publish(outcome.record, instances, {role: url})
            row = dict(outcome.result_row)
            row["participant"] = role
            if summary:
                row["summary"] = summary
            return row, summary_line(row)
        finally:
            engine.close()

    async def _progress(self, role: str, event: ProgressEvent) -> None:
        label = (
            f"{role}/{event.instance_id}"
            if len(self.request.participants) > 1
            else event.instance_id
        )
        if event.kind == "started":
            self.running.add(label)
            await self.notify(f"started {label} ({self.status_line()})")
        elif event.kind in ("finished", "skipped") and event.result is not None:
            self.running.discard(label)
            self.done += 1
            self.counts[event.result.status.value] += 1
            r = event.result
            await self.notify(
                f"{label}: {r.status.value} ({r.reason}; F2P {r.f2p_passed}/{r.f2p_total}, "
                f"P2P {r.p2p_passed}/{r.p2p_total}) — {self.status_line()}"
            )
            why = self.stop_rule.record(r.status.value, r.reason, r.detail)
            if why is not None and self._stopped is None and self._work is not None:
                self._stopped = why
                self._work.cancel()  # its rows' sandboxes and participant calls with it
        elif event.kind == "note":
            await self.notify(f"{label}: {event.message}")

    async def _diagnose(
        self, engine: Engine, run_id: str, config: EvalConfig
    ) -> tuple[str | None, bool]:
        """Diagnoses of the rows that did not resolve, and a run summary; both optional.
        Returns the summary and whether any row gained a diagnosis."""
        if not self.settings.diagnose:
            return None, False
        diagnosed = False
        diagnoser = Diagnoser(
            config.green_agent_model,
            mock_response=self.settings.llm_mock_response,
            scrub=engine.scrubber,
        )
        results = await asyncio.to_thread(engine.store.get_results, run_id)
        for row in results.values():
            if row.status is Status.RESOLVED or diagnoser.unavailable:
                continue
            log = (
                engine.artifacts.read_text(
                    art.instance_key(run_id, row.instance_id, art.TEST_OUTPUT)
                )
                or ""
            )
            text = await diagnoser.diagnose(row, log)
            if text:
                diagnosed = True
                await asyncio.to_thread(
                    engine.store.save_result, run_id, row.model_copy(update={"diagnosis": text})
                )
        metrics = RunMetrics.from_results(results.values())
        summary = await diagnoser.summarize(metrics.result_row(config.green_agent_model))
        if diagnoser.unavailable:
            await self.notify(f"note: no diagnoses or summary: {diagnoser.unavailable}")
        return summary, diagnosed


NOT_OFFERED = (
    "note: the interactive mode is not offered: its commands need isolation = bwrap or "
    "landlock, or environments = docker"
)


def participant_for(
    role: str,
    url: str,
    config: EvalConfig,
    http: httpx.AsyncClient,
    workbenches: Workbenches | None,
    docker: bool,
) -> A2AParticipant:
    """The A2A client that asks ``role`` for patches, as ``config`` says. ``docker``: rows
    graded in instance images, whose image the participant is told, so that the runner
    pulls each once (the platform's disk keeps every pull)."""
    return A2AParticipant(
        role,
        url,
        timeout=config.participant_timeout,
        url_template=config.participant_url_template(),
        http=http,
        workbenches=workbenches,
        budget=config.budget(),
        dialect=config.dialect_for(role),
        image_source=config.docker_images if docker else "official",
    )


async def select_rows(
    local: LocalSettings, config: EvalConfig
) -> tuple[EvalConfig, Dataset, list[Instance]]:
    """The request's rows of its dataset; any problem here is the request's (rejected)."""
    try:
        config = await asyncio.to_thread(resolve_sample, config, local.cache_dir)
        dataset = await asyncio.to_thread(
            lambda: load_dataset(
                config.dataset,
                config.split,
                config.dataset_revision,
                parsed_cache=local.parsed_datasets,
                snapshots=local.dataset_snapshots,
            )
        )
        instances = select_instances(dataset, config.selection())
    except SweGreenError as exc:
        raise RequestError(str(exc)) from None
    if not instances:
        raise RequestError("the selection is empty: check instance_ids, repos, max_rows and shards")
    return config, dataset, instances


def summary_line(row: dict[str, Any]) -> str:
    """One participant's result row in a line: resolved share, then the other statuses."""
    counts = row.get("counts", {})
    rest = ", ".join(f"{k} {v}" for k, v in counts.items() if v and k != "resolved")
    total = int(row.get("total_instances", 0))
    errors = Counter(
        str(i.get("reason")) for i in row.get("instances", []) if i.get("status") == "error"
    )
    graded = f"{total - sum(errors.values())} of {total} rows graded"
    if errors:
        graded += " (not graded: " + ", ".join(f"{r} {n}" for r, n in errors.most_common()) + ")"
    return (
        f"{row.get('participant')}: {counts.get('resolved', 0)}/{total}"
        f" resolved ({row.get('resolved_pct', 0.0):.1%}); {rest}; {graded}"
    )
