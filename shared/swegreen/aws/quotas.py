"""How many Fargate tasks the account has room for, from its Service Quotas.

A new account's Fargate vCPU quotas can be as low as 6: with 2-vCPU tasks, 3 run at once
whatever ``max_concurrent_rows`` says, and every RunTask beyond them is refused. The
refused ones wait (``pipeline.task_retry``), but a Map asking for 100 at a time would
keep 97 rows waiting and the run's time limit would not foresee it, so Resolve caps both
Maps to what the quotas fit and says so in the run's provenance.
"""

from __future__ import annotations

import math
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel

SERVICE = "fargate"
# Service Quotas' codes (service "fargate"): vCPUs of running tasks, per region.
ON_DEMAND_VCPU = "L-3032A538"  # Fargate On-Demand vCPU resource count
SPOT_VCPU = "L-36FBB829"  # Fargate Spot vCPU resource count


class FargateQuotas(BaseModel):
    on_demand_vcpu: float
    spot_vcpu: float

    def tasks(self, task_vcpu: float) -> int:
        """Tasks of ``task_vcpu`` that fit at once: Spot first, then on-demand (the tasks'
        capacity order, infra/workflow.py)."""
        return math.floor(self.spot_vcpu / task_vcpu) + math.floor(self.on_demand_vcpu / task_vcpu)


def read_quotas(client: Any) -> FargateQuotas | str:
    """The account's Fargate vCPU quotas, or why they could not be read (the caps are then
    left as asked: a quota read is a courtesy, never a reason to refuse a run)."""
    values = {}
    for field, code in (("on_demand_vcpu", ON_DEMAND_VCPU), ("spot_vcpu", SPOT_VCPU)):
        try:
            answer = client.get_service_quota(ServiceCode=SERVICE, QuotaCode=code)
            values[field] = float(answer["Quota"]["Value"])
        except (BotoCoreError, ClientError, KeyError, TypeError, ValueError) as exc:
            return f"Service Quotas {code} unreadable: {type(exc).__name__}: {exc}"[:300]
    return FargateQuotas(**values)


# Lambda executions left for everything else than a run's rows: Watch, Resolve, the
# Stopped and Endpoints functions, another stack's functions in the account.
LAMBDA_HEADROOM = 3
# Rows in flight one unreserved Lambda execution serves. A row holds a function only while
# its Dispatch, Presign or Classify runs (about 3 s together: cost_model's
# lambda_seconds_per_row), and a row lasts a minute or more (its task's start alone is
# 30-60 s); rows on Fargate or waiting for a participant's callback hold none. A call
# throttled at a wave's start is retried (six tries over about two minutes with jitter:
# infra/states.py), so 10 rows a slot keeps throttles a burst, not a failure.
ROWS_PER_LAMBDA = 10
LAMBDA_SERVICE = "lambda"
LAMBDA_CONCURRENCY = "L-B99A9384"  # Lambda: Concurrent executions (the account's)
# The rows at once docs/aws.md's 500-row figures are for (about 14.5 minutes warm).
FAST_ROWS = 100


def read_lambda_limit(client: Any) -> int | str:
    """The account's unreserved Lambda concurrency (a new account's can be 10), or why
    it could not be read. A row runs one of the pipeline's functions for a few seconds
    of its minutes (``ROWS_PER_LAMBDA``): beyond that, starts are throttled and wait."""
    try:
        limits = client.get_account_settings()["AccountLimit"]
        return int(limits["UnreservedConcurrentExecutions"])
    except (BotoCoreError, ClientError, KeyError, TypeError, ValueError) as exc:
        return f"Lambda account settings unreadable: {type(exc).__name__}: {exc}"[:300]


class Capacity(BaseModel):
    """The concurrency a run gets, and why (the run's provenance records it)."""

    rows: int
    builds: int
    note: str
    quotas: FargateQuotas | None = None


def fit(
    rows: int | None,
    builds: int,
    quotas: FargateQuotas | str,
    row_vcpu: float,
    build_vcpu: float,
    ceiling: int = 1,
    lambda_limit: int | str | None = None,
    in_use: int = 0,
    in_use_vcpu: float | None = None,
) -> Capacity:
    """``rows`` and ``builds`` tasks at once, capped to what ``quotas`` fit. ``rows`` None
    (the request named no max_concurrent_rows): as many as the quotas fit, up to
    ``ceiling`` (the deployment's guardrail); one where the quotas are unknown (a run
    that forgot the setting would otherwise take 500 row-times). ``in_use``: the rows
    at once of the runs running beside this one, which share the account's quotas (each
    run claiming all of them made tasks wait past their deadline). ``lambda_limit``: the
    account's unreserved Lambda concurrency, which caps the rows in flight too.
    ``in_use_vcpu``: the Fargate vCPUs those runs hold, their build tasks included (a
    run in its build phase holds build tasks, not rows); default: their rows'."""
    held = in_use * row_vcpu if in_use_vcpu is None else in_use_vcpu
    capacity = _fit_fargate(rows, builds, quotas, row_vcpu, build_vcpu, ceiling, held)
    if not isinstance(lambda_limit, int):
        return capacity
    room = max(1, (lambda_limit - LAMBDA_HEADROOM) * ROWS_PER_LAMBDA - in_use)
    if capacity.rows <= room:
        return capacity
    return capacity.model_copy(
        update={
            "rows": room,
            "note": capacity.note
            + f"; rows {capacity.rows} -> {room} for the account's Lambda concurrency "
            f"({lambda_limit} unreserved, {LAMBDA_HEADROOM} kept for the others, "
            f"{ROWS_PER_LAMBDA} rows an execution"
            + (f", {in_use} rows of the runs running" if in_use else "")
            + "): ask AWS for more to run faster",
        }
    )


