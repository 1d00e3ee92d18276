"""Predictions: ``PUT /predictions`` (a file checked, then kept) and ``POST
/predictions/uploads`` (a pre-signed PUT for a larger one); swegreen.aws.predictions_upload."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime import logger, pipeline, tracer
from swegreen.aws import predictions_upload


def _answer(status: int, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps(body),
    }


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    request_id = event["requestContext"]["requestId"]
    bucket = os.environ["SWEGREEN_BUCKET"]
    s3 = pipeline().s3  # SigV4, the bucket's regional endpoint: what a pre-signed URL needs
    if event.get("resource", "").endswith("/uploads"):
        out = predictions_upload.ticket(s3, bucket, request_id)
        logger.info("upload ticket", extra={"key": out["patches"]})  # never the URL
        return _answer(201, out)
    raw = event.get("body") or ""
    try:
        text = base64.b64decode(raw).decode() if event.get("isBase64Encoded") else raw
    except (ValueError, UnicodeDecodeError):
        return _answer(400, {"error": "request body: not UTF-8 text (JSONL expected)"})
    status, out = predictions_upload.accept(s3, bucket, text, request_id)
    logger.info("predictions", extra={"status": status, **out})
    return _answer(status, out)
