"""Stopped: an execution that ended without finishing (stopped through the API or the
console, timed out, failed) leaves its run's record saying so, instead of "running"."""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from runtime import logger, metrics, pipeline, stepfunctions, tracer
from swegreen.aws.pipeline import ExecutionStopped, rows_execution_arn


class StatusChange(EventBridgeModel):
    detail: ExecutionStopped  # type: ignore[assignment]


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=StatusChange)
def handler(event: StatusChange, context: LambdaContext) -> dict[str, Any]:
    stopped = event.detail
    logger.append_keys(run_id=stopped.name)
    state, error = stopped.run_state()
    changed = pipeline().store.mark_stopped(stopped.name, state, error)
    rows = os.environ.get("SWEGREEN_ROWS_MACHINE_ARN")
    if rows:  # the run's rows phase, if it got that far, stops too
        try:
            stepfunctions().stop_execution(
                executionArn=rows_execution_arn(rows, stopped.name), cause=error[:1000]
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ExecutionDoesNotExist":
                raise
    logger.info("run stopped", extra={"state": state, "changed": changed})
    return {"run_id": stopped.name, "state": state, "changed": changed}
