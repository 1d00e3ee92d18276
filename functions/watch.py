"""Watch: every minute (EventBridge), poll the participants that rows wait on; hand each
finished one (or one past its deadline, its task cancelled) back to its execution through
the row's callback token. Rows spend no state transitions while they wait."""

from __future__ import annotations

import asyncio
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime import logger, metrics, pipeline, stepfunctions, tracer


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    counts = asyncio.run(pipeline().watch(stepfunctions()))
    metrics.add_metric(name="RowsWaiting", unit=MetricUnit.Count, value=counts["waiting"])
    logger.info("watched", extra=counts)
    return counts
