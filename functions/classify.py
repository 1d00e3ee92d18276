"""Classify: the decision tree over the sandbox's graded row, or an ``error`` row when a
step failed; the row is written once per distinct event (idempotent), as an upsert."""

from __future__ import annotations

import functools
import os
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime import logger, metrics, pipeline, tracer
from swegreen.aws.pipeline import BatchEvent, ClassifyEvent

IDEMPOTENCY = IdempotencyConfig(
    event_key_jmespath="[item.run_id, item.instance_id, patch, error]",
    expires_after_seconds=24 * 3600,
)


@functools.cache
def _write_row() -> Any:
    persistence = DynamoDBPersistenceLayer(table_name=os.environ["SWEGREEN_IDEMPOTENCY_TABLE"])

    @idempotent_function(
        data_keyword_argument="event", persistence_store=persistence, config=IDEMPOTENCY
    )
    def write_row(event: dict[str, Any]) -> dict[str, Any]:
        return pipeline().classify_row(ClassifyEvent.model_validate(event))

    return write_row


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if "patches" in event:  # a batch: each row written as its own event
        batch = BatchEvent.model_validate(event)
        logger.append_keys(run_id=batch.item.run_id, instance_id=batch.item.instance_id)
        IDEMPOTENCY.register_lambda_context(context)
        statuses = {}
        for row in pipeline().batch_events(batch):
            out = _write_row()(event=row.model_dump(mode="json"))
            metrics.add_metric(name=f"Rows_{out['status']}", unit=MetricUnit.Count, value=1)
            statuses[out["instance_id"]] = out["status"]
        pipeline().batch_done(batch.item)
        logger.info("batch written", extra={"rows": statuses})
        return {"instance_id": batch.item.instance_id, "rows": statuses}
    parsed = ClassifyEvent.model_validate(event)  # a clear error before anything is written
    logger.append_keys(run_id=parsed.item.run_id, instance_id=parsed.item.instance_id)
    IDEMPOTENCY.register_lambda_context(context)
    out = _write_row()(event=parsed.model_dump(mode="json"))
    metrics.add_metric(name=f"Rows_{out['status']}", unit=MetricUnit.Count, value=1)
    logger.info("row written", extra=out)
    return out
