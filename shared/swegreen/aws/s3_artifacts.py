"""An ``ArtifactStore`` on S3: the local layout under a key prefix (``runs/``)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError


class S3Artifacts:
    def __init__(self, client: Any, bucket: str, prefix: str = "runs/") -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix

    def _key(self, key: str) -> str:
        if ".." in key.split("/"):
            raise ValueError(f"artifact key {key!r} leaves the artifact prefix")
        return self.prefix + key

    def write_text(self, key: str, text: str) -> None:
        # A PUT replaces the object whole: readers see the old content or the new.
        self.client.put_object(
            Bucket=self.bucket,
            Key=self._key(key),
            Body=text.encode("utf-8", "surrogateescape"),
            ContentType="text/plain; charset=utf-8",
        )

    def read_text(self, key: str) -> str | None:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise
        return body.decode("utf-8", "surrogateescape")

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    def location(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._key(key)}"
