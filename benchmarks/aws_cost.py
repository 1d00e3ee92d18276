"""A cost and wall-time model of one run of the AWS pipeline (infra/workflow.py), driven by
figures measured on real instances here.

Measured (this repository's benchmarks, on the 2-core machine of docs/benchmarks.md):
  * WARM_EVAL: a warm evaluation per repository (benchmarks/overhead.py: workspace copy,
    patch, the eval script with its install, grading), the time an evaluate task works;
  * ARTIFACT_MB and UNPACK_SECONDS: what a row downloads and how long unpacking it takes
    (benchmarks/artifacts.py, median over the same instances);
  * COLD_BUILD: the build phase's environment and prepared-workspace build per instance
    (benchmarks/overhead.py's cold column).
Assumed (not measurable without an AWS account; flags change them): a Fargate task's start
(placement and image pull), S3 throughput into a task, the Spot discount and interruption
rate, Lambda durations.

Per row the Rows machine runs Participant?, Dispatch, HasPatch, Presign, EvaluateFirstAttempt,
EvaluateCapacity?, EvaluateSpot, EvaluateDone, Classify (one Standard child execution per
row: ~11 transitions with its start and end); a row whose Spot task is reclaimed runs
EvaluateFailed, EvaluateAgain?, EvaluateBackoff, EvaluateCapacity? and an on-demand task
again. Rows are scheduled on ``max_concurrent_rows`` slots in dataset order; each row's
evaluate time is its repository's measured warm evaluation spread log-normally (seeded:
every scenario sees the same rows), so the run's wall time includes the slow tail.
Repositories not measured here (matplotlib, scikit-learn: their builds need what this
machine cannot have, docs/validation.md) take the median of the measured ones.

    python benchmarks/aws_cost.py                          # the docs' scenarios
    python benchmarks/aws_cost.py --concurrency 100 --task-start-seconds 60

Prints markdown tables (docs/aws.md keeps the latest, with the date).
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
from dataclasses import dataclass, field

from swegreen.core.recipes import known_network_instances
from swegreen.core.schedule import expected_seconds

# us-east-1 list prices, USD (2026-11; Fargate Linux/x86, Fargate Spot at its usual ~70%
# discount (it varies), Lambda x86, Step Functions Standard, DynamoDB on-demand, S3
# Standard). Data from S3 to tasks goes through the VPC's gateway endpoint: free. Free
# tiers are ignored.
PRICES = {
    "fargate_vcpu_hour": 0.04048,
    "fargate_gb_hour": 0.004445,
    "fargate_ephemeral_gb_hour": 0.000111,  # above the 20 GB included
    "spot_discount": 0.70,
    "lambda_gb_second": 0.0000166667,
    "lambda_request": 0.20 / 1e6,
    "sfn_transition": 0.025 / 1000,
    "ddb_write_unit": 0.625 / 1e6,
    "ddb_read_unit": 0.125 / 1e6,
    "s3_put": 0.005 / 1000,
    "s3_get": 0.0004 / 1000,
    "s3_gb_month": 0.023,
    "logs_ingest_gb": 0.50,
    "endpoint_hour": 0.01,  # an interface VPC endpoint in one availability zone
}
# The closed sandbox's interface endpoints (ECR api and dkr, CloudWatch Logs) in the
# stack's two availability zones (infra/sandbox.py): billed by the hour, runs or not.
ENDPOINT_AZS = 3 * 2
# Rows whose tests need the internet run with a public IP (swegreen/data/network_instances.json).
OPEN_SHARE = len(known_network_instances()) / 500

# Measured (docs/benchmarks.md): a warm evaluation per repository, seconds, on 2 cores;
# the same figures Resolve orders rows by (swegreen/data/row_seconds.json).
WARM_EVAL = expected_seconds()
# The build phase's cold build of one instance (environment + prepared workspace), s.
COLD_BUILD = {
    "astropy/astropy": (275.8 + 299.6) / 2,
    "mwaskom/seaborn": 79.2,
    "pallets/flask": 55.1,
    "psf/requests": 32.2,
    "pydata/xarray": 185.7,
    "pylint-dev/pylint": 82.5,
    "pytest-dev/pytest": 52.2,
    "sphinx-doc/sphinx": 66.1,
    "sympy/sympy": 34.1,
    # the validation run's first rows per django version (2026-11-24; environment and
    # prepared workspace), 37-58 s
    "django/django": 50.0,
}
ARTIFACT_MB = 263.0  # median a row downloads (mirror + environment + prepared), artifacts.py
UNPACK_SECONDS = 12.8  # median unpack of those, artifacts.py (measured on a loaded machine)
# SWE-bench Verified's rows per repository (500) and distinct (repo, version) environments.
VERIFIED = {
    "django/django": 231,
    "sympy/sympy": 75,
    "sphinx-doc/sphinx": 44,
    "matplotlib/matplotlib": 34,
    "scikit-learn/scikit-learn": 32,
    "astropy/astropy": 22,
    "pydata/xarray": 22,
    "pytest-dev/pytest": 19,
    "pylint-dev/pylint": 10,
    "psf/requests": 8,
    "mwaskom/seaborn": 2,
    "pallets/flask": 1,
}
VERIFIED_ENVIRONMENTS = 80


@dataclass
class Scenario:
    concurrency: int = 100
    rows: int = 500
    vcpu: float = 2.0  # the evaluate task (infra/settings.py: sandbox_cpu)
    memory_gb: float = 8.0
    ephemeral_gb: float = 50.0
    build_vcpu: float = 4.0
    build_memory_gb: float = 16.0
    task_start_seconds: float = 40.0  # assumed: placement + image pull (billed from the pull)
    s3_mb_per_second: float = 100.0  # assumed: one task's download from S3
    spot: bool = True
    spot_interruptions: float = 0.05  # assumed: share of Spot tasks reclaimed (run again)
    participant_minutes: float = 0.0  # an A2A participant's time per row (0: predictions)
    lambda_seconds_per_row: float = 3.0  # Dispatch + Presign + Classify, at 512 MB
    log_mb_per_row: float = 1.0
    # The pessimistic set's extras (0: left out, as the optimistic set leaves them):
    ipv4_hourly: float = 0.0  # a public IPv4 per task (public subnets), USD per hour
    insights_kb_per_task_minute: float = 0.0  # Container Insights' performance log events
    watch_always: bool = False  # Watch's per-minute invocation for the whole run
    unmeasured_factor: float = 1.0  # rows of repositories with no measured warm evaluation
    longest_first: bool = True  # Resolve's order (swegreen.core.schedule): slowest first
    spread: float = 0.6  # log-normal sigma of a row's time around its repository's figure
    seed: int = 0
    prices: dict[str, float] = field(default_factory=lambda: dict(PRICES))


@dataclass
class Figures:
    wall_minutes: float
    task_hours: float
    transitions: int
    cost: dict[str, float]
    row_seconds_median: float

    @property
    def total(self) -> float:
        return sum(self.cost.values())


def _lognormal(rng: random.Random, mean: float, sigma: float) -> float:
    mu = math.log(mean) - sigma**2 / 2
    return rng.lognormvariate(mu, sigma)


def _rows(s: Scenario) -> list[str]:
    """The rows' repositories in the order the Map takes them: slowest repositories first
    (Resolve's order), or the dataset's (instance ids sorted: sympy, the slowest, last)."""
    repos = [repo for repo in sorted(VERIFIED) for _ in range(VERIFIED[repo])]
    repos = [repos[i % len(repos)] for i in range(s.rows)]
    if s.longest_first:
        fallback = statistics.median(WARM_EVAL.values())
        repos.sort(key=lambda r: -WARM_EVAL.get(r, fallback))
    return repos


def _vcpu_gb_hour(s: Scenario, vcpu: float, memory: float, spot: bool) -> float:
    p = s.prices
    hourly = vcpu * p["fargate_vcpu_hour"] + memory * p["fargate_gb_hour"]
    hourly += max(0.0, s.ephemeral_gb - 20) * p["fargate_ephemeral_gb_hour"]
    return hourly * ((1 - p["spot_discount"]) if spot else 1.0)


def simulate(s: Scenario) -> Figures:
    rng = random.Random(s.seed)
    fallback = statistics.median(WARM_EVAL.values())
    start = s.task_start_seconds + ARTIFACT_MB / s.s3_mb_per_second + UNPACK_SECONDS
    first_rate = _vcpu_gb_hour(s, s.vcpu, s.memory_gb, s.spot)
    on_demand_rate = _vcpu_gb_hour(s, s.vcpu, s.memory_gb, False)
    task_seconds = 0.0
    fargate = 0.0
    row_seconds: list[float] = []  # a row's wall time, participant included
    interrupted = 0
    for repo in _rows(s):
        typical = WARM_EVAL.get(repo, fallback * s.unmeasured_factor)
        work = start + _lognormal(rng, typical, s.spread)
        wall = s.participant_minutes * 60 + work + s.lambda_seconds_per_row
        if s.spot and rng.random() < s.spot_interruptions:
            # reclaimed halfway on average (billed at Spot), then run again on demand
            # (TaskRetry: on-demand after Spot failed twice; modelled as at once)
            interrupted += 1
            fargate += work / 2 / 3600 * first_rate + work / 3600 * on_demand_rate
            task_seconds += work * 1.5
            wall += work / 2 + 10
        else:
            fargate += work / 3600 * first_rate
            task_seconds += work
        row_seconds.append(wall)
    slots = [0.0] * min(s.concurrency, s.rows)
    heapq.heapify(slots)
    end = 0.0
    for seconds in row_seconds:  # the Map starts the next row when a slot frees up
        began = heapq.heappop(slots)
        end = max(end, began + seconds)
        heapq.heappush(slots, began + seconds)
    end += 30  # Resolve, the child execution's start, Aggregate
    p = s.prices
    task_hours = task_seconds / 3600
    transitions = s.rows * 11 + interrupted * 5 + 12
    lambda_gb_s = s.rows * s.lambda_seconds_per_row * 0.5 + 2 * 10 * 1.0
    watch = 0.0
    if s.participant_minutes or s.watch_always:  # Watch every minute, 1 s at 512 MB
        watch = end / 60 * 1.0 * 0.5
    ipv4 = task_seconds / 3600 * s.ipv4_hourly * OPEN_SHARE  # only the open rows' tasks
    insights_gb = task_seconds / 60 * s.insights_kb_per_task_minute / 1024 / 1024
    cost = {
        "Fargate": fargate,
        "Lambda": (lambda_gb_s + watch) * p["lambda_gb_second"]
        + (3 * s.rows + end / 60) * p["lambda_request"],
        "Step Functions": transitions * p["sfn_transition"],
        "DynamoDB": s.rows * 4 * p["ddb_write_unit"] + s.rows * 3 * p["ddb_read_unit"],
        # Per row: 3 artifact GETs, input, patch; 6 uploads and the row; plus the run's.
        "S3": s.rows * (5 * p["s3_get"] + 8 * p["s3_put"]) + 10 * p["s3_put"],
        "CloudWatch Logs": (s.rows * s.log_mb_per_row / 1024 + insights_gb) * p["logs_ingest_gb"],
        "Public IPv4": ipv4,
        "VPC endpoints": end / 3600 * ENDPOINT_AZS * p["endpoint_hour"],  # the run's hours
    }
    return Figures(end / 60, task_hours, transitions, cost, statistics.median(row_seconds))


def one_time_build(s: Scenario) -> tuple[float, float, float]:
    """The build phase on a cold artifact store: (task-hours, USD, artifact GB stored)."""
    fallback = statistics.median(COLD_BUILD.values())
    seconds = sum(COLD_BUILD.get(repo, fallback) + s.task_start_seconds for repo in _rows(s))
    hours = seconds / 3600  # an upper bound: an environment is built once, not per row
    usd = hours * _vcpu_gb_hour(s, s.build_vcpu, s.build_memory_gb, s.spot)
    stored_gb = (VERIFIED_ENVIRONMENTS * 120 + s.rows * 30 + 12 * 150) / 1000
    return hours, usd, stored_gb


# Two labelled sets of what cannot be measured here (issue 20): the optimistic one is the
# model's first guess; the pessimistic one an independent reviewer's, with everything the
# first left out. The target (500 rows <= 15 min and <= $3 on a warm artifact store) must
# hold under the pessimistic one.
ASSUMPTIONS: dict[str, dict[str, object]] = {
    "optimistic": {},
    "pessimistic": {
        "task_start_seconds": 90.0,
        "s3_mb_per_second": 50.0,
        "spot_interruptions": 0.10,
        "discount": 0.60,
        "ipv4_hourly": 0.005,
        "insights_kb_per_task_minute": 50.0,
        "watch_always": True,
        # matplotlib and scikit-learn rows compile or run long suites: twice the median
        "unmeasured_factor": 2.0,
    },
}


def with_assumptions(name: str, base: dict[str, object]) -> dict[str, object]:
    chosen = dict(ASSUMPTIONS[name])
    out = {**base, **chosen}
    if "discount" in chosen:
        out.pop("discount")
        out["prices"] = {**dict(base.get("prices") or PRICES), "spot_discount": chosen["discount"]}  # type: ignore[arg-type]
    return out


SCENARIOS = [
    ("predictions, 50 at a time", {"concurrency": 50}),
    ("predictions, 100 at a time", {"concurrency": 100}),
    ("predictions, 200 at a time", {"concurrency": 200}),
    (
        "predictions, 100 at a time, in the dataset's order",
        {"concurrency": 100, "longest_first": False},
    ),
    ("predictions, 100 at a time, on demand only", {"concurrency": 100, "spot": False}),
    (
        "predictions, 100 at a time, 4 vCPU / 16 GB",
        {"concurrency": 100, "vcpu": 4, "memory_gb": 16},
    ),
    ("A2A agent (10 min per row), 100 at a time", {"concurrency": 100, "participant_minutes": 10}),
    ("A2A agent (10 min per row), 10 at a time", {"concurrency": 10, "participant_minutes": 10}),
]


def table(base: dict[str, object], scenarios: list[tuple[str, dict]]) -> str:
    lines = [
        "| scenario | wall time | median row | task-hours | Fargate | Lambda | Step Functions "
        "| DynamoDB + S3 + Logs + IPv4 + endpoints | total per run |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, extra in scenarios:
        f = simulate(Scenario(**{**base, **extra}))  # type: ignore[arg-type]
        c = f.cost
        small = c["DynamoDB"] + c["S3"] + c["CloudWatch Logs"] + c["Public IPv4"]
        small += c["VPC endpoints"]
        lines.append(
            f"| {label} | {f.wall_minutes:.1f} min | {f.row_seconds_median:.0f} s "
            f"| {f.task_hours:.1f} | ${c['Fargate']:.2f} | ${c['Lambda']:.3f} "
            f"| ${c['Step Functions']:.3f} | ${small:.3f} | **${f.total:.2f}** |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=500)
    ap.add_argument("--concurrency", type=int, help="one scenario at this max_concurrent_rows")
    ap.add_argument("--participant-minutes", type=float, default=0.0)
    ap.add_argument("--task-start-seconds", type=float, default=40.0)
    ap.add_argument("--s3-mb-per-second", type=float, default=100.0)
    ap.add_argument("--spot-interruptions", type=float, default=0.05)
    ap.add_argument("--price", action="append", default=[], metavar="NAME=USD")
    ap.add_argument(
        "--assumptions",
        choices=[*ASSUMPTIONS, "both"],
        default="both",
        help="which set of unmeasurable inputs (default: a table for each)",
    )
    args = ap.parse_args()
    prices = dict(PRICES)
    for item in args.price:
        name, _, value = item.partition("=")
        if name not in prices:
            ap.error(f"unknown price {name!r}; one of {', '.join(prices)}")
        prices[name] = float(value)
    base: dict[str, object] = {
        "rows": args.rows,
        "task_start_seconds": args.task_start_seconds,
        "s3_mb_per_second": args.s3_mb_per_second,
        "spot_interruptions": args.spot_interruptions,
        "prices": prices,
    }
    scenarios = SCENARIOS
    if args.concurrency is not None:
        scenarios = [
            (
                "as given",
                {"concurrency": args.concurrency, "participant_minutes": args.participant_minutes},
            )
        ]
    names = list(ASSUMPTIONS) if args.assumptions == "both" else [args.assumptions]
    for name in names:
        given = with_assumptions(name, base)
        s = Scenario(**given)  # type: ignore[arg-type]
        print(
            f"**{name}**: {args.rows} rows; a row's task: {s.task_start_seconds:g} s start, "
            f"{ARTIFACT_MB:g} MB at {s.s3_mb_per_second:g} MB/s, {UNPACK_SECONDS:g} s unpack, "
            f"then its repository's measured warm evaluation (unmeasured ones: "
            f"{s.unmeasured_factor:g}x the median); Spot "
            f"{s.prices['spot_discount']:.0%} off, {s.spot_interruptions:.0%} reclaimed"
            + (
                f"; public IPv4 ${s.ipv4_hourly:g}/h per task of the {OPEN_SHARE:.1%} of rows "
                "that have the internet, Container Insights "
                f"{s.insights_kb_per_task_minute:g} KB per task-minute, Watch every minute"
                if s.ipv4_hourly
                else ""
            )
            + "\n"
        )
        print(table(given, scenarios))
        hours, usd, stored = one_time_build(s)
        print(
            f"\nOne-time build phase (cold artifact store, every row's environment and "
            f"prepared workspace, upper bound): {hours:.1f} task-hours on {s.build_vcpu:g} "
            f"vCPU / {s.build_memory_gb:g} GB Spot, ${usd:.2f}; about {stored:.0f} GB of "
            f"artifacts (${stored * s.prices['s3_gb_month']:.2f} per month in S3).\n"
        )
    monthly = ENDPOINT_AZS * PRICES["endpoint_hour"] * 730
    print(
        f"Standing cost of the closed sandbox: {ENDPOINT_AZS // 2} interface endpoints in 2 "
        f"availability zones, ${ENDPOINT_AZS * PRICES['endpoint_hour']:.2f} an hour, about "
        f"${monthly:.0f} a month whether runs run or not (a run pays its own hours above).\n"
    )


if __name__ == "__main__":
    main()
