"""``PUT /predictions`` and ``POST /predictions/uploads``: a predictions file into the
stack's bucket, checked before anything runs.

A file that fits a Lambda's request (``DIRECT_LIMIT``) is sent in the request and checked
by the same parser Resolve uses: a malformed one gets 400 with the line and the reason,
and is not kept. A larger one (a Verified run's patches with their accounts can pass 10
MB, API Gateway's own limit) goes straight to S3 through a pre-signed PUT of a key the
request id names (no upload replaces another's); Resolve checks it when the run starts,
before any row does, and the client checks it locally before sending.
"""

from __future__ import annotations

from typing import Any

from swegreen.aws.run_request import PREDICTIONS_PREFIX
from swegreen.core.errors import PredictionsError
from swegreen.core.sources import parse_predictions

UPLOADS_PREFIX = f"{PREDICTIONS_PREFIX}uploads/"
# Lambda takes 6 MB of request through API Gateway (a proxy event's JSON, base64 for
# binary bodies): bodies above this go by pre-signed URL instead.
DIRECT_LIMIT = 4_000_000
URL_SECONDS = 900  # the pre-signed PUT's life: the client uses it at once


def upload_key(request_id: str) -> str:
    if not request_id or "/" in request_id:
        raise ValueError(f"not a request id: {request_id!r}")
    return UPLOADS_PREFIX + request_id


def checked(text: str, name: str = "the predictions file") -> int:
    """How many predictions ``text`` holds (JSONL, as Resolve parses it); PredictionsError
    saying where and why if it is malformed or holds none."""
    return len(parse_predictions(text, name))


def accept(s3: Any, bucket: str, text: str, request_id: str) -> tuple[int, dict[str, Any]]:
    """A sent file: (status, answer). Kept only when it parses."""
    try:
        count = checked(text, "request body")
    except PredictionsError as exc:
        return 400, {"error": str(exc)}
    key = upload_key(request_id)
    s3.put_object(Bucket=bucket, Key=key, Body=text.encode(), ContentType="application/x-ndjson")
    return 201, {"patches": key, "predictions": count}


def ticket(s3: Any, bucket: str, request_id: str) -> dict[str, Any]:
    """Where to PUT a file too large to send through the API: a pre-signed URL for a
    fresh key (the run's ``patches`` once it is there)."""
    key = upload_key(request_id)
    url = s3.generate_presigned_url(
        "put_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=URL_SECONDS
    )
    return {"patches": key, "upload_url": url, "expires_in": URL_SECONDS}
