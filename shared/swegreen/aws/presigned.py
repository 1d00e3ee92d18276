"""The evaluate task's only access to S3: pre-signed URLs for its own row, over plain HTTPS.

The task holds no AWS credentials. The Presign step (``Pipeline.presign``) gives it one
GET URL for its input and one PUT URL per output object of its row; nothing else in the
bucket is within its reach, whatever runs inside it.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx

ATTEMPTS = 4
BACKOFF = 1.0  # seconds, doubled per attempt
TIMEOUT = httpx.Timeout(30.0, read=120.0)


class PresignedUrlError(RuntimeError):
    """S3 refused a pre-signed request (expired, or not this object's URL)."""


def _send(http: httpx.Client, method: str, url: str, body: bytes | None = None) -> bytes:
    """The request, retried on S3's transient answers (5xx, throttling) and broken connections."""
    for attempt in range(ATTEMPTS):
        try:
            response = http.request(method, url, content=body)
        except httpx.TransportError:
            if attempt == ATTEMPTS - 1:
                raise
        else:
            if response.status_code < 300:
                return response.content
            if response.status_code < 500 and response.status_code != 429:
                raise PresignedUrlError(
                    f"S3 refused the sandbox's pre-signed {method} ({response.status_code}): "
                    f"{response.text[:500]} (an expired URL: the task outlived the credentials "
                    "that signed it; see docs/security-aws.md)"
                )
            if attempt == ATTEMPTS - 1:
                response.raise_for_status()
        time.sleep(BACKOFF * 2**attempt)
    raise AssertionError("unreachable")


def fetch(http: httpx.Client, url: str) -> bytes:
    return _send(http, "GET", url)


def download(http: httpx.Client, url: str, dest: Path) -> None:
    """A large object, streamed to ``dest`` (a prebuilt artifact: hundreds of MB)."""
    for attempt in range(ATTEMPTS):
        try:
            with http.stream("GET", url, timeout=httpx.Timeout(30.0, read=300.0)) as response:
                if response.status_code >= 300:
                    response.read()
                    if response.status_code < 500 and response.status_code != 429:
                        raise PresignedUrlError(
                            f"S3 refused a pre-signed GET of an artifact "
                            f"({response.status_code}): {response.text[:500]}"
                        )
                    response.raise_for_status()
                with dest.open("wb") as out:
                    for chunk in response.iter_bytes(1 << 20):
                        out.write(chunk)
                return
        except (httpx.TransportError, httpx.HTTPStatusError):
            if attempt == ATTEMPTS - 1:
                raise
        time.sleep(BACKOFF * 2**attempt)


def upload(http: httpx.Client, url: str, body: bytes) -> None:
    _send(http, "PUT", url, body)


class UploadArtifacts:
    """An ``ArtifactStore`` for one row with only pre-signed PUT URLs: ``uploads`` maps an
    artifact name to its URL. ``stored`` holds what the pipeline already keeps for the row
    (the patch): writing the same text again is a no-op, not an upload."""

    def __init__(
        self,
        http: httpx.Client,
        row_prefix: str,
        uploads: dict[str, str],
        stored: dict[str, str] | None = None,
    ) -> None:
        self.http = http
        self.row_prefix = row_prefix
        self.uploads = uploads
        self.stored = dict(stored or {})
        self.written: dict[str, str] = {}

    def _name(self, key: str) -> str:
        name = key.removeprefix(self.row_prefix)
        if name == key or not name or "/" in name:
            raise ValueError(f"artifact key {key!r} is not one of this row's ({self.row_prefix})")
        return name

    def write_text(self, key: str, text: str) -> None:
        name = self._name(key)
        if self.stored.get(name) == text:
            return
        url = self.uploads.get(name)
        if url is None:
            raise ValueError(
                f"the sandbox task has no upload URL for {name!r}; the Presign step signs "
                f"{sorted(self.uploads)} (swegreen.aws.pipeline.SANDBOX_OUTPUTS)"
            )
        upload(self.http, url, text.encode("utf-8", "surrogateescape"))
        self.written[name] = text

    def read_text(self, key: str) -> str | None:
        name = self._name(key)
        return self.written.get(name, self.stored.get(name))

    def exists(self, key: str) -> bool:
        return self.read_text(key) is not None

    def location(self, key: str) -> str:
        return f"{self.row_prefix}{self._name(key)} (uploaded through a pre-signed URL)"
