"""scripts/aws_preflight.py against moto's IAM and STS: ECS's service-linked role made
before a first deploy needs it (a first cluster with capacity providers fails without
it), checked without making it, and the region said with where it came from."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto import mock_aws

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "aws_preflight.py"


@pytest.fixture
def preflight(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    for name in ("AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "CDK_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    # a role made here is there at once (moto): no wait for IAM to show it
    from swegreen.aws import account_setup

    monkeypatch.setattr(account_setup, "_sleep", lambda seconds: None)
    spec = importlib.util.spec_from_file_location("aws_preflight", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["aws_preflight"] = module
    spec.loader.exec_module(module)
    with mock_aws():
        yield module
    sys.modules.pop("aws_preflight", None)


def iam() -> Any:
    return boto3.client("iam", region_name="us-east-1")


def test_the_ecs_role_is_made_once_and_only_checked_when_asked(preflight: ModuleType) -> None:
    assert preflight.ecs_role(iam(), make=False) == "missing"
    assert preflight.ecs_role(iam(), make=True) == "made"
    (role,) = iam().list_roles(PathPrefix="/aws-service-role/ecs.amazonaws.com/")["Roles"]
    assert "ecs.amazonaws.com" in str(role["AssumeRolePolicyDocument"])
    assert preflight.ecs_role(iam(), make=True) == "exists"


def test_the_region_and_where_it_came_from(
    preflight: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    session = boto3.Session()
    assert preflight.region_of(session, None)[0] is None
    assert preflight.region_of(session, "eu-west-3") == ("eu-west-3", "--region")
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    assert preflight.region_of(boto3.Session(), None) == ("eu-central-1", "AWS_REGION")
    code = preflight.main(["--check-only"])
    out = capsys.readouterr()
    assert "region: eu-central-1 (from AWS_REGION)" in out.out
    assert "credentials: arn:aws:" in out.out
    assert code == 1 and "ECS's service-linked role is missing" in out.err
    # the account's quotas (moto has no Fargate quotas: unread, as a denied read is) and
    # the requests that would give the 100-row run
    assert "Fargate vCPU quotas: unread" in out.out
    assert "--service-code fargate --quota-code L-36FBB829 --desired-value 200" in out.out
    assert "--service-code lambda --quota-code L-B99A9384" in out.out
    preflight.main([])  # makes it
    assert "ECS service-linked role AWSServiceRoleForECS: made" in capsys.readouterr().out
    preflight.main(["--check-only"])
    assert "AWSServiceRoleForECS: exists" in capsys.readouterr().out


def test_the_stack_s_account_setup_makes_the_role_finds_s3_and_answers_cloudformation(
    preflight: ModuleType,
) -> None:
    """What the AccountSetup custom resource does at deploy time (functions/setup.py):
    the role made (once), the region's S3 prefix list found (or the given one kept), and
    CloudFormation's answer PUT to its URL (a server on 127.0.0.1 here)."""
    import http.server
    import json

    from swegreen.aws import account_setup
    from tests.helpers import http_server

    ec2 = boto3.client("ec2", region_name="eu-west-3")
    found = account_setup.prepare(iam(), ec2, "eu-west-3")
    (listed,) = ec2.describe_managed_prefix_lists(
        Filters=[{"Name": "prefix-list-name", "Values": ["com.amazonaws.eu-west-3.s3"]}]
    )["PrefixLists"]
    assert found == {"EcsRole": "made", "S3PrefixListId": listed["PrefixListId"]}
    again = account_setup.prepare(iam(), ec2, "eu-west-3", "pl-0123abcd")
    assert again == {"EcsRole": "exists", "S3PrefixListId": "pl-0123abcd"}

    got: list[tuple[str, dict[str, Any]]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.path, json.loads(body)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    with http_server(Handler) as url:
        event = {
            "ResponseURL": f"{url}/answer?X-Amz-Signature=x",
            "StackId": "arn:aws:cloudformation:eu-west-3:1:stack/S/1",
            "RequestId": "r1",
            "LogicalResourceId": "AccountSetup",
        }
        account_setup.answer(event, True, found)
        account_setup.answer({**event, "PhysicalResourceId": "p"}, False, {}, "boom")
    (path, ok), (_, failed) = got
    assert path == "/answer?X-Amz-Signature=x"
    assert ok["Status"] == "SUCCESS" and ok["Data"] == found and ok["RequestId"] == "r1"
    assert (failed["Status"], failed["Reason"], failed["PhysicalResourceId"]) == (
        "FAILED",
        "boom",
        "p",
    )


def test_a_role_just_made_is_waited_for_until_iam_shows_it_and_then_some(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A service-linked role made seconds ago is often not yet usable (the first deploy's
    capacity providers then roll the stack back): made, it is waited for until IAM has
    shown it three times in a row, then a settle; past the bound, a clear failure."""
    from botocore.exceptions import ClientError

    from swegreen.aws import account_setup as setup

    class LateIam:
        def __init__(self, hidden: int) -> None:
            self.hidden, self.made = hidden, False

        def get_role(self, RoleName: str) -> dict[str, Any]:
            if not self.made or self.hidden > 0:
                self.hidden -= self.made
                raise ClientError({"Error": {"Code": "NoSuchEntity"}}, "GetRole")
            return {"Role": {"RoleName": RoleName}}

        def create_service_linked_role(self, AWSServiceName: str) -> dict[str, Any]:
            self.made = True
            return {"Role": {"RoleName": setup.ECS_ROLE}}

    slept: list[float] = []
    now = [0.0]

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(setup, "_sleep", sleep)
    monkeypatch.setattr(setup, "_clock", lambda: now[0])
    assert setup.ecs_role(LateIam(hidden=4), make=True) == "made"
    assert slept == [setup.ROLE_POLL_SECONDS] * 7 + [setup.ROLE_SETTLE_SECONDS]
    slept.clear()
    with pytest.raises(TimeoutError, match="deploy again"):
        setup.ecs_role(LateIam(hidden=10_000), make=True)
    assert sum(slept) <= setup.ROLE_WAIT_SECONDS + setup.ROLE_POLL_SECONDS


def test_the_account_setup_fails_the_stack_in_minutes_not_an_hour() -> None:
    """CloudFormation waits an hour for a custom resource's answer by default: a setup
    function that dies unanswered must fail the deploy sooner, and after its own timeout,
    which must cover the role's wait."""
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from infra.account_setup import SETUP_SERVICE_TIMEOUT, AccountSetup
    from infra.settings import StackSettings
    from swegreen.aws.account_setup import ROLE_WAIT_SECONDS

    stack = cdk.Stack(cdk.App(), "Setup")
    AccountSetup(stack, "AccountSetup", settings=StackSettings())
    t = Template.from_stack(stack).to_json()
    (resource,) = [
        r for r in t["Resources"].values() if r["Type"] == "Custom::SweGreenAccountSetup"
    ]
    (function,) = [r for r in t["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    timeout = function["Properties"]["Timeout"]
    assert int(resource["Properties"]["ServiceTimeout"]) == SETUP_SERVICE_TIMEOUT
    assert ROLE_WAIT_SECONDS + 30 < timeout < SETUP_SERVICE_TIMEOUT <= 900
