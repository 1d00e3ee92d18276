"""Resolve: validate the request, select the rows, record the run, list the Map's items."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime import logger, metrics, pipeline, tracer
from swegreen.aws.pipeline import StartEvent


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=StartEvent)
def handler(event: StartEvent, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(run_id=event.run_id)
    out = pipeline().resolve(event)
    if out["dry_run"]:  # estimated, nothing to start
        logger.info("estimated", extra={"rows": out["count"]})
        return out
    logger.info(
        "resolved",
        extra={"rows": out["count"], "builds": out["builds"], "prepares": out["prepares"]},
    )
    metrics.add_metric(name="RowsResolved", unit=MetricUnit.Count, value=out["count"])
    return out
