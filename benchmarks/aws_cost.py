"""docs/aws.md's cost and wall-time tables: the model of swegreen/aws/cost_model.py (its
inputs, measured and assumed, are described there) over Verified's 500 rows in several
scenarios, under both sets of assumptions.

    python benchmarks/aws_cost.py                          # the docs' scenarios
    python benchmarks/aws_cost.py --concurrency 100 --task-start-seconds 60

Prints markdown tables (docs/aws.md keeps the latest, with the date).
"""

from __future__ import annotations

import argparse

from swegreen.aws.cost_model import (
    ARTIFACT_MB,
    ASSUMPTIONS,
    ENDPOINT_AZS,
    OPEN_SHARE,
    PRICES,
    UNPACK_SECONDS,
    Scenario,
    idle_costs,
    one_time_build,
    simulate,
    spread,
    with_assumptions,
)
from swegreen.aws.pipeline.models import MAX_BATCH_ROWS

# Patches known up front run in batches (Resolve's default; one task per row when the
# request says "batch": false); an A2A participant's rows one task each.
B = {"max_batch_rows": MAX_BATCH_ROWS}
SCENARIOS = [
    ("predictions, 50 at a time", {"concurrency": 50, **B}),
    ("predictions, 100 at a time", {"concurrency": 100, **B}),
    ("predictions, 200 at a time", {"concurrency": 200, **B}),
    # the closed rows' endpoints already up (a campaign: swegreen:endpoint_lease_minutes,
    # or swegreen:standing_endpoints): no 2-minute wait before the rows
    (
        "predictions, 100 at a time, endpoints standing",
        {"concurrency": 100, "endpoint_wait_seconds": 0, **B},
    ),
    (
        "predictions, 200 at a time, endpoints standing",
        {"concurrency": 200, "endpoint_wait_seconds": 0, **B},
    ),
    # a new account's quotas (6 + 6 Fargate vCPUs: quotas.py) fit 6 tasks of 2 vCPU
    ("predictions, 6 at a time (a new account's quotas)", {"concurrency": 6, **B}),
    ("predictions, 100 at a time, a task per row", {"concurrency": 100}),
    (
        "predictions, 100 at a time, a task per row, in the dataset's order",
        {"concurrency": 100, "longest_first": False},
    ),
    ("predictions, 100 at a time, on demand only", {"concurrency": 100, "spot": False, **B}),
    (
        "predictions, 100 at a time, 4 vCPU / 16 GB",
        {"concurrency": 100, "vcpu": 4, "memory_gb": 16, **B},
    ),
    ("A2A agent (10 min per row), 100 at a time", {"concurrency": 100, "participant_minutes": 10}),
    ("A2A agent (10 min per row), 10 at a time", {"concurrency": 10, "participant_minutes": 10}),
]


def table(base: dict[str, object], scenarios: list[tuple[str, dict]]) -> str:
    lines = [
        "| scenario | wall time | wall, median / p90 of 40 runs "
        "| floor: one start + the slowest row (median) | median row | task-hours "
        "| Fargate | Lambda | Step Functions | DynamoDB + S3 + Logs + IPv4 + endpoints "
        "| total per run |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, extra in scenarios:
        scenario = Scenario(**{**base, **extra})  # type: ignore[arg-type]
        f = simulate(scenario)
        median, p90, _, floor = spread(scenario)
        c = f.cost
        small = c["DynamoDB"] + c["S3"] + c["CloudWatch Logs"] + c["Public IPv4"]
        small += c["VPC endpoints"]
        lines.append(
            f"| {label} | {f.wall_minutes:.1f} min | {median:.1f} / {p90:.1f} min "
            f"| {floor:.1f} min "
            f"| {f.row_seconds_median:.0f} s "
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
                {
                    "concurrency": args.concurrency,
                    "participant_minutes": args.participant_minutes,
                    **B,
                },
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
    items = idle_costs(prices)
    print("Standing cost of a deployed stack while no run runs (list prices, us-east-1):\n")
    print("| what | count | per month |\n|---|---:|---:|")
    for what, count, usd in items:
        print(f"| {what} | {count} | ${usd:.2f} |")
    print(f"| **total** | | **${sum(u for _, _, u in items):.2f}** |\n")
    print(
        f"The interface endpoints' hours are a run's own ({ENDPOINT_AZS // 2} endpoints in 2 "
        f"availability zones, ${ENDPOINT_AZS * prices['endpoint_hour']:.2f} an hour while "
        "it runs, in its figures above). Kept up for a campaign of runs (a lease after "
        "each run, swegreen:endpoint_lease_minutes, or swegreen:standing_endpoints) they "
        f"cost ${ENDPOINT_AZS * prices['endpoint_hour']:.2f} an hour "
        f"(${ENDPOINT_AZS * prices['endpoint_hour'] * 730:.0f} a month) and save each run "
        "the 2 minutes of making them (the 'endpoints standing' rows).\n"
    )


if __name__ == "__main__":
    main()
