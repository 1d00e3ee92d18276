"""Dispatch: the row's patch (gold, empty, predictions), or the start of an A2A exchange.

With a callback token (the A2A states wait on one), the patch goes back through the token,
at once or later by Watch; without one, it is this function's result."""

from __future__ import annotations

import asyncio
from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel

from runtime import logger, metrics, pipeline, stepfunctions, tracer
from swegreen.aws.pipeline import Item


class DispatchEvent(BaseModel):
    item: Item
    token: str | None = None  # the waiting state's $$.Task.Token


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=DispatchEvent)
def handler(event: DispatchEvent, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(run_id=event.item.run_id, instance_id=event.item.instance_id)
    if event.item.batch:  # a batch's patches, known up front (gold, empty, predictions)
        batch = asyncio.run(pipeline().dispatch_batch(event.item))
        logger.info("dispatched a batch", extra={"rows": len(batch.rows)})
        return batch.model_dump()
    if event.token:
        state = asyncio.run(pipeline().dispatch_waiting(event.item, event.token, stepfunctions()))
    else:
        state = asyncio.run(pipeline().dispatch(event.item))
    logger.info("dispatched", extra={"done": state.done, "failure": state.failure})
    return state.model_dump()
