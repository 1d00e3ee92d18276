"""Before a first `cdk deploy` on an account: what the deploy needs that is not in the
template, checked, and made where it is safe to make (docs/aws-deploy.md).

    .venv/bin/python scripts/aws_preflight.py [--region REGION] [--check-only]

- credentials: whose they are (STS), or why there are none;
- the region: which one a deploy goes to, and where that choice came from;
- ECS's service-linked role (AWSServiceRoleForECS): a first cluster with capacity
  providers can fail "Unable to assume the service linked role" and roll the stack back
  when it does not exist yet; made here (`iam:CreateServiceLinkedRole`) unless
  --check-only;
- the tools a deploy runs: Node.js and npm (the CDK CLI), Docker (the sandbox image);
- what the account's quotas give: its Fargate vCPU quotas and Lambda concurrency, the
  rows at a time they fit, a warm 500-row run's time at that and at --rows (100: about
  14.5 minutes), and the quota requests that would give --rows (a new account's 6 + 6
  vCPUs fit 6 rows: 79-101 minutes). Never a reason to stop: a run fits what there is;
- what earlier deploys of the stack kept (a rolled-back first deploy's bucket, tables
  and KMS key): listed, with the command that removes them (scripts/aws_retained.py).

Exits 0 when a deploy can go ahead, 1 with what to do otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from swegreen.aws.account_setup import ECS_ROLE, ecs_role
from swegreen.aws.cost_model import account_capacity
from swegreen.aws.pipeline.models import MAX_BATCH_ROWS
from swegreen.aws.quotas import FAST_ROWS, read_lambda_limit, read_quotas
from swegreen.aws.retained import leftovers


def region_of(session: Any, given: str | None) -> tuple[str | None, str]:
    """The region a deploy goes to, and where that came from."""
    if given:
        return given, "--region"
    for name in ("CDK_DEFAULT_REGION", "AWS_REGION", "AWS_DEFAULT_REGION"):
        if os.environ.get(name):
            return os.environ[name], name
    if session.region_name:
        return session.region_name, f"the profile's config ({session.profile_name or 'default'})"
    return None, "nothing: set AWS_REGION, or `aws configure set region REGION`"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--region")
    parser.add_argument("--check-only", action="store_true", help="make nothing")
    parser.add_argument("--stack", default="SweGreen", help="the stack's name (cdk deploy's)")
    parser.add_argument(
        "--rows", type=int, default=FAST_ROWS, help="rows at a time to plan the quotas for"
    )
    parser.add_argument(
        "--task-vcpu", type=float, default=2.0, help="vCPUs of an evaluate task (sandbox_cpu)"
    )
    args = parser.parse_args(argv)
    problems: list[str] = []
    session = boto3.Session()
    region, why = region_of(session, args.region)
    print(f"region: {region or 'none'} (from {why})")
    if region is None:
        problems.append("no region: set AWS_REGION (or --region)")
    try:
        who = session.client("sts", region_name=region or "us-east-1").get_caller_identity()
        print(f"credentials: {who['Arn']} (account {who['Account']})")
        state = ecs_role(
            session.client("iam", region_name=region or "us-east-1"), not args.check_only
        )
        print(f"ECS service-linked role {ECS_ROLE}: {state}")
        if state == "missing":
            problems.append(
                "ECS's service-linked role is missing: run this without --check-only, or "
                "`aws iam create-service-linked-role --aws-service-name ecs.amazonaws.com`"
            )
        for line in account_capacity(
            read_quotas(session.client("service-quotas", region_name=region or "us-east-1")),
            read_lambda_limit(session.client("lambda", region_name=region or "us-east-1")),
            region=region or "us-east-1",
            vcpu=args.task_vcpu,
            wanted=args.rows,
            max_batch_rows=MAX_BATCH_ROWS,
        ):
            print(line)
        kept = leftovers(
            *(session.client(n, region_name=region or "us-east-1")
              for n in ("cloudformation", "s3", "dynamodb", "kms")),
            args.stack,
        )  # fmt: skip
        for leftover in kept:
            print(f"kept by an earlier deploy: {leftover.line()}")
        if kept:
            print(
                "  a new deploy makes its own beside them; remove them (their data too): "
                f"scripts/aws_retained.py --stack {args.stack} --delete"
            )
    except NoCredentialsError:
        problems.append("no AWS credentials: `aws configure` (or `aws sso login`), then again")
    except (BotoCoreError, ClientError) as exc:
        problems.append(f"AWS answered: {exc}")
    for tool, why_needed in (
        ("node", "the CDK CLI (Node.js 22 or 24)"),
        ("npm", "installing the CDK CLI (make setup)"),
        ("docker", "building the sandbox image (or deploy a published one: docs/aws-deploy.md)"),
    ):
        found = shutil.which(tool)
        print(f"{tool}: {found or 'missing'}")
        if not found:
            problems.append(f"{tool} is missing: needed for {why_needed}")
    for problem in problems:
        print(f"to do: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
