"""The ports the core depends on. Adapters (SQLite, DynamoDB, local disk, S3, A2A, ...)
implement them; composition roots (CLI, green agent, Lambda handlers) build and pass them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from swegreen.core.dataset import Instance
from swegreen.core.errors import StoreError
from swegreen.core.results import InstanceResult, utcnow


class RunRecord(BaseModel):
    """A run's identity and provenance, stored beside its rows."""

    model_config = ConfigDict(extra="ignore")

    run_id: str
    dataset: str
    split: str = "test"
    dataset_revision: str | None = None
    dataset_digest: str
    patch_source: str
    config: dict[str, Any] = Field(default_factory=dict)
    instance_ids: list[str] = Field(default_factory=list)
    provenance: dict[str, Any] = Field(default_factory=dict)
    # "estimated": an AWS dry run, resolved and estimated, never run
    state: Literal["running", "finished", "estimated"] = "running"
    # where a local run's predictions file is (this host's store only: never published),
    # so that the command that resumes it can be printed as it runs
    patches_path: str | None = None
    # the run's whole config as this host ran it, its paths included (this host's store
    # only: never published), so that `swegreen run --run-id X` alone resumes it
    local_config: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    created_at: str = Field(default_factory=utcnow)
    updated_at: str = Field(default_factory=utcnow)

    def resumed_by(self, new: RunRecord) -> RunRecord:
        """This stored run, resumed by ``new``: its selection and config, running again
        (the last leaderboard is dropped until the run finishes again)."""
        self.check_resume(new)
        return self.model_copy(
            update={
                "instance_ids": new.instance_ids,
                "config": new.config,
                "provenance": new.provenance,
                "patches_path": new.patches_path,
                "local_config": new.local_config,
                "state": "running",
                "summary": None,
                "updated_at": utcnow(),
            }
        )

    def check_resume(self, new: RunRecord) -> None:
        """A run id names one evaluation: same rows, same patch source. Else it is a new run."""
        if self.dataset_digest != new.dataset_digest:
            raise StoreError(
                f"run {new.run_id!r} was started on dataset {self.dataset} "
                f"(digest {self.dataset_digest[:12]}), not on {new.dataset} "
                f"(digest {new.dataset_digest[:12]}); choose a new run id"
            )
        if self.patch_source != new.patch_source:
            raise StoreError(
                f"run {new.run_id!r} evaluated patches from {self.patch_source!r}, not "
                f"{new.patch_source!r}; choose a new run id"
            )
        # A run never shrinks: its results and leaderboard would lose rows it holds (it
        # may grow: a resume with more rows evaluates only the new ones).
        wanted = set(new.instance_ids)
        dropped = [i for i in self.instance_ids if i not in wanted]
        if dropped:
            raise StoreError(
                f"run {new.run_id!r} holds {len(self.instance_ids)} row(s); this selection "
                f"({len(new.instance_ids)}) would leave out {len(dropped)} of them "
                f"({', '.join(dropped[:3])}{' ...' if len(dropped) > 3 else ''}): a run "
                "never shrinks. To resume it, select its rows again (the same --max-rows, "
                "--instance-ids, --repos); to evaluate this selection, choose a new --run-id"
            )


class ResultStore(Protocol):
    """Durable rows keyed by (run id, instance id). Writes are idempotent upserts."""

    def begin_run(self, record: RunRecord) -> RunRecord:
        """Create the run, or return the stored one for a resume (refusing a mismatch)."""
        ...

    def get_run(self, run_id: str) -> RunRecord | None: ...

    def update_run(self, record: RunRecord) -> None: ...

    def list_runs(self) -> list[RunRecord]: ...

    def list_running(self) -> list[RunRecord]:
        """The runs whose state is running (those that share a quota)."""
        ...

    def save_result(self, run_id: str, result: InstanceResult) -> None:
        """Write the row (an upsert); an ``error`` row never replaces a verdict."""
        ...

    def get_results(self, run_id: str) -> dict[str, InstanceResult]: ...


class ArtifactStore(Protocol):
    """Per-run, per-instance files (patch, eval script, test log, report.json)."""

    def write_text(self, key: str, text: str) -> None:
        """Write atomically: a reader sees the old content or the new, never a part."""
        ...

    def read_text(self, key: str) -> str | None: ...

    def exists(self, key: str) -> bool: ...

    def location(self, key: str) -> str:
        """Where a person finds the artifact (a path or a URL)."""
        ...


@dataclass(frozen=True)
class PatchResult:
    """What a patch source returned for one instance.

    ``patch`` is None when the source has nothing (no prediction, participant failure);
    ``failure`` then carries the row's reason and ``detail`` says what happened.
    """

    patch: str | None
    model_name_or_path: str
    failure: str | None = None
    detail: str = ""
    duration: float = 0.0
    usage: dict[str, Any] | None = None
    # Interactive mode: steps, command time, output bytes (interaction.Usage.as_row).
    interaction: dict[str, Any] | None = None
    # A2A participants: the task dialect, what chose it, and where the patch was found.
    conversation: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class RowEvaluator(Protocol):
    """Evaluates one row's patch where its tests can run: the engine's own environments
    (evaluation/evaluate.py) or an instance image on a Docker engine (containers/)."""

    backend: str

    async def evaluate(self, run_id: str, instance: Instance, patch: PatchResult) -> InstanceResult:
        """A row for every outcome the participant answers for; ``EvaluationFailure``
        for the ones it does not (the runner retries those, then stores an error row)."""
        ...

    def regrade(
        self, run_id: str, instance: Instance, stored: InstanceResult, work: Path
    ) -> InstanceResult:
        """The row graded again from its saved log, running nothing."""
        ...

    def plan(self, instances: Sequence[Instance]) -> list[Instance]:
        """The order to evaluate ``instances`` in (a backend may start work ahead)."""
        ...


class PatchSource(Protocol):
    """Gives the patch to evaluate for an instance: predictions, gold, empty, a participant."""

    name: str
    deterministic: bool  # the same instance always yields the same patch (resume may compare)

    async def get_patch(self, instance: Instance) -> PatchResult: ...


@dataclass(frozen=True)
class CommandRun:
    """One command a participant ran in its workbench (the interactive modes)."""

    exit_code: int | None  # None: past its time limit
    output: str
    duration: float


class Workbench(Protocol):
    """A participant's copy of one instance's workspace, where its commands run
    (evaluation/workbench.py implements it over the engine's testbeds and sandbox)."""

    @property
    def workdir(self) -> Path: ...

    @property
    def python_version(self) -> str:
        """The environment's Python, major.minor."""
        ...

    async def run(self, command: str, timeout: float) -> CommandRun: ...

    async def run_discarded(self, command: str, timeout: float) -> CommandRun:
        """``command`` with nothing it writes kept."""
        ...


class Workbenches(Protocol):
    """Opens workbenches; ``available`` only where commands can be isolated."""

    @property
    def available(self) -> bool: ...

    def open(self, scope: str, instance: Instance) -> AbstractAsyncContextManager[Workbench]: ...


ProgressCallback = Callable[["ProgressEvent"], Awaitable[None] | None]


@dataclass(frozen=True)
class ProgressEvent:
    """What the runner reports as it goes: a row started, a row finished, a note."""

    kind: Literal["started", "finished", "skipped", "note"]
    instance_id: str = ""
    result: InstanceResult | None = None
    message: str = ""
    done: int = 0
    total: int = 0
    counts: dict[str, int] = field(default_factory=dict)
