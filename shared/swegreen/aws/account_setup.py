"""What a stack needs of its account before its own resources can be made, made or
found at deploy time (the AccountSetup custom resource, functions/setup.py) rather than
left to a step a user may skip:

- ECS's service-linked role: a first cluster with capacity providers fails "Unable to
  assume the service linked role" and rolls the stack back when the account has none;
- the region's S3 prefix list (``com.amazonaws.<region>.s3``): the closed rows' only
  egress, so that their HTTPS reaches S3's addresses and nothing else.

``scripts/aws_preflight.py`` uses the same check before a deploy.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

ECS_ROLE = "AWSServiceRoleForECS"
ECS_SERVICE = "ecs.amazonaws.com"
ECS_PATH = f"/aws-service-role/{ECS_SERVICE}/"


def ecs_role(iam: Any, make: bool) -> str:
    """``exists``, ``made`` or ``missing`` (when not ``make``): ECS's service-linked role.
    Made with ``make``: the one write is the create, and it says if the role was there."""
    try:
        iam.get_role(RoleName=ECS_ROLE)
        return "exists"
    except ClientError as exc:
        if _code(exc) != "NoSuchEntity":
            raise
    if not make:  # a check by the role's path too (the preflight's own credentials)
        return "exists" if iam.list_roles(PathPrefix=ECS_PATH).get("Roles") else "missing"
    try:
        made = iam.create_service_linked_role(AWSServiceName=ECS_SERVICE)
    except ClientError as exc:  # there already, or made meanwhile by someone else: as good
        if _code(exc) == "EntityAlreadyExists" or "has been taken" in str(exc):
            return "exists"
        raise
    wait_until_usable(iam, str(made.get("Role", {}).get("RoleName") or ECS_ROLE))
    return "made"


# A role made seconds ago is often not yet one ECS can assume: the capacity providers'
# association fails "Unable to assume the service linked role" and the stack rolls back.
# IAM is eventually consistent: the role is waited for until IAM has shown it
# ``ROLE_SEEN_TIMES`` times in a row, then ``ROLE_SETTLE_SECONDS`` more (what a new role
# takes to reach the other services), ``ROLE_WAIT_SECONDS`` in all at the most.
ROLE_SEEN_TIMES = 3
ROLE_POLL_SECONDS = 5.0
ROLE_SETTLE_SECONDS = 20.0
ROLE_WAIT_SECONDS = 240.0
_sleep, _clock = time.sleep, time.monotonic


def wait_until_usable(
    iam: Any,
    name: str = ECS_ROLE,
    sleep: Callable[[float], None] | None = None,
    clock: Callable[[], float] | None = None,
) -> None:
    """Return once ECS's new service-linked role (``name``, as IAM made it) has had time
    to be usable; raise, saying what to do, when IAM does not show it within
    ``ROLE_WAIT_SECONDS`` (``sleep``, ``clock``: ``_sleep``, ``_clock``, read when called)."""
    sleep, clock = sleep or _sleep, clock or _clock
    deadline = clock() + ROLE_WAIT_SECONDS
    seen = 0
    while seen < ROLE_SEEN_TIMES:
        if clock() > deadline:
            raise TimeoutError(
                f"ECS's service-linked role {ECS_ROLE} was made, but IAM did not show it "
                f"within {ROLE_WAIT_SECONDS:g} s; deploy again (it is made now), or run "
                "scripts/aws_preflight.py first"
            )
        try:
            iam.get_role(RoleName=name)
            seen += 1
        except ClientError as exc:
            if _code(exc) != "NoSuchEntity":
                raise
            seen = 0
        sleep(ROLE_POLL_SECONDS)
    sleep(ROLE_SETTLE_SECONDS)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def s3_prefix_list(ec2: Any, region: str) -> str:
    """The id of the region's AWS-managed S3 prefix list."""
    name = f"com.amazonaws.{region}.s3"
    found = ec2.describe_managed_prefix_lists(
        Filters=[{"Name": "prefix-list-name", "Values": [name]}]
    )["PrefixLists"]
    if not found:
        raise LookupError(
            f"{region} has no managed prefix list {name}: give one with "
            "-c swegreen:s3_prefix_list_id=pl-..."
        )
    return str(found[0]["PrefixListId"])


def prepare(iam: Any, ec2: Any, region: str, given_prefix_list: str = "") -> dict[str, str]:
    """The custom resource's Create and Update: its attributes."""
    return {
        "EcsRole": ecs_role(iam, make=True),
        "S3PrefixListId": given_prefix_list or s3_prefix_list(ec2, region),
    }


def answer(event: dict[str, Any], ok: bool, data: dict[str, str], reason: str = "") -> None:
    """CloudFormation's answer, to the pre-signed URL it gave (the custom resource
    protocol): a stack waits for it, up to an hour, so every path ends here."""
    body = json.dumps(
        {
            "Status": "SUCCESS" if ok else "FAILED",
            "Reason": (reason or "see the function's log")[:1000],
            # one physical resource: an Update never replaces it, a Delete does nothing
            "PhysicalResourceId": event.get("PhysicalResourceId") or "swegreen-account-setup",
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "Data": data,
        }
    ).encode()
    request = urllib.request.Request(
        event["ResponseURL"],
        data=body,
        method="PUT",
        headers={"Content-Type": "", "Content-Length": str(len(body))},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
