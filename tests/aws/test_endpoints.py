"""The closed rows' interface endpoints, made per run and deleted when no run runs
(swegreen.aws.endpoints), against moto's EC2."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from swegreen.aws import endpoints
from swegreen.aws.endpoints import EndpointSpec


@pytest.fixture
def ec2() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client(
            "ec2",
            region_name="eu-west-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )


def _spec(ec2: Any, owner: str = "SweGreen") -> EndpointSpec:
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName=owner, Description="x", VpcId=vpc)["GroupId"]
    return EndpointSpec(
        vpc_id=vpc,
        subnet_ids=[subnet],
        security_group_id=group,
        owner=owner,
        region="eu-west-1",
    )


def _live(ec2: Any) -> dict[str, str]:
    listed = ec2.describe_vpc_endpoints()["VpcEndpoints"]
    return {e["VpcEndpointId"]: e["ServiceName"] for e in listed if e["State"].lower() != "deleted"}


def test_a_run_makes_the_three_endpoints_once_and_waits_for_them(ec2: Any) -> None:
    spec = _spec(ec2)
    out = endpoints.ensure(ec2, spec, sleep=lambda s: None)
    assert out["ready"] is True
    assert sorted(out["made"]) == sorted(spec.service_names())
    made = _live(ec2)
    assert sorted(made.values()) == [
        "com.amazonaws.eu-west-1.ecr.api",
        "com.amazonaws.eu-west-1.ecr.dkr",
        "com.amazonaws.eu-west-1.logs",
    ]
    (endpoint, *_) = ec2.describe_vpc_endpoints()["VpcEndpoints"]
    assert endpoint["PrivateDnsEnabled"] is True
    assert endpoint["Groups"][0]["GroupId"] == spec.security_group_id
    # a second run (or a retried step) makes nothing more
    again = endpoints.ensure(ec2, spec, sleep=lambda s: None)
    assert again == {"ready": True, "made": []}
    assert _live(ec2) == made


def test_endpoints_that_never_come_up_are_reported_not_raised(ec2: Any) -> None:
    spec = _spec(ec2)
    broken = spec.model_copy(update={"subnet_ids": ["subnet-missing"]})
    ticks = iter(range(100))
    out = endpoints.ensure(
        ec2, broken, wait_seconds=3, sleep=lambda s: None, clock=lambda: float(next(ticks))
    )
    assert out["ready"] is False and out["problem"]


def test_they_go_when_no_run_runs_and_only_this_stacks(ec2: Any) -> None:
    spec = _spec(ec2)
    other = _spec(ec2, owner="OtherStack")
    endpoints.ensure(ec2, spec, sleep=lambda s: None)
    endpoints.ensure(ec2, other, sleep=lambda s: None)
    assert len(_live(ec2)) == 6
    assert endpoints.reap(ec2, spec, running=True) == []
    assert len(_live(ec2)) == 6
    deleted = endpoints.reap(ec2, spec, running=False)
    assert len(deleted) == 3
    left = _live(ec2)
    assert len(left) == 3 and not set(deleted) & set(left)
    assert endpoints.reap(ec2, spec, running=False) == []
