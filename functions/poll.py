"""Poll: ask the participant again; at the deadline, cancel its task and give up."""

from __future__ import annotations

import asyncio
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel

from runtime import logger, metrics, pipeline, tracer
from swegreen.aws.pipeline import Item, PatchState


class PollEvent(BaseModel):
    item: Item
    patch: PatchState


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=PollEvent)
def handler(event: PollEvent, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(run_id=event.item.run_id, instance_id=event.item.instance_id)
    state = asyncio.run(pipeline().poll(event.item, event.patch))
    if state.failure:
        metrics.add_metric(name="ParticipantFailures", unit=MetricUnit.Count, value=1)
    return state.model_dump()
