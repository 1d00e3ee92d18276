"""The evaluate task's pre-signed URLs: SigV4, the bucket's regional host, valid for one
attempt and a little more. Signing is local (no request is sent): the URLs are read."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from swegreen.aws.pipeline.base import signing_s3
from swegreen.aws.pipeline.models import SANDBOX_TASK_SECONDS, SANDBOX_URL_SECONDS

KEYS = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"}


@pytest.mark.parametrize("region", ["eu-west-1", "ap-southeast-2", "us-east-1"])
def test_urls_are_signed_with_sigv4_for_the_buckets_regional_host(
    region: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    s3 = signing_s3(region, {})
    url = s3.generate_presigned_url(
        "get_object",
        Params={"Bucket": "swegreen-runs", "Key": "runs/r/x.json"},
        ExpiresIn=SANDBOX_URL_SECONDS,
    )
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    assert parts.scheme == "https"
    assert parts.hostname == f"swegreen-runs.s3.{region}.amazonaws.com"  # never s3.amazonaws.com
    assert parts.path == "/runs/r/x.json"
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert query["X-Amz-Credential"][0].endswith(f"/{region}/s3/aws4_request")
    assert int(query["X-Amz-Expires"][0]) == SANDBOX_URL_SECONDS


def test_an_attempts_urls_last_just_past_its_deadline() -> None:
    margin = SANDBOX_URL_SECONDS - SANDBOX_TASK_SECONDS
    assert 5 * 120 <= margin <= 30 * 60  # the ECS retries before the start, and no more


def test_an_emulators_endpoint_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    s3 = signing_s3("eu-west-1", {"AWS_ENDPOINT_URL": "http://127.0.0.1:4566"})
    url = s3.generate_presigned_url("put_object", Params={"Bucket": "b", "Key": "k"})
    assert url.startswith("http://127.0.0.1:4566/b/k?")
