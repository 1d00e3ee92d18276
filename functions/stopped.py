"""Stopped: an execution that ended without finishing (stopped through the API or the
console, timed out, failed) leaves its run's record saying so, instead of "running"."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime import logger, metrics, pipeline, tracer
from swegreen.aws.pipeline import ExecutionStopped


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
    logger.info("run stopped", extra={"state": state, "changed": changed})
    return {"run_id": stopped.name, "state": state, "changed": changed}
