"""What a run of the AWS pipeline will take and cost: a simulation of its two state
machines, fed by figures measured on real instances here, and what the account's quotas
and the artifact store change.

Used twice: by Resolve, for the estimate a run records before its rows start (and the
whole answer of a ``dry_run``), and by ``benchmarks/aws_cost.py`` for docs/aws-cost.md's
tables. Measured inputs (docs/benchmarks-log.md): a warm evaluation per repository
(data/row_seconds.json), what a row downloads and its unpack (benchmarks/artifacts.py), the
build phase's cold build per instance. Assumed, in two labelled sets (``ASSUMPTIONS``):
what cannot be measured without an AWS account (a task's start, S3 throughput into a
task, Spot's discount and reclaim rate).

Per row the Rows machine runs Participant?, Dispatch, HasPatch, Presign, the evaluate
task's states and Classify (about 11 transitions); a reclaimed Spot task runs the retry
states and an on-demand task again. Rows are scheduled on ``concurrency`` slots in the
order given (Resolve's: slowest repositories first); each row's evaluation is its
repository's figure spread log-normally (seeded: every scenario sees the same rows).
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from pydantic import BaseModel

from swegreen.aws import quotas
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
    "kms_key_month": 1.00,
    "alarm_metric_month": 0.10,  # per metric of a standard-resolution alarm (math: each)
    "custom_metric_month": 0.30,  # a custom metric published every month
    "ecr_gb_month": 0.10,
    "dashboard_month": 3.00,  # past an account's first three
}
# What a deployed stack keeps while no run runs, as its template has them
# (tests/aws/test_stack.py counts them in the synthesized template).
IDLE = {
    "interface_endpoints": 0,  # made by each run, gone when none runs (endpoints.py)
    "kms_keys": 1,  # the alarm topic's (CloudWatch publishes only under a customer key)
    "alarms": 7,
    # what they bill: each metric of a metric-math alarm (the error rows' 7 statuses, the
    # Lambda errors' and throttles' 10 functions each) and each simple alarm's one
    "alarm_metrics": 7 + 10 + 10 + 4,
    # published while idle: Watch's RowsWaiting, every minute
    "custom_metrics": 1,
    # the sandbox image in the stack's asset repository, compressed (an assumption: its
    # seven interpreters and the build toolchain; measure with `aws ecr describe-images`)
    "image_gb": 2.6,
    "dashboards": 1,
    "watch_schedule": "rate(1 minute)",
}
# Watch's idle invocation (a DynamoDB query, Step Functions' running executions, the
# endpoints): assumed 0.5 s at 512 MB, and 1 KB of log lines.
WATCH_IDLE_SECONDS = 0.5
# The artifact store once every Verified row's artifacts are built, GB (one_time_build).
ARTIFACT_STORE_GB = 26.0
# The closed sandbox's interface endpoints (ECR api and dkr, CloudWatch Logs) in the
# stack's two availability zones (infra/sandbox.py).
ENDPOINT_AZS = 3 * 2
# Rows whose tests need the internet run with a public IP (swegreen/data/network_instances.json).
OPEN_SHARE = len(known_network_instances()) / 500

# Measured (docs/benchmarks-log.md): a warm evaluation per repository, seconds, on 2 cores.
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
# A repository's mirror build (clone, fetch the rows' commits, pack): assumed.
MIRROR_BUILD_SECONDS = 120.0
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
    # the closed rows' endpoints made before the rows (0 where they stand, or a run came
    # within the lease)
    endpoint_wait_seconds: float = 120.0
    unmeasured_factor: float = 1.0  # rows of repositories with no measured warm evaluation
    longest_first: bool = True  # Resolve's order (swegreen.core.schedule): slowest first
    # Rows in batches, one task each (Resolve's default for patches known up front): as
    # many batches as tasks run at once, at most this many rows each; 1: a task per row.
    max_batch_rows: int = 1
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
    # No schedule ends before one task start and the slowest row (nor any batching,
    # queue or concurrency): the run's floor, short of splitting a row's tests.
    floor_minutes: float = 0.0

    @property
    def total(self) -> float:
        return sum(self.cost.values())


# Two labelled sets of what cannot be measured here: the optimistic one is the model's
# first guess; the pessimistic one an independent reviewer's, with everything the first
# left out.
ASSUMPTIONS: dict[str, dict[str, object]] = {
    "optimistic": {},
    "pessimistic": {
        "task_start_seconds": 120.0,
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
    """``base`` (Scenario's fields) under the named set of assumptions."""
    chosen = dict(ASSUMPTIONS[name])
    out = {**base, **chosen}
    if "discount" in chosen:
        out.pop("discount")
        prices = dict(base.get("prices") or PRICES)  # type: ignore[call-overload]
        out["prices"] = {**prices, "spot_discount": chosen["discount"]}
    return out


def verified_rows(s: Scenario) -> list[str]:
    """``s.rows`` rows' repositories in Verified's proportions, in the order the Map takes
    them: slowest repositories first (Resolve's order), or the dataset's."""
    repos = [repo for repo in sorted(VERIFIED) for _ in range(VERIFIED[repo])]
    repos = [repos[i % len(repos)] for i in range(s.rows)]
    if s.longest_first:
        fallback = statistics.median(WARM_EVAL.values())
        repos.sort(key=lambda r: -WARM_EVAL.get(r, fallback))
    return repos


def _hourly(s: Scenario, vcpu: float, memory: float, spot: bool) -> float:
    p = s.prices
    hourly = vcpu * p["fargate_vcpu_hour"] + memory * p["fargate_gb_hour"]
    hourly += max(0.0, s.ephemeral_gb - 20) * p["fargate_ephemeral_gb_hour"]
    return hourly * ((1 - p["spot_discount"]) if spot else 1.0)


def _makespan(seconds: Sequence[float], slots: int) -> float:
    """When the last of ``seconds`` ends, each started on the first of ``slots`` free."""
    free = [0.0] * max(1, min(slots, len(seconds)))
    end = 0.0
    for x in seconds:
        began = heapq.heappop(free)
        end = max(end, began + x)
        heapq.heappush(free, began + x)
    return end


def simulate(s: Scenario, repos: Sequence[str] | None = None) -> Figures:
    """The rows phase of a run of ``repos`` (one per row, in the Map's order; default:
    ``s.rows`` rows in Verified's proportions)."""
    rows = list(verified_rows(s) if repos is None else repos)
    rng = random.Random(s.seed)
    fallback = statistics.median(WARM_EVAL.values())
    fetch = ARTIFACT_MB / s.s3_mb_per_second + UNPACK_SECONDS
    first_rate = _hourly(s, s.vcpu, s.memory_gb, s.spot)
    on_demand_rate = _hourly(s, s.vcpu, s.memory_gb, False)
    # what each row's evaluation takes in its task once started: its artifacts, its tests
    typical = [WARM_EVAL.get(r, fallback * s.unmeasured_factor) for r in rows]
    works = [fetch + _lognormal(rng, t, s.spread) for t in typical]
    batching = s.max_batch_rows > 1 and not s.participant_minutes
    if batching:
        # grouped as Resolve groups them: by what it expects of each row (its repository's
        # figure), not by what the row will take
        tasks = [
            sum(works[i] for i in g) for g in _balanced(typical, s.concurrency, s.max_batch_rows)
        ]
    else:
        tasks = works
    task_seconds = 0.0
    fargate = 0.0
    walls: list[float] = []  # a task's wall time, its participant's included
    interrupted = 0
    for work in tasks:
        billed = s.task_start_seconds + work  # billed from the image pull
        wall = s.participant_minutes * 60 + billed + s.lambda_seconds_per_row
        if s.spot and rng.random() < s.spot_interruptions:
            # reclaimed halfway on average (billed at Spot); then on demand, from a new
            # start, a row again, a batch's rows without a result (TaskRetry: on-demand
            # after Spot failed twice; modelled as at once)
            interrupted += 1
            again = s.task_start_seconds + (work / 2 if batching else work)
            fargate += billed / 2 / 3600 * first_rate + again / 3600 * on_demand_rate
            task_seconds += billed / 2 + again
            wall += again + 10 - billed / 2
        else:
            fargate += billed / 3600 * first_rate
            task_seconds += billed
        walls.append(wall)
    # Resolve, the child's start, Aggregate; and the endpoints' making before the rows
    # (about 2 minutes after an idle spell: endpoints.py)
    end = _makespan(walls, s.concurrency) + 30 + s.endpoint_wait_seconds
    n = len(rows)
    p = s.prices
    # a Map item's states (a batch's, when rows are batched: one task for its rows)
    transitions = len(tasks) * 11 + interrupted * 5 + 12
    lambda_gb_s = n * s.lambda_seconds_per_row * 0.5 + 2 * 10 * 1.0
    watch = 0.0
    if s.participant_minutes or s.watch_always:  # Watch every minute, 1 s at 512 MB
        watch = end / 60 * 1.0 * 0.5
    ipv4 = task_seconds / 3600 * s.ipv4_hourly * OPEN_SHARE  # only the open rows' tasks
    insights_gb = task_seconds / 60 * s.insights_kb_per_task_minute / 1024 / 1024
    cost = {
        "Fargate": fargate,
        "Lambda": (lambda_gb_s + watch) * p["lambda_gb_second"]
        + (3 * n + end / 60) * p["lambda_request"],
        "Step Functions": transitions * p["sfn_transition"],
        "DynamoDB": n * 4 * p["ddb_write_unit"] + n * 3 * p["ddb_read_unit"],
        # Per row: 3 artifact GETs, input, patch; 6 uploads and the row; plus the run's.
        "S3": n * (5 * p["s3_get"] + 8 * p["s3_put"]) + 10 * p["s3_put"],
        "CloudWatch Logs": (n * s.log_mb_per_row / 1024 + insights_gb) * p["logs_ingest_gb"],
        "Public IPv4": ipv4,
        # the run's hours, whole hours as AWS bills endpoint hours
        "VPC endpoints": math.ceil(end / 3600) * ENDPOINT_AZS * p["endpoint_hour"],
    }
    per_row = sorted(
        (w + s.task_start_seconds + s.participant_minutes * 60 for w in works)
        if not batching
        else works
    )
    median = statistics.median(per_row) if per_row else 0.0
    slowest = max(works, default=0.0) + s.task_start_seconds + s.participant_minutes * 60
    floor = (slowest + s.lambda_seconds_per_row + 30 + s.endpoint_wait_seconds) / 60
    return Figures(end / 60, task_seconds / 3600, transitions, cost, median, floor)


def _balanced(expected: Sequence[float], groups: int, max_size: int) -> list[list[int]]:
    """Indexes of ``expected`` in groups of about equal sums, longest first to the lightest
    not full, as swegreen.core.schedule.balanced groups a run's rows (which it cannot
    call: it groups instances, this the model's rows)."""
    count = max(1, min(groups, len(expected)), -(-len(expected) // max_size))
    heap = [(0.0, n) for n in range(count)]
    members: list[list[int]] = [[] for _ in heap]
    for i in sorted(range(len(expected)), key=lambda i: -expected[i]):
        load, n = heapq.heappop(heap)
        members[n].append(i)
        if len(members[n]) < max_size:
            heapq.heappush(heap, (load + expected[i], n))
    return [m for m in members if m]


def spread(s: Scenario, runs: int = 40) -> tuple[float, float, float, float]:
    """A scenario over ``runs`` seeds (which rows run long, which tasks are reclaimed):
    median and 90th percentile wall minutes, median total USD, median floor minutes."""
    figures = [simulate(replace(s, seed=seed)) for seed in range(runs)]
    walls = sorted(f.wall_minutes for f in figures)
    return (
        statistics.median(walls),
        walls[min(len(walls) - 1, math.ceil(0.9 * len(walls)) - 1)],
        statistics.median(f.total for f in figures),
        statistics.median(f.floor_minutes for f in figures),
    )


def _lognormal(rng: random.Random, mean: float, sigma: float) -> float:
    mu = math.log(mean) - sigma**2 / 2
    return rng.lognormvariate(mu, sigma)


@dataclass
class BuildFigures:
    wall_minutes: float
    task_hours: float
    usd: float


def build_phase(
    s: Scenario,
    mirrors: Sequence[str],
    envs: Sequence[str],
    prepares: Sequence[Sequence[str]],
    concurrency: int,
) -> BuildFigures:
    """The build phase's two Maps: ``mirrors`` and ``envs`` (a repository per task), then
    ``prepares`` (a repository per instance of each task), on ``concurrency`` Spot tasks.
    An upper bound: an environment's build is taken as its instance's whole cold build,
    and so is each prepared workspace."""
    fallback = statistics.median(COLD_BUILD.values())
    first = [s.task_start_seconds + MIRROR_BUILD_SECONDS for _ in mirrors]
    first += [s.task_start_seconds + COLD_BUILD.get(r, fallback) for r in envs]
    second = [s.task_start_seconds + sum(COLD_BUILD.get(r, fallback) for r in p) for p in prepares]
    seconds = sum(first) + sum(second)
    wall = _makespan(sorted(first, reverse=True), concurrency) if first else 0.0
    wall += _makespan(sorted(second, reverse=True), concurrency) if second else 0.0
    usd = seconds / 3600 * _hourly(s, s.build_vcpu, s.build_memory_gb, True)
    return BuildFigures(wall / 60, seconds / 3600, usd)


def one_time_build(s: Scenario) -> tuple[float, float, float]:
    """The build phase on a cold artifact store for Verified: (task-hours, USD, artifact
    GB stored)."""
    fallback = statistics.median(COLD_BUILD.values())
    seconds = sum(COLD_BUILD.get(r, fallback) + s.task_start_seconds for r in verified_rows(s))
    hours = seconds / 3600  # an upper bound: an environment is built once, not per row
    usd = hours * _hourly(s, s.build_vcpu, s.build_memory_gb, s.spot)
    stored_gb = (VERIFIED_ENVIRONMENTS * 120 + s.rows * 30 + 12 * 150) / 1000
    return hours, usd, stored_gb


def idle_costs(prices: dict[str, float] | None = None) -> list[tuple[str, str, float]]:
    """A deployed stack's standing cost per month while no run runs: (what, how many,
    USD) per item, us-east-1 list prices, no free tier."""
    p = prices or PRICES
    minutes = 730 * 60
    watch = (
        minutes * (WATCH_IDLE_SECONDS * 0.5 * p["lambda_gb_second"] + p["lambda_request"])
        + minutes * 1 / 1024 / 1024 * p["logs_ingest_gb"]
    )
    return [
        (
            "interface endpoints (ECR API, ECR Docker, Logs): made by each run, deleted "
            "the first minute no run runs",
            str(IDLE["interface_endpoints"]),
            IDLE["interface_endpoints"] * p["endpoint_hour"] * 730,
        ),
        (
            "KMS key of the alarm topic (CloudWatch publishes only under a customer key)",
            str(IDLE["kms_keys"]),
            IDLE["kms_keys"] * p["kms_key_month"],
        ),
        (
            f"CloudWatch alarms ({IDLE['alarms']}), billed per metric",
            str(IDLE["alarm_metrics"]),
            IDLE["alarm_metrics"] * p["alarm_metric_month"],
        ),
        (
            "custom metric published while idle (Watch's RowsWaiting)",
            str(IDLE["custom_metrics"]),
            IDLE["custom_metrics"] * p["custom_metric_month"],
        ),
        (
            "the sandbox image in ECR (compressed, assumed)",
            f"{IDLE['image_gb']:g} GB",
            IDLE["image_gb"] * p["ecr_gb_month"],
        ),
        (
            "Watch every minute (0.5 s at 512 MB, assumed) and its log lines",
            f"{minutes:,}",
            watch,
        ),
        (
            "artifacts in S3 (every Verified row's environment and prepared workspace)",
            f"{ARTIFACT_STORE_GB:g} GB",
            ARTIFACT_STORE_GB * p["s3_gb_month"],
        ),
        (
            "the dashboard: free among the account's first three (else $3; "
            "`swegreen:dashboard=false` removes it)",
            str(IDLE["dashboards"]),
            0.0,
        ),
        ("DynamoDB (on demand), other Lambdas, Step Functions, API Gateway", "idle", 0.0),
    ]


class Bound(BaseModel):
    """One set of assumptions' figures for a run."""

    wall_minutes: float
    usd: float
    build_minutes: float
    build_usd: float


class Estimate(BaseModel):
    """What Resolve tells a run before its rows start: its time and cost under both sets
    of assumptions, for the concurrency the account's quotas allow and the artifacts the
    bucket lacks; and what a larger quota would give."""

    rows: int
    concurrency: int
    builds: int  # build-phase tasks (mirrors and environments) the bucket lacks
    prepares: int  # prepare tasks
    optimistic: Bound
    pessimistic: Bound
    note: str
    # The quota increases that would give ``wanted`` rows at a time, as commands, and the
    # run's wall minutes (optimistic, pessimistic) with them: "" and None when it has them.
    raise_quota: str = ""
    wanted: int | None = None
    wanted_minutes: tuple[float, float] | None = None


def estimate(
    repos: Sequence[str],
    *,
    concurrency: int,
    asked_concurrency: int,
    build_concurrency: int,
    mirrors: Sequence[str] = (),
    envs: Sequence[str] = (),
    prepares: Sequence[Sequence[str]] = (),
    participant_minutes: float = 0.0,
    vcpu: float = 2.0,
    region: str = "us-east-1",
    max_batch_rows: int = 1,
    wanted: int | None = None,
    raise_quota: Sequence[str] | None = None,
) -> Estimate:
    """The estimate for a run of ``repos`` (one per row, in the Map's order). ``wanted``
    rows at a time (default: as asked) and ``raise_quota``, the increases they need (from
    the account's quotas: quotas.requests; default: Fargate's, when the concurrency is
    below what was asked): what the estimate offers beside its own figures."""
    bounds: dict[str, Bound] = {}
    base: dict[str, object] = {
        "concurrency": concurrency,
        "rows": len(repos),
        "vcpu": vcpu,
        "participant_minutes": participant_minutes,
        "max_batch_rows": max_batch_rows,
    }
    wanted = asked_concurrency if wanted is None else wanted
    if raise_quota is None:
        raise_quota = (
            quotas.requests(wanted, vcpu, "not read", None, region)[:2]
            if concurrency < wanted
            else []
        )
    faster: list[float] = []
    for name in ASSUMPTIONS:
        s = Scenario(**with_assumptions(name, base))  # type: ignore[arg-type]
        rows = simulate(s, repos) if repos else None
        if raise_quota and repos and wanted > concurrency:
            faster.append(round(simulate(replace(s, concurrency=wanted), repos).wall_minutes, 1))
        build = build_phase(s, mirrors, envs, prepares, build_concurrency)
        bounds[name] = Bound(
            wall_minutes=round((rows.wall_minutes if rows else 0.0) + build.wall_minutes, 1),
            usd=round((rows.total if rows else 0.0) + build.usd, 2),
            build_minutes=round(build.wall_minutes, 1),
            build_usd=round(build.usd, 2),
        )
    note = (
        f"{len(repos)} rows, {concurrency} at a time; the build phase first: "
        f"{len(mirrors) + len(envs)} builds and {len(prepares)} prepare tasks "
        "(the artifacts the bucket lacks). A model, not a bill: us-east-1 list prices, "
        "figures measured on 2 cores (docs/aws-cost.md)."
    )
    return Estimate(
        rows=len(repos),
        concurrency=concurrency,
        builds=len(mirrors) + len(envs),
        prepares=len(prepares),
        optimistic=bounds["optimistic"],
        pessimistic=bounds["pessimistic"],
        note=note,
        raise_quota=(
            f"{wanted} rows at a time need: " + "; ".join(raise_quota) if raise_quota else ""
        ),
        wanted=wanted if raise_quota else None,
        wanted_minutes=(faster[0], faster[1]) if len(faster) == 2 else None,
    )


def account_capacity(
    fargate: quotas.FargateQuotas | str,
    lambda_limit: int | str | None,
    *,
    region: str,
    vcpu: float = 2.0,
    wanted: int = quotas.FAST_ROWS,
    build_vcpu: float = 4.0,
    max_batch_rows: int = 1,
) -> list[str]:
    """What an account's quotas give a 500-row Verified run, in lines to print (the
    preflight): the quotas, the rows at a time they fit, the warm run's time at that and
    at ``wanted``, and the requests that would give ``wanted``."""
    capacity = quotas.fit(None, 50, fargate, vcpu, build_vcpu, ceiling=10_000,
                          lambda_limit=lambda_limit)  # fmt: skip
    # unread quotas (no permission, a new region) are asked for as a new account's
    advice = quotas.requests(wanted, vcpu, fargate, lambda_limit, region, assume_new=True)
    lines = [
        f"Fargate vCPU quotas: {_quota_text(fargate)}",
        f"Lambda unreserved concurrency: {lambda_limit if lambda_limit is not None else '?'}",
    ]
    if isinstance(fargate, str):
        lines.append(
            "rows at a time: not known (give max_concurrent_rows); a new account has "
            "about 6 + 6 Fargate vCPUs (3 + 3 tasks of 2 vCPU) and 10 Lambda executions"
        )
    else:
        if capacity.rows >= wanted:
            advice = []
        now = estimate(
            verified_rows(Scenario()), concurrency=capacity.rows,
            asked_concurrency=capacity.rows, build_concurrency=capacity.builds, vcpu=vcpu,
            region=region, max_batch_rows=max_batch_rows, wanted=wanted, raise_quota=advice,
        )  # fmt: skip
        lines.append(
            f"rows at a time: {capacity.rows} ({capacity.note}); 500 warm Verified rows: "
            f"{now.optimistic.wall_minutes:g}-{now.pessimistic.wall_minutes:g} min"
        )
        if now.wanted_minutes is not None:
            fast, slow = now.wanted_minutes
            lines.append(f"at {wanted} rows at a time: {fast:g}-{slow:g} min")
    if advice:
        lines.append(f"to run {wanted} rows at a time, ask AWS (approval takes hours to days):")
        lines += [f"  {command}" for command in advice]
    return lines


def _quota_text(fargate: quotas.FargateQuotas | str) -> str:
    if isinstance(fargate, str):
        return f"unread ({fargate})"
    return f"Spot {fargate.spot_vcpu:g}, on-demand {fargate.on_demand_vcpu:g}"
