"""AccountSetup: the custom resource that makes or finds what the stack needs of its
account before its cluster and its rows' network (swegreen.aws.account_setup)."""

from __future__ import annotations

import os
from typing import Any

import boto3
from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime import logger
from swegreen.aws import account_setup


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> None:
    data: dict[str, str] = {}
    try:
        if event["RequestType"] in ("Create", "Update"):
            region = os.environ["AWS_REGION"]
            given = event.get("ResourceProperties", {}).get("S3PrefixListId", "")
            data = account_setup.prepare(boto3.client("iam"), boto3.client("ec2"), region, given)
            logger.info("account setup", extra=data)
        # Delete: nothing. The role may serve other clusters; the prefix list is AWS's.
    except Exception as exc:  # answered, or the stack would wait an hour for nothing
        logger.exception("account setup failed")
        account_setup.answer(event, False, {}, f"{type(exc).__name__}: {exc}")
        return
    account_setup.answer(event, True, data)
