"""Whether an assessment's worst case fits the time its runner gives it.

AgentBeats runs each shard in one GitHub job whose run step ends after 300 minutes, image
pulls included; a shard cut there publishes nothing for the whole submission
(docs/agentbeats.md). A score therefore needs the worst case to fit, not the typical one:
every row taking its slowest allowed participant, its longest allowed evaluation and its
setup. Rows run ``max_concurrent_rows`` at once, so with every row as long as the longest,
``ceil(rows / concurrent)`` waves follow each other (a bound for any start order);
participants of one request are evaluated one after another.

What bounds the setup is not a timeout but an estimate (an image pull, an environment
build): SETUP_MINUTES says where each figure comes from. Retries of a failed
infrastructure step (``max_attempts``) are not counted: they are for the rare failure,
whose row ends early when they run out.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

# The leaderboard template's run step per shard (quick-submit-runner.yml: 300 minutes,
# pulls included).
PLATFORM_STEP_MINUTES = 300.0
# Before the first row: the card, the request, the dataset, the first row's start.
STARTUP_MINUTES = 5.0
# Per row, before its participant starts and after its patch, beside the eval script:
# docker: pulling its instance image (an instance layer of tens of MB over a shard's
# shared base; a first environment layer 1-2 GB at a runner's 50-100 MB/s: under 1 min;
# 5 allows a slow registry). engine: cloning (django's full clone 5.5 min) and building
# its environment (matplotlib's 9-10 min, the longest measured: docs/validation-log.md).
# aws: the pipeline builds and prepares every row's environment before its rows start.
SETUP_MINUTES = {"docker": 5.0, "engine": 20.0, "aws": 20.0}
# When no eval_timeout is set, the recipe's own limit, else the official harness's 1800 s.
DEFAULT_EVAL_SECONDS = 1800.0


class Plan(BaseModel):
    """One shard's worst case, in minutes; recorded with its results."""

    model_config = ConfigDict(frozen=True)

    rows: int
    participants: int
    concurrent: int
    waves: int
    participant_minutes: float
    eval_minutes: float
    setup_minutes: float
    startup_minutes: float
    worst_minutes: float
    budget_minutes: float | None
    backend: str

    @property
    def fits(self) -> bool:
        return self.budget_minutes is None or self.worst_minutes <= self.budget_minutes

    def describe(self) -> str:
        per_row = self.participant_minutes + self.eval_minutes + self.setup_minutes
        budget = (
            f"; budget {self.budget_minutes:g} min"
            + ("" if self.fits else f", over by {self.worst_minutes - self.budget_minutes:g}")
            if self.budget_minutes is not None
            else "; no time budget"
        )
        rounds = f"{self.participants} participants x " if self.participants > 1 else ""
        return (
            f"worst case {self.worst_minutes:g} min = {self.startup_minutes:g} startup + "
            f"{rounds}{self.waves} waves of {self.concurrent} "
            f"({self.rows} rows) x {per_row:g} min a row (participant "
            f"{self.participant_minutes:g} + eval {self.eval_minutes:g} + {self.backend} "
            f"setup {self.setup_minutes:g}){budget}"
        )


def plan(
    *,
    rows: int,
    participants: int,
    concurrent: int,
    participant_timeout: float,
    eval_timeout: float | None,
    backend: str,
    budget_minutes: float | None,
) -> Plan:
    """The worst case of ``rows`` rows per participant on one shard."""
    waves = math.ceil(rows / max(1, concurrent))
    participant = participant_timeout / 60
    evaluation = (eval_timeout or DEFAULT_EVAL_SECONDS) / 60
    setup = SETUP_MINUTES[backend]
    worst = STARTUP_MINUTES + participants * waves * (participant + evaluation + setup)
    return Plan(
        rows=rows,
        participants=participants,
        concurrent=concurrent,
        waves=waves,
        participant_minutes=round(participant, 2),
        eval_minutes=round(evaluation, 2),
        setup_minutes=setup,
        startup_minutes=STARTUP_MINUTES,
        worst_minutes=round(worst, 1),
        budget_minutes=budget_minutes,
        backend=backend,
    )


def plan_record(found: Plan | None) -> dict[str, object] | None:
    """The plan as a run's provenance keeps it (``results.json``: ``time_plan``)."""
    if found is None:
        return None
    return found.model_dump() | {"fits": found.fits, "said": found.describe()}


# What the shipped scenario asks for a full Verified run (agentbeats/scenario.json5; its
# worst case is checked against the step by tests/test_plan.py): 25 rows a shard, 5 waves.
PLATFORM_PLAN = {
    "num_shards": 20,
    "max_concurrent_rows": 5,
    "participant_timeout": 1200,
    "eval_timeout": 900,
}
# More rows at once than this share a 4-vCPU runner too thinly to advise.
MAX_ADVISED_CONCURRENT = 8


def what_fits(found: Plan) -> str:
    """Settings that bring ``found`` within its budget, for the refusal's message."""
    assert found.budget_minutes is not None
    room = found.budget_minutes - found.startup_minutes
    per_row = found.participant_minutes + found.eval_minutes + found.setup_minutes
    waves_fit = math.floor(room / (found.participants * per_row))
    concurrent = math.ceil(found.rows / waves_fit) if waves_fit else 0
    shipped = ", ".join(f"{k} {v}" for k, v in PLATFORM_PLAN.items())
    advice = (
        f"set max_concurrent_rows to {concurrent}, or "
        if 0 < concurrent <= MAX_ADVISED_CONCURRENT
        else ""
    )
    return (
        f"{advice}spread the rows over more shards (num_shards, at most 20 on AgentBeats) or "
        f"lower participant_timeout ({found.participant_minutes * 60:g} s) or eval_timeout "
        f"({found.eval_minutes * 60:g} s); the shipped plan for all 500 rows: {shipped}"
    )
