"""Presign: the evaluate task's input and its upload URLs, signed right before it starts.

The task holds no AWS credentials; these pre-signed URLs reach its own row's objects only.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel

from runtime import logger, metrics, pipeline, tracer
from swegreen.aws.pipeline import BatchPatches, Item, PatchState


class PresignEvent(BaseModel):
    item: Item
    patch: PatchState | None = None
    patches: BatchPatches | None = None  # a batch's


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=PresignEvent)
def handler(event: PresignEvent, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(run_id=event.item.run_id, instance_id=event.item.instance_id)
    if event.patches is not None:
        ticket = pipeline().presign_batch(event.item, event.patches)
    elif event.patch is not None:
        ticket = pipeline().presign(event.item, event.patch)
    else:
        raise ValueError("Presign needs the row's patch or the batch's patches")
    logger.info("presigned")  # never the URLs: they are the task's credentials
    return ticket.model_dump()