def lambda_needed(rows: int) -> int:
    """The unreserved Lambda concurrency ``rows`` at a time need (``fit``'s rule)."""
    return math.ceil(rows / ROWS_PER_LAMBDA) + LAMBDA_HEADROOM


def requests(
    rows: int,
    row_vcpu: float,
    quotas: FargateQuotas | str,
    lambda_limit: int | str | None,
    region: str,
    *,
    assume_new: bool = False,
) -> list[str]:
    """The quota increases that ``rows`` tasks at a time need, each as the command that
    asks for it; [] when the account has them. Fargate Spot and on-demand each for all
    the rows (Spot first, on-demand its fallback), asked for when unread too; Lambda's
    account concurrency where ``fit`` would cap them for it, and, ``assume_new``, where
    it could not be read (a new account's is 10)."""
    want_vcpu = math.ceil(rows * row_vcpu)
    have = quotas if isinstance(quotas, FargateQuotas) else None
    out = []
    for code, current in (
        (SPOT_VCPU, have.spot_vcpu if have else 0.0),
        (ON_DEMAND_VCPU, have.on_demand_vcpu if have else 0.0),
    ):
        if current < want_vcpu:
            out.append(_ask(region, SERVICE, code, want_vcpu))
    need = lambda_needed(rows)
    unread = not isinstance(lambda_limit, int)
    if (unread and assume_new) or (isinstance(lambda_limit, int) and lambda_limit < need):
        # Lambda's concurrency quota is the account's total; AWS's usual one is 1,000
        out.append(_ask(region, LAMBDA_SERVICE, LAMBDA_CONCURRENCY, max(need, 1000)))
    return out


def _ask(region: str, service: str, code: str, value: float) -> str:
    return (
        f"aws service-quotas request-service-quota-increase --region {region} "
        f"--service-code {service} --quota-code {code} --desired-value {value:g}"
    )


def _fit_fargate(
    rows: int | None,
    builds: int,
    quotas: FargateQuotas | str,
    row_vcpu: float,
    build_vcpu: float,
    ceiling: int,
    held: float,
) -> Capacity:
    if not isinstance(quotas, str) and held:
        # what the runs running beside this one hold, Spot first as theirs start
        spot = max(0.0, quotas.spot_vcpu - held)
        on_demand = max(0.0, quotas.on_demand_vcpu - max(0.0, held - quotas.spot_vcpu))
        left = FargateQuotas(on_demand_vcpu=on_demand, spot_vcpu=spot)
        capacity = _fit_fargate(rows, builds, left, row_vcpu, build_vcpu, ceiling, 0)
        return capacity.model_copy(
            update={
                "note": capacity.note + f" less {held:g} vCPUs the runs running hold",
                "quotas": quotas,
            }
        )
    if rows is None:
        if isinstance(quotas, str):
            return Capacity(
                rows=1,
                builds=builds,
                note=f"1 row at a time: no max_concurrent_rows asked and no quota to fit "
                f"({quotas}); give max_concurrent_rows",
            )
        fitted = max(1, min(ceiling, quotas.tasks(row_vcpu)))
        capacity = _fit_fargate(fitted, builds, quotas, row_vcpu, build_vcpu, ceiling, 0.0)
        return capacity.model_copy(
            update={"note": f"no max_concurrent_rows asked: {fitted}, " + capacity.note}
        )
    if isinstance(quotas, str):
        return Capacity(rows=rows, builds=builds, note=f"not capped ({quotas})")
    fit_rows = max(1, min(rows, quotas.tasks(row_vcpu)))
    fit_builds = max(1, min(builds, quotas.tasks(build_vcpu)))
    limits = (
        f"the account's Fargate vCPU quotas (Spot {quotas.spot_vcpu:g}, on-demand "
        f"{quotas.on_demand_vcpu:g})"
    )
    if (fit_rows, fit_builds) == (rows, builds):
        return Capacity(rows=rows, builds=builds, note=f"within {limits}", quotas=quotas)
    parts = []
    if fit_rows < rows:
        parts.append(f"rows {rows} -> {fit_rows} tasks of {row_vcpu:g} vCPU")
    if fit_builds < builds:
        parts.append(f"builds {builds} -> {fit_builds} tasks of {build_vcpu:g} vCPU")
    return Capacity(
        rows=fit_rows,
        builds=fit_builds,
        note=f"capped to {limits}: {'; '.join(parts)}; ask AWS for more to run faster",
        quotas=quotas,
    )
