"""What earlier deploys of the stack left behind, and removing it (docs/aws-deploy.md).

    .venv/bin/python scripts/aws_retained.py [--stack SweGreen] [--region REGION] [--delete]

A first deploy that rolls back, or a stack deleted with `retain_data` on, keeps its
bucket, tables and the alarm topic's KMS key; the next deploy makes new ones beside
them. This lists them (from CloudFormation's record of the ended stacks of that name),
and with --delete removes them and their data: a bucket's every object version, a
table, a KMS key scheduled for deletion in 7 days. Exits 0; 1 when AWS refused.
"""

from __future__ import annotations

import argparse
import sys

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from swegreen.aws.retained import leftovers, remove


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", default="SweGreen")
    parser.add_argument("--region")
    parser.add_argument("--delete", action="store_true", help="remove them, data included")
    args = parser.parse_args(argv)
    session = boto3.Session(region_name=args.region)
    clients = [session.client(name) for name in ("s3", "dynamodb", "kms")]
    try:
        found = leftovers(session.client("cloudformation"), *clients, args.stack)
        if not found:
            print(f"nothing kept by earlier stacks named {args.stack}")
            return 0
        for leftover in found:
            print(("removing " if args.delete else "kept: ") + leftover.line())
            if args.delete:
                print("  " + remove(leftover, *clients))
        if not args.delete:
            print("remove them (their data too) with --delete")
    except (BotoCoreError, ClientError) as exc:
        print(f"AWS answered: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
