"""TaskRetry: after a Fargate task failed, whether to run it again, on what capacity
(Spot, then on-demand) and after how long (full jitter); an out-of-memory kill or a crash
of the task's own code is the row's verdict, never retried."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime import logger, metrics, tracer
from swegreen.aws.pipeline import TaskRetryEvent, task_retry


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=TaskRetryEvent)
def handler(event: TaskRetryEvent, context: LambdaContext) -> dict[str, Any]:
    attempt = task_retry(event)
    if attempt.retry:
        metrics.add_metric(name="TaskRetries", unit=MetricUnit.Count, value=1)
    logger.info("task failed", extra=attempt.model_dump())
    return attempt.model_dump()
