"""Simulate a full run of the AWS pipeline: state transitions, wall time, cost.

The state machine is the one in infra/workflow.py; per row it enters

    Dispatch, PatchReady, (WaitForParticipant, Poll, PatchReady) x polls, HasPatch,
    Sandbox, Classify

(a predictions run's Dispatch returns the patch at once: no polls), and per run Resolve,
LargeRun?, the Map, Aggregate. Rows are scheduled on ``max_concurrent_rows`` slots in
dataset order, each taking participant time + sandbox time drawn from log-normal
distributions with the given means (seeded, so figures are reproducible); the makespan is
the run's wall time. Prices are us-east-1 list prices (see PRICES); change them with
--price name=value.

    python benchmarks/aws_cost.py                          # 500 rows, the docs' scenarios
    python benchmarks/aws_cost.py --rows 500 --concurrency 40 --sandbox-minutes 6 \\
        --participant-minutes 10 --poll-seconds 30

Prints a markdown table (docs/aws.md keeps the latest, with its date).
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
from dataclasses import dataclass, field

# us-east-1 list prices, USD (checked 2026-11; Fargate Linux/x86, Lambda x86, Step
# Functions standard workflows, DynamoDB on-demand, S3 standard, EFS standard + elastic
# throughput). Free tiers are ignored.
PRICES = {
    "fargate_vcpu_hour": 0.04048,
    "fargate_gb_hour": 0.004445,
    "fargate_ephemeral_gb_hour": 0.000111,  # above the 20 GB included
    "lambda_gb_second": 0.0000166667,
    "lambda_request": 0.20 / 1e6,
    "sfn_transition": 0.025 / 1000,
    "ddb_write_unit": 0.625 / 1e6,
    "ddb_read_unit": 0.125 / 1e6,
    "s3_put": 0.005 / 1000,
    "s3_get": 0.0004 / 1000,
    "efs_read_gb": 0.03,
    "efs_write_gb": 0.06,
    "logs_ingest_gb": 0.50,
}


@dataclass
class Scenario:
    rows: int = 500
    concurrency: int = 40
    sandbox_minutes: float = 6.0  # mean Fargate task time per row, image pull included
    participant_minutes: float = 0.0  # 0: a predictions run (no participant)
    poll_seconds: int = 30
    vcpu: float = 4.0
    memory_gb: float = 16.0
    ephemeral_gb: float = 100.0
    lambda_memory_gb: float = 0.5
    dispatch_seconds: float = 1.5
    poll_call_seconds: float = 0.5
    classify_seconds: float = 1.0
    environments: int = 60  # distinct (repo, version) environments in Verified
    environment_gb: float = 1.5  # written once to EFS, then read by every task of it
    read_gb_per_task: float = 0.5  # the environment's view a task copies from EFS
    log_mb_per_task: float = 2.0
    seed: int = 0
    prices: dict[str, float] = field(default_factory=lambda: dict(PRICES))


@dataclass
class Figures:
    transitions: int
    wall_hours: float
    fargate_task_hours: float
    cost: dict[str, float]

    @property
    def total(self) -> float:
        return sum(self.cost.values())


def _lognormal(rng: random.Random, mean: float, sigma: float = 0.8) -> float:
    """A right-skewed duration with the given mean (a few rows take far longer)."""
    if mean <= 0:
        return 0.0
    mu = math.log(mean) - sigma**2 / 2
    return rng.lognormvariate(mu, sigma)


def simulate(s: Scenario) -> Figures:
    # Separate streams: the same rows take the same sandbox time in every scenario.
    rng_participant, rng_sandbox = random.Random(s.seed), random.Random(s.seed + 1)
    participant = [_lognormal(rng_participant, s.participant_minutes * 60) for _ in range(s.rows)]
    sandbox = [_lognormal(rng_sandbox, s.sandbox_minutes * 60) for _ in range(s.rows)]
    # Each row: dispatch, then polls every poll_seconds until the participant is done.
    polls = [math.ceil(p / s.poll_seconds) if p else 0 for p in participant]
    row_seconds = [
        s.dispatch_seconds + n * (s.poll_seconds + s.poll_call_seconds) + sb + s.classify_seconds
        for n, sb in zip(polls, sandbox, strict=True)
    ]
    slots = [0.0] * min(s.concurrency, s.rows)
    heapq.heapify(slots)
    end = 0.0
    for seconds in row_seconds:  # the Map starts the next row when a slot frees up
        start = heapq.heappop(slots)
        end = max(end, start + seconds)
        heapq.heappush(slots, start + seconds)

    per_row = [5 + 3 * n for n in polls]
    transitions = sum(per_row) + 5  # + Resolve, LargeRun?, Map, Aggregate, end
    p = s.prices
    task_hours = sum(sandbox) / 3600
    fargate = task_hours * (
        s.vcpu * p["fargate_vcpu_hour"]
        + s.memory_gb * p["fargate_gb_hour"]
        + max(0.0, s.ephemeral_gb - 20) * p["fargate_ephemeral_gb_hour"]
    )
    lambda_seconds = (
        s.rows * (s.dispatch_seconds + s.classify_seconds)
        + sum(polls) * s.poll_call_seconds
        + 2 * 5.0  # Resolve and Aggregate
    )
    invocations = 2 * s.rows + sum(polls) + 2
    cost = {
        "Fargate": fargate,
        "Lambda": lambda_seconds * s.lambda_memory_gb * p["lambda_gb_second"]
        + invocations * p["lambda_request"],
        "Step Functions": transitions * p["sfn_transition"],
        # Per row: the row, its idempotency record (write + read), the run's done-set update.
        "DynamoDB": s.rows * 3 * p["ddb_write_unit"] + s.rows * 2 * p["ddb_read_unit"],
        # Per row: patch, log, report, row put; patch and dataset get; plus the leaderboard.
        "S3": s.rows * 4 * p["s3_put"] + s.rows * 2 * p["s3_get"] + 4 * p["s3_put"],
        "EFS": s.environments * s.environment_gb * p["efs_write_gb"]
        + s.rows * s.read_gb_per_task * p["efs_read_gb"],
        "CloudWatch Logs": s.rows * s.log_mb_per_task / 1024 * p["logs_ingest_gb"],
    }
    return Figures(transitions, end / 3600, task_hours, cost)


SCENARIOS = [
    ("predictions, 40 at a time", {"concurrency": 40}),
    ("predictions, 100 at a time", {"concurrency": 100}),
    ("A2A agent (10 min), 40 at a time", {"concurrency": 40, "participant_minutes": 10}),
    ("A2A agent (30 min), 100 at a time", {"concurrency": 100, "participant_minutes": 30}),
    ("A2A agent (10 min), 1 at a time", {"concurrency": 1, "participant_minutes": 10}),
]


def table(rows: int, base: dict[str, object], scenarios: list[tuple[str, dict]]) -> str:
    head = (
        "| scenario | transitions | wall time | Fargate task-hours | Fargate | Lambda "
        "| Step Functions | DynamoDB | S3 | EFS | Logs | total |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    lines = [head]
    for label, extra in scenarios:
        f = simulate(Scenario(rows=rows, **{**base, **extra}))  # type: ignore[arg-type]
        c = f.cost
        lines.append(
            f"| {label} | {f.transitions:,} | {f.wall_hours:.1f} h | {f.fargate_task_hours:.1f} "
            f"| ${c['Fargate']:.2f} | ${c['Lambda']:.3f} | ${c['Step Functions']:.2f} "
            f"| ${c['DynamoDB']:.4f} | ${c['S3']:.3f} | ${c['EFS']:.2f} "
            f"| ${c['CloudWatch Logs']:.2f} | **${f.total:.2f}** |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=500)
    ap.add_argument("--concurrency", type=int)
    ap.add_argument("--sandbox-minutes", type=float, default=6.0)
    ap.add_argument("--participant-minutes", type=float)
    ap.add_argument("--poll-seconds", type=int, default=30)
    ap.add_argument("--vcpu", type=float, default=4.0)
    ap.add_argument("--memory-gb", type=float, default=16.0)
    ap.add_argument("--price", action="append", default=[], metavar="NAME=USD")
    args = ap.parse_args()
    prices = dict(PRICES)
    for item in args.price:
        name, _, value = item.partition("=")
        if name not in prices:
            ap.error(f"unknown price {name!r}; one of {', '.join(prices)}")
        prices[name] = float(value)
    base: dict[str, object] = {
        "sandbox_minutes": args.sandbox_minutes,
        "poll_seconds": args.poll_seconds,
        "vcpu": args.vcpu,
        "memory_gb": args.memory_gb,
        "prices": prices,
    }
    scenarios = SCENARIOS
    if args.concurrency is not None or args.participant_minutes is not None:
        one = {"concurrency": args.concurrency or 40}
        one["participant_minutes"] = args.participant_minutes or 0.0
        scenarios = [("as given", one)]
    print(
        f"{args.rows} rows; sandbox task mean {args.sandbox_minutes:g} min on "
        f"{args.vcpu:g} vCPU / {args.memory_gb:g} GB; participant polled every "
        f"{args.poll_seconds} s\n"
    )
    print(table(args.rows, base, scenarios))


if __name__ == "__main__":
    main()
