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
    preflight.main([])  # makes it
    assert "ECS service-linked role AWSServiceRoleForECS: made" in capsys.readouterr().out
    preflight.main(["--check-only"])
    assert "AWSServiceRoleForECS: exists" in capsys.readouterr().out
