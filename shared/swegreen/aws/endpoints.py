"""The closed rows' interface endpoints (ECR API, ECR Docker, CloudWatch Logs), made only
while a run is active.

They are what a deployed stack would otherwise pay for at rest: $0.01 an hour each per
availability zone, about $44 a month for three in two zones, runs or not. The Pipeline
makes them before its rows start (``ensure``, waiting until they answer) and Watch, every
minute, deletes them once no run is running (``reap``). Only the closed rows need them
(isolated subnets: no other way to pull their image or write their logs); the build tasks
and open rows reach ECR and Logs over the internet while they are absent.

Every endpoint made is tagged with the stack's name and only endpoints with that tag are
deleted: a VPC shared with other stacks keeps theirs.

A run and the reaper never race for them: each run's Endpoints step first stamps the
endpoints with the time it took them (``LEASE_TAG``, a lease of ``LEASE_SECONDS``), the
reaper deletes only endpoints whose lease has run out while no run runs, and a run
returns only once its endpoints were still there a while after they came up (a reaper
that had listed them just before the stamp deleted them then: they are made again). A
VPC that already has endpoints of these services with private DNS (another stack's, an
imported VPC's) gets none of its own for them: their private DNS answers for the whole
VPC, and a second endpoint with it cannot be made. The rows use them only where they may
reach them (their group is this stack's, or ``swegreen:vpc_endpoint_security_group``);
otherwise the run stops at once with the setting to give (``EndpointsUnreachable``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel

from swegreen.core.errors import SweGreenError

SERVICES = ("ecr.api", "ecr.dkr", "logs")
TAG = "swegreen:endpoints"
LEASE_TAG = "swegreen:endpoints-taken"  # epoch seconds of the last run's Endpoints step
# Between two runs a minute apart the endpoints stay (making them again takes two minutes)
LEASE_SECONDS = 600.0
# What a reaper takes from listing to deleting, at most: a run looks again after this long
SETTLE_SECONDS = 30.0
_LIVE = {"pendingacceptance", "pending", "available"}


class EndpointSpec(BaseModel):
    """Where the endpoints go (the stack's VPC, isolated subnets, endpoints' group)."""

    vpc_id: str
    subnet_ids: list[str]
    security_group_id: str
    # the imported VPC's own endpoints' group, which the rows may reach (empty: none)
    shared_security_group_id: str = ""
    owner: str  # the stack's name: the tag of the endpoints it makes
    region: str
    lease_seconds: float = LEASE_SECONDS
    settle_seconds: float = SETTLE_SECONDS

    def service_names(self) -> list[str]:
        return [f"com.amazonaws.{self.region}.{s}" for s in SERVICES]


def _live(ec2: Any, spec: EndpointSpec) -> list[dict[str, Any]]:
    """Every endpoint of the VPC that exists or is being made."""
    found: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        page = ec2.describe_vpc_endpoints(
            Filters=[{"Name": "vpc-id", "Values": [spec.vpc_id]}],
            **({"NextToken": token} if token else {}),
        )
        found += [e for e in page.get("VpcEndpoints", []) if e["State"].lower() in _LIVE]
        token = page.get("NextToken")
        if not token:
            return found


def _tags(endpoint: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in endpoint.get("Tags", [])}


def ours(ec2: Any, spec: EndpointSpec) -> list[dict[str, Any]]:
    """This stack's endpoints that exist or are being made."""
    return _split(_live(ec2, spec), spec)[0]


