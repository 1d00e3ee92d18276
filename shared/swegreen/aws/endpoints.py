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
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel

SERVICES = ("ecr.api", "ecr.dkr", "logs")
TAG = "swegreen:endpoints"
_LIVE = {"pendingacceptance", "pending", "available"}


class EndpointSpec(BaseModel):
    """Where the endpoints go (the stack's VPC, isolated subnets, endpoints' group)."""

    vpc_id: str
    subnet_ids: list[str]
    security_group_id: str
    owner: str  # the stack's name: the tag of the endpoints it makes
    region: str

    def service_names(self) -> list[str]:
        return [f"com.amazonaws.{self.region}.{s}" for s in SERVICES]


def ours(ec2: Any, spec: EndpointSpec) -> list[dict[str, Any]]:
    """This stack's endpoints that exist or are being made."""
    found: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        page = ec2.describe_vpc_endpoints(
            Filters=[{"Name": "vpc-id", "Values": [spec.vpc_id]}],
            **({"NextToken": token} if token else {}),
        )
        for endpoint in page.get("VpcEndpoints", []):
            tags = {t["Key"]: t["Value"] for t in endpoint.get("Tags", [])}
            if tags.get(TAG) == spec.owner and endpoint["State"].lower() in _LIVE:
                found.append(endpoint)
        token = page.get("NextToken")
        if not token:
            return found


def ensure(
    ec2: Any,
    spec: EndpointSpec,
    *,
    wait_seconds: float = 720.0,
    poll_seconds: float = 10.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Makes the endpoints that are missing and waits until all are available (about two
    minutes when they are new). Never raises for AWS's answers: a run whose endpoints did
    not come up still runs, and its closed rows say why they could not start."""
    deadline = clock() + wait_seconds
    made: list[str] = []
    problem = ""
    while True:
        try:
            have = {e["ServiceName"]: e for e in ours(ec2, spec)}
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
                                "Tags": [{"Key": TAG, "Value": spec.owner}],
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
                return {"ready": True, "made": made}
        except (BotoCoreError, ClientError) as exc:
            problem = str(exc)
        if clock() >= deadline:
            return {"ready": False, "made": made, "problem": problem[:500]}
        sleep(poll_seconds)


def reap(ec2: Any, spec: EndpointSpec, running: bool) -> list[str]:
    """Deletes this stack's endpoints unless a run is ``running``; their ids."""
    if running:
        return []
    ids = [e["VpcEndpointId"] for e in ours(ec2, spec)]
    if ids:
        ec2.delete_vpc_endpoints(VpcEndpointIds=ids)
    return ids


def any_running(sfn: Any, machine_arn: str) -> bool:
    """Whether an execution of the Pipeline machine is running."""
    page = sfn.list_executions(stateMachineArn=machine_arn, statusFilter="RUNNING", maxResults=1)
    return bool(page.get("executions"))
