"""Fitting a run's concurrency to the account's Fargate vCPU quotas (Resolve)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from swegreen.aws.quotas import FargateQuotas, fit, read_quotas


@pytest.fixture
def service_quotas() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client(
            "service-quotas",
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )


def test_a_new_accounts_quotas_cap_both_maps_and_say_so() -> None:
    new_account = FargateQuotas(on_demand_vcpu=6, spot_vcpu=6)
    capacity = fit(100, 50, new_account, row_vcpu=2, build_vcpu=4)
    assert (capacity.rows, capacity.builds) == (6, 2)  # 3 + 3 evaluate, 1 + 1 build tasks
    assert "rows 100 -> 6 tasks of 2 vCPU" in capacity.note
    assert "builds 50 -> 2 tasks of 4 vCPU" in capacity.note
    roomy = fit(10, 5, FargateQuotas(on_demand_vcpu=4000, spot_vcpu=4000), 2, 4)
    assert (roomy.rows, roomy.builds) == (10, 5) and roomy.note.startswith("within")
    # a quota smaller than one task still lets one run (its RunTask will say why not)
    tiny = fit(4, 4, FargateQuotas(on_demand_vcpu=1, spot_vcpu=0), 2, 4)
    assert (tiny.rows, tiny.builds) == (1, 1)


def test_unreadable_quotas_leave_the_run_as_asked(service_quotas: Any) -> None:
    # moto's Service Quotas knows no Fargate quotas: the same answer as a denied read
    quotas = read_quotas(service_quotas)
    assert isinstance(quotas, str) and "L-3032A538 unreadable" in quotas
    capacity = fit(100, 50, quotas, 2, 4)
    assert (capacity.rows, capacity.builds) == (100, 50)
    assert capacity.note.startswith("not capped (Service Quotas")


def test_a_run_that_names_no_concurrency_gets_what_the_quotas_fit() -> None:
    """On AWS a forgotten max_concurrent_rows would make a 500-row run take 500 row-times:
    unset, a run gets as many rows at once as the account's quotas fit (at most the
    deployment's ceiling), and one only where the quotas are unknown, saying so."""
    quotas = FargateQuotas(on_demand_vcpu=100, spot_vcpu=100)
    capacity = fit(None, 50, quotas, row_vcpu=2, build_vcpu=4, ceiling=200)
    assert capacity.rows == 100 and capacity.note.startswith("no max_concurrent_rows asked: 100")
    assert fit(None, 50, quotas, 2, 4, ceiling=30).rows == 30
    unknown = fit(None, 50, "Service Quotas L-3032A538 unreadable: denied", 2, 4, ceiling=200)
    assert unknown.rows == 1 and "give max_concurrent_rows" in unknown.note
    assert fit(5, 50, quotas, 2, 4, ceiling=200).rows == 5  # asked: as asked, within quotas


def test_runs_running_share_the_quotas_and_lambda_caps_the_rows_in_flight(
    service_quotas: Any,
) -> None:
    """A second run beside one holding 40 rows gets what is left of the vCPUs, not all of
    them; an account with 10 unreserved Lambda executions (a new one's) caps the rows in
    flight, less the headroom and the rows of the runs running."""
    from swegreen.aws.quotas import LAMBDA_HEADROOM, ROWS_PER_LAMBDA, read_lambda_limit

    quotas = FargateQuotas(on_demand_vcpu=100, spot_vcpu=100)  # 100 tasks of 2 vCPU
    alone = fit(None, 4, quotas, 2, 4, ceiling=200)
    beside = fit(None, 4, quotas, 2, 4, ceiling=200, in_use=40)
    assert (alone.rows, beside.rows) == (100, 60)
    assert "less 80 vCPUs the runs running hold" in beside.note
    # a run beside it in its build phase: 20 build tasks of 4 vCPU, not its 3 rows' 6
    building = fit(None, 4, quotas, 2, 4, ceiling=200, in_use=3, in_use_vcpu=80)
    assert building.rows == 60
    # a row holds a function only for its Dispatch, Presign and Classify: 10 rows an
    # execution, so a new account's 10 serve 70 rows, not 7
    assert fit(50, 4, quotas, 2, 4, ceiling=200, lambda_limit=10).rows == 50
    capped = fit(100, 4, quotas, 2, 4, ceiling=200, lambda_limit=10)
    assert capped.rows == (10 - LAMBDA_HEADROOM) * ROWS_PER_LAMBDA == 70
    assert "Lambda concurrency (10 unreserved" in capped.note
    beside_lambda = fit(100, 4, quotas, 2, 4, ceiling=200, lambda_limit=10, in_use=30)
    assert beside_lambda.rows == 40  # 70 less the 30 rows the other runs hold
    both = fit(50, 4, quotas, 2, 4, ceiling=200, lambda_limit=1000, in_use=40)
    assert both.rows == 50  # 60 tasks left, 957 executions: as asked
    # moto answers with its own account's settings: read as the limit they give
    client = boto3.client(
        "lambda", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
    )
    limit = read_lambda_limit(client)
    assert isinstance(limit, (int, str))


def test_a_new_account_is_told_what_it_gets_and_the_requests_for_the_fast_run() -> None:
    """What the preflight prints (and a dry run records): a new account's 6 + 6 vCPUs and
    10 Lambda executions fit 6 rows, 78-100 minutes for 500 warm rows; the three requests
    (Spot, on-demand, Lambda) that give 100 at a time, about 15 minutes; and none once the
    account has them."""
    from swegreen.aws.cost_model import account_capacity
    from swegreen.aws.quotas import requests

    new = FargateQuotas(on_demand_vcpu=6, spot_vcpu=6)
    lines = account_capacity(new, 10, region="eu-west-1", max_batch_rows=8)
    said = "\n".join(lines)
    assert "rows at a time: 6 " in said and "at 100 rows at a time: " in said
    slow = float(said.split("500 warm Verified rows: ")[1].split("-")[1].split(" ")[0])
    fast = float(said.split("at 100 rows at a time: ")[1].split("-")[1].split(" ")[0])
    assert slow > 5 * fast, said
    asks = requests(100, 2, new, 10, "eu-west-1")
    assert [a.split("--quota-code ")[1] for a in asks] == [
        "L-36FBB829 --desired-value 200",
        "L-3032A538 --desired-value 200",
        "L-B99A9384 --desired-value 1000",
    ]
    assert all(f"  {a}" in lines for a in asks)
    raised = FargateQuotas(on_demand_vcpu=200, spot_vcpu=200)
    assert requests(100, 2, raised, 1000, "eu-west-1") == []
    assert requests(100, 2, raised, 10, "eu-west-1") == [asks[2]]  # Lambda's alone
    # Lambda's limit unread (Resolve: no advice on a guess; the preflight: a new account's)
    assert requests(100, 2, raised, "unreadable", "eu-west-1") == []
    assert requests(100, 2, raised, "unreadable", "eu-west-1", assume_new=True) == [asks[2]]
    done = "\n".join(account_capacity(raised, 1000, region="eu-west-1", max_batch_rows=8))
    assert "ask AWS" not in done and "rows at a time: 200" in done
