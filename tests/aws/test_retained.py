"""What a rolled-back or deleted stack kept (swegreen.aws.retained, scripts/aws_retained.py),
against moto's CloudFormation, S3, DynamoDB and KMS."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from swegreen.aws.retained import leftovers, remove

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "aws_retained.py"
KEY_SCHEMA = {
    "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
    "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
    "BillingMode": "PAY_PER_REQUEST",
}
KEY_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
                   "Action": "kms:*", "Resource": "*"}],
}  # fmt: skip
# what the stack retains with retain_data (infra/storage.py) and its KMS key, and one
# resource of a kind that is not data
TEMPLATE = {
    "Resources": {
        "Bucket": {"Type": "AWS::S3::Bucket", "DeletionPolicy": "Retain"},
        "Table": {"Type": "AWS::DynamoDB::Table", "DeletionPolicy": "Retain",
                  "Properties": KEY_SCHEMA},
        "Key": {"Type": "AWS::KMS::Key", "DeletionPolicy": "Retain",
                "Properties": {"KeyPolicy": json.dumps(KEY_POLICY)}},
        "Queue": {"Type": "AWS::SQS::Queue"},
    }
}  # fmt: skip


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    for name, value in (("AWS_ACCESS_KEY_ID", "t"), ("AWS_SECRET_ACCESS_KEY", "t"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with mock_aws():
        yield {n: boto3.client(n) for n in ("cloudformation", "s3", "dynamodb", "kms")}


def _deploy(aws: dict[str, Any], name: str = "SweGreen") -> dict[str, str]:
    cf = aws["cloudformation"]
    cf.create_stack(StackName=name, TemplateBody=json.dumps(TEMPLATE))
    listed = cf.list_stack_resources(StackName=name)["StackResourceSummaries"]
    return {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in listed}


def _clients(aws: dict[str, Any]) -> tuple[Any, Any, Any]:
    return aws["s3"], aws["dynamodb"], aws["kms"]


def test_a_deleted_stack_s_data_is_found_and_removed_and_the_live_stack_s_is_not(
    aws: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    first = _deploy(aws)
    s3 = aws["s3"]
    s3.put_bucket_versioning(Bucket=first["Bucket"], VersioningConfiguration={"Status": "Enabled"})
    for body in (b"one", b"two"):  # two versions of one key: both must go
        s3.put_object(Bucket=first["Bucket"], Key="runs/r/x.json", Body=body)
    aws["cloudformation"].delete_stack(StackName="SweGreen")
    live = _deploy(aws)  # the next deploy, beside what the first kept
    found = leftovers(aws["cloudformation"], *_clients(aws), "SweGreen")
    assert sorted((f.logical_id, f.physical_id) for f in found) == sorted(
        (k, first[k]) for k in ("Bucket", "Table", "Key")
    )
    assert not {f.physical_id for f in found} & set(live.values())
    assert leftovers(aws["cloudformation"], *_clients(aws), "Other") == []
    spec = importlib.util.spec_from_file_location("aws_retained", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    sys.modules["aws_retained"] = script
    spec.loader.exec_module(script)
    assert script.main([]) == 0
    said = capsys.readouterr().out
    assert f"kept: AWS::S3::Bucket {first['Bucket']}" in said and "--delete" in said
    assert script.main(["--delete"]) == 0
    said = capsys.readouterr().out
    assert "(2 object versions)" in said and "scheduled KMS key" in said
    assert leftovers(aws["cloudformation"], *_clients(aws), "SweGreen") == []
    state = aws["kms"].describe_key(KeyId=first["Key"])["KeyMetadata"]["KeyState"]
    assert state == "PendingDeletion"
    assert live["Bucket"] in {b["Name"] for b in s3.list_buckets()["Buckets"]}
    aws["dynamodb"].describe_table(TableName=live["Table"])  # the live stack's: kept
    assert script.main([]) == 0 and "nothing kept" in capsys.readouterr().out
    del sys.modules["aws_retained"]


def test_remove_takes_a_table_s_deletion_protection_off_first(aws: dict[str, Any]) -> None:
    first = _deploy(aws)
    ddb = aws["dynamodb"]
    ddb.update_table(TableName=first["Table"], DeletionProtectionEnabled=True)
    aws["cloudformation"].delete_stack(StackName="SweGreen")
    (table,) = [
        f for f in leftovers(aws["cloudformation"], *_clients(aws), "SweGreen")
        if f.kind == "AWS::DynamoDB::Table"
    ]  # fmt: skip
    assert remove(table, *_clients(aws)) == f"deleted table {first['Table']}"
    assert first["Table"] not in ddb.list_tables()["TableNames"]
