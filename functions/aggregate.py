"""Aggregate: the run's leaderboard JSON to S3 and its summary to DynamoDB."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel

from runtime import logger, metrics, pipeline, tracer


class AggregateEvent(BaseModel):
    run_id: str


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=AggregateEvent)
def handler(event: AggregateEvent, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(run_id=event.run_id)
    out = pipeline().aggregate(event.run_id)
    logger.info("leaderboard written", extra={"results": out["results"]})
    return out
