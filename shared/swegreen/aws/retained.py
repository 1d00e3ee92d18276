"""What an earlier deploy of a stack left behind: the data resources a deleted or
rolled-back stack of the same name kept (``retain_data``: its bucket, tables and the
alarm topic's KMS key, which CloudFormation skips when it deletes or rolls back).

A first deploy that rolls back keeps them, and the next deploy makes new ones beside
them: they cost (a KMS key $1 a month) and confuse. ``leftovers`` finds them from
CloudFormation's own record of the earlier stacks (their resources, by stack id, for
90 days after), keeping only those that still exist; ``remove`` deletes one (a bucket
emptied of every version first, a KMS key scheduled for deletion in 7 days, AWS's
shortest). Used by ``scripts/aws_retained.py`` and the preflight.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError
from pydantic import BaseModel

KINDS = ("AWS::S3::Bucket", "AWS::DynamoDB::Table", "AWS::KMS::Key")
# Stacks whose resources are no longer the live stack's: deleted, or a failed first
# create (CDK deletes it before deploying again).
ENDED = ("DELETE_COMPLETE", "ROLLBACK_COMPLETE")
KEY_DELETION_DAYS = 7


class Leftover(BaseModel):
    kind: str
    physical_id: str
    logical_id: str
    stack_id: str
    stack_status: str

    def line(self) -> str:
        return (
            f"{self.kind} {self.physical_id} ({self.logical_id}, kept by "
            f"{self.stack_status.lower()} stack {self.stack_id.rsplit('/', 1)[-1]})"
        )


def _ended_stacks(cf: Any, stack: str) -> list[dict[str, Any]]:
    found = []
    for page in cf.get_paginator("list_stacks").paginate(StackStatusFilter=list(ENDED)):
        found += [s for s in page.get("StackSummaries", []) if s["StackName"] == stack]
    return found


def _exists(kind: str, physical_id: str, s3: Any, ddb: Any, kms: Any) -> bool:
    try:
        if kind == "AWS::S3::Bucket":
            s3.head_bucket(Bucket=physical_id)
        elif kind == "AWS::DynamoDB::Table":
            ddb.describe_table(TableName=physical_id)
        else:
            state = kms.describe_key(KeyId=physical_id)["KeyMetadata"]["KeyState"]
            return state not in ("PendingDeletion", "PendingReplicaDeletion")
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in ("404", "NoSuchBucket", "ResourceNotFoundException", "NotFoundException"):
            return False
        raise
    return True


def leftovers(cf: Any, s3: Any, ddb: Any, kms: Any, stack: str) -> list[Leftover]:
    """The data resources earlier stacks named ``stack`` kept and that still exist."""
    out: list[Leftover] = []
    seen: set[str] = set()
    for summary in _ended_stacks(cf, stack):
        pages = cf.get_paginator("list_stack_resources").paginate(StackName=summary["StackId"])
        for page in pages:
            for r in page.get("StackResourceSummaries", []):
                physical = r.get("PhysicalResourceId") or ""
                if r["ResourceType"] not in KINDS or not physical or physical in seen:
                    continue
                seen.add(physical)
                if _exists(r["ResourceType"], physical, s3, ddb, kms):
                    out.append(
                        Leftover(
                            kind=r["ResourceType"],
                            physical_id=physical,
                            logical_id=r["LogicalResourceId"],
                            stack_id=summary["StackId"],
                            stack_status=summary["StackStatus"],
                        )
                    )
    return out


def remove(leftover: Leftover, s3: Any, ddb: Any, kms: Any) -> str:
    """Deletes ``leftover`` (its data with it); what was done."""
    if leftover.kind == "AWS::S3::Bucket":
        bucket = leftover.physical_id
        deleted = 0
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
            batch = [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
            ]
            for start in range(0, len(batch), 1000):
                s3.delete_objects(
                    Bucket=bucket, Delete={"Objects": batch[start : start + 1000], "Quiet": True}
                )
            deleted += len(batch)
        s3.delete_bucket(Bucket=bucket)
        return f"deleted bucket {bucket} ({deleted} object versions)"
    if leftover.kind == "AWS::DynamoDB::Table":
        table = leftover.physical_id
        described = ddb.describe_table(TableName=table)["Table"]
        if described.get("DeletionProtectionEnabled"):
            ddb.update_table(TableName=table, DeletionProtectionEnabled=False)
        ddb.delete_table(TableName=table)
        return f"deleted table {table}"
    kms.schedule_key_deletion(KeyId=leftover.physical_id, PendingWindowInDays=KEY_DELETION_DAYS)
    return f"scheduled KMS key {leftover.physical_id} for deletion in {KEY_DELETION_DAYS} days"