def _split(
    live: list[dict[str, Any]], spec: EndpointSpec
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The VPC's live endpoints as this stack's, and the others of these services with
    private DNS, which answer for the VPC already (service name -> endpoint)."""
    wanted = set(spec.service_names())
    mine = [e for e in live if _tags(e).get(TAG) == spec.owner]
    others = {
        e["ServiceName"]: e
        for e in live
        if _tags(e).get(TAG) != spec.owner
        and e["ServiceName"] in wanted
        and e.get("PrivateDnsEnabled")
    }
    return mine, others


class EndpointsUnreachable(SweGreenError):
    """The VPC's own endpoints answer for a service the closed rows need, in a security
    group they may not reach: every closed row would fail to pull its image."""


def unreachable(others: dict[str, dict[str, Any]], spec: EndpointSpec) -> str:
    """Why the closed rows cannot reach the VPC's own endpoints ``others`` (service name ->
    endpoint), or "" when each is in a group they may reach."""
    reachable = {spec.security_group_id, spec.shared_security_group_id} - {""}
    cut = {
        name: e
        for name, e in sorted(others.items())
        if not {g["GroupId"] for g in e.get("Groups", [])} & reachable
    }
    if not cut:
        return ""
    groups = sorted({g["GroupId"] for e in cut.values() for g in e.get("Groups", [])})
    named = ", ".join(
        f"{n.rsplit('.', 2)[-2]}.{n.rsplit('.', 1)[-1]} ({e['VpcEndpointId']})"
        for n, e in cut.items()
    )
    return (
        f"VPC {spec.vpc_id} has its own endpoints with private DNS for {named}, in security "
        f"group(s) {', '.join(groups) or '(none)'}, which the closed rows may not reach: every "
        "closed row would fail to pull its image. Deploy again with -c "
        f"swegreen:vpc_endpoint_security_group={groups[0] if groups else 'sg-...'} (the rows "
        "may then reach that group and it admits them; docs/aws-deploy.md, 'Your own VPC')"
    )


def _taken(endpoint: dict[str, Any]) -> float:
    """When a run last took ``endpoint`` (0: never stamped, or a stamp not ours)."""
    try:
        return float(_tags(endpoint).get(LEASE_TAG) or 0)
    except ValueError:
        return 0.0


def _stamp(ec2: Any, endpoints: list[dict[str, Any]], now: float) -> None:
    if endpoints:
        ec2.create_tags(
            Resources=[e["VpcEndpointId"] for e in endpoints],
            Tags=[{"Key": LEASE_TAG, "Value": str(int(now))}],
        )


def ensure(
    ec2: Any,
    spec: EndpointSpec,
    *,
    wait_seconds: float = 720.0,
    poll_seconds: float = 10.0,
    settle_seconds: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    now: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """Takes the endpoints (a fresh lease), makes those that are missing and waits until
    all are available (about two minutes when they are new), and until they are still
    there ``settle_seconds`` later. Never raises for AWS's answers: a run whose endpoints
    did not come up still runs, and its closed rows say why they could not start."""
    deadline = clock() + wait_seconds
    settle = spec.settle_seconds if settle_seconds is None else settle_seconds
    made: list[str] = []
    problem = ""
    settled_at: float | None = None  # when all were first seen available
    stamped: set[str] = set()  # endpoints this call has leased
    while True:
        try:
            mine, others = _split(_live(ec2, spec), spec)  # one listing a look
            cut = unreachable(others, spec)
            if cut:  # no wait makes them reachable: the owner's configuration must
                return {"ready": False, "made": made, "unreachable": True, "problem": cut}
            # the lease, once per endpoint (those this call makes carry it from the start)
            _stamp(ec2, [e for e in mine if e["VpcEndpointId"] not in stamped], now())
            stamped.update(e["VpcEndpointId"] for e in mine)
            have = {e["ServiceName"]: e for e in mine}
            have.update({n: e for n, e in others.items() if n not in have})
            for name in spec.service_names():
                if name in have:
                    continue
                try:
                    ec2.create_vpc_endpoint(
                        VpcEndpointType="Interface",
                        VpcId=spec.vpc_id,
                        ServiceName=name,
                        SubnetIds=spec.subnet_ids,
                        SecurityGroupIds=[spec.security_group_id],
                        PrivateDnsEnabled=True,
                        TagSpecifications=[
                            {
                                "ResourceType": "vpc-endpoint",
                                "Tags": [
                                    {"Key": TAG, "Value": spec.owner},
                                    {"Key": LEASE_TAG, "Value": str(int(now()))},
                                ],
                            }
                        ],
                    )
                    made.append(name)
                except ClientError as exc:
                    # a deleting endpoint still holds the private DNS name, or another run
                    # made it a moment ago: the next look sees it
                    problem = f"{name}: {exc}"
            states = {n: have[n]["State"].lower() for n in spec.service_names() if n in have}
            if len(states) == len(SERVICES) and set(states.values()) == {"available"}:
                if settled_at is None:  # look again after a reaper's listing-to-delete
                    settled_at = clock()
                elif clock() - settled_at >= settle:
                    out: dict[str, Any] = {"ready": True, "made": made}
                    if others:
                        out["shared"] = sorted(others)
                    return out
            else:
                settled_at = None  # one went (a reaper) or is not up yet: from the start
        except (BotoCoreError, ClientError) as exc:
            problem = str(exc)
        if clock() >= deadline:
            return {"ready": False, "made": made, "problem": problem[:500]}
        sleep(min(poll_seconds, settle) if settled_at is not None else poll_seconds)


def reap(
    ec2: Any,
    spec: EndpointSpec,
    running: bool,
    now: float | None = None,
) -> list[str]:
    """Deletes this stack's endpoints whose lease ran out, unless a run is ``running``;
    their ids. An endpoint with no lease stamp (made before leases) counts as expired."""
    if running:
        return []
    at = time.time() if now is None else now
    ids = [e["VpcEndpointId"] for e in ours(ec2, spec) if at - _taken(e) >= spec.lease_seconds]
    if ids:
        ec2.delete_vpc_endpoints(VpcEndpointIds=ids)
    return ids


def any_running(sfn: Any, machine_arn: str) -> bool:
    """Whether an execution of the Pipeline machine is running."""
    page = sfn.list_executions(stateMachineArn=machine_arn, statusFilter="RUNNING", maxResults=1)
    return bool(page.get("executions"))
