"""The closed rows' interface endpoints, made per run and deleted when no run runs
(swegreen.aws.endpoints), against moto's EC2."""

from __future__ import annotations

import time
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
    out = endpoints.ensure(ec2, spec, sleep=lambda s: None, settle_seconds=0)
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
    again = endpoints.ensure(ec2, spec, sleep=lambda s: None, settle_seconds=0)
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
    endpoints.ensure(ec2, spec, sleep=lambda s: None, settle_seconds=0)
    endpoints.ensure(ec2, other, sleep=lambda s: None, settle_seconds=0)
    assert len(_live(ec2)) == 6
    later = time.time() + spec.lease_seconds  # the last run's lease has run out
    assert endpoints.reap(ec2, spec, running=True, now=later) == []
    assert len(_live(ec2)) == 6
    deleted = endpoints.reap(ec2, spec, running=False, now=later)
    assert len(deleted) == 3
    left = _live(ec2)
    assert len(left) == 3 and not set(deleted) & set(left)
    assert endpoints.reap(ec2, spec, running=False, now=later) == []


def test_a_run_s_lease_keeps_them_for_the_next_run(ec2: Any) -> None:
    """Runs a minute apart: the reaper, with no run running, leaves endpoints a run took
    within the lease (the next run finds them up instead of waiting two minutes)."""
    spec = _spec(ec2)
    endpoints.ensure(ec2, spec, sleep=lambda s: None, settle_seconds=0)
    taken = {t["Value"] for e in endpoints.ours(ec2, spec) for t in e["Tags"]
             if t["Key"] == endpoints.LEASE_TAG}  # fmt: skip
    assert len(taken) == 1 and abs(float(taken.pop()) - time.time()) < 60
    assert endpoints.reap(ec2, spec, running=False, now=time.time() + 60) == []
    assert len(_live(ec2)) == 3


def test_a_run_whose_endpoints_a_reaper_deleted_meanwhile_makes_them_again(ec2: Any) -> None:
    """The race a lease alone leaves: a reaper listed the endpoints (lease run out) just
    before a new run stamped them, and deletes them just after they were seen up. The run
    looks again after the settle time, finds them gone, and makes them again."""
    spec = _spec(ec2)
    endpoints.ensure(ec2, spec, sleep=lambda s: None, settle_seconds=0)
    first = set(_live(ec2))
    ticks = iter(float(n) for n in range(10_000))
    reaped: list[str] = []

    def sleep(_: float) -> None:  # the reaper strikes while the run waits to look again
        if not reaped:
            reaped.extend(endpoints.reap(ec2, spec, running=False, now=time.time() + 10**6))

    out = endpoints.ensure(
        ec2, spec, sleep=sleep, clock=lambda: next(ticks), settle_seconds=5, poll_seconds=1
    )
    assert sorted(reaped) == sorted(first)
    assert out["ready"] is True and sorted(out["made"]) == sorted(spec.service_names())
    assert len(_live(ec2)) == 3 and not set(_live(ec2)) & first


def _theirs(ec2: Any, spec: EndpointSpec, service: str = "ecr.api") -> tuple[str, str]:
    """An endpoint of the VPC's owner, private DNS on, in the owner's own group."""
    group = ec2.create_security_group(
        GroupName="owners-endpoints", Description="x", VpcId=spec.vpc_id
    )["GroupId"]
    endpoint = ec2.create_vpc_endpoint(
        VpcEndpointType="Interface",
        VpcId=spec.vpc_id,
        ServiceName=f"com.amazonaws.eu-west-1.{service}",
        SubnetIds=spec.subnet_ids,
        SecurityGroupIds=[group],
        PrivateDnsEnabled=True,
    )["VpcEndpoint"]["VpcEndpointId"]
    return endpoint, group


def test_a_vpc_s_own_endpoints_in_a_group_the_rows_cannot_reach_stop_the_run_with_the_fix(
    ec2: Any,
) -> None:
    """An imported VPC that has its own ECR API endpoint with private DNS answers for the
    whole VPC: the closed rows would send to it, but their group reaches only the stack's
    endpoints' group, and every closed row would fail to pull its image. The run is told
    at once, with the setting to give, and nothing is made."""
    spec = _spec(ec2)
    endpoint, group = _theirs(ec2, spec)
    out = endpoints.ensure(ec2, spec, sleep=lambda s: None, settle_seconds=0)
    assert out["ready"] is False and out["unreachable"] is True, out
    assert endpoint in out["problem"] and group in out["problem"]
    assert f"swegreen:vpc_endpoint_security_group={group}" in out["problem"]
    assert out["made"] == [] and set(_live(ec2)) == {endpoint}


def test_a_vpc_with_its_own_endpoints_keeps_them_and_gets_none_of_ours_for_them(
    ec2: Any,
) -> None:
    """With their group given (swegreen:vpc_endpoint_security_group), or an endpoint in
    the stack's own endpoints' group: a second one with private DNS cannot be made; the
    run uses it and makes only the others; the reaper never touches it."""
    spec = _spec(ec2)
    theirs, group = _theirs(ec2, spec)
    spec = spec.model_copy(update={"shared_security_group_id": group})
    out = endpoints.ensure(ec2, spec, sleep=lambda s: None, settle_seconds=0)
    assert out["ready"] is True and out["shared"] == ["com.amazonaws.eu-west-1.ecr.api"]
    assert sorted(out["made"]) == [
        "com.amazonaws.eu-west-1.ecr.dkr",
        "com.amazonaws.eu-west-1.logs",
    ]
    deleted = endpoints.reap(ec2, spec, running=False, now=time.time() + 10**6)
    assert len(deleted) == 2 and theirs not in deleted and theirs in _live(ec2)
