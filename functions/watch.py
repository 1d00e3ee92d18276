"""Watch: every minute (EventBridge), poll the participants that rows wait on; hand each
finished one (or one past its deadline, its task cancelled) back to its execution through
the row's callback token. Rows spend no state transitions while they wait."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError

from runtime import ec2, endpoint_spec, logger, metrics, pipeline, stepfunctions, tracer
from swegreen.aws import endpoints


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    try:
        counts = asyncio.run(pipeline().watch(stepfunctions()))
        metrics.add_metric(name="RowsWaiting", unit=MetricUnit.Count, value=counts["waiting"])
    finally:
        # whatever became of the polling: endpoints cost by the hour
        reaped = reap_endpoints()
    counts["endpoints_deleted"] = reaped
    logger.info("watched", extra=counts)
    return counts


def reap_endpoints() -> int:
    """The closed rows' endpoints go once no run is running and their lease ran out."""
    spec, machine = endpoint_spec(), os.environ.get("SWEGREEN_PIPELINE_ARN")
    if spec is None or not machine:
        return 0
    try:
        running = endpoints.any_running(stepfunctions(), machine)
        return len(endpoints.reap(ec2(), spec, running))
    except (BotoCoreError, ClientError):  # the next minute tries again
        logger.exception("endpoints not reaped")
        return 0
