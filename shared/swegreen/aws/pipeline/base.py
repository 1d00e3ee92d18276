"""What every step of the pipeline works with: its settings, S3, the store, and the few
ways it reads and writes a run's objects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from swegreen.aws.dataset_upload import dataset_s3_key
from swegreen.aws.pipeline.models import (
    INSTANCE,
    SANDBOX_URL_SECONDS,
    PipelineSettings,
)
from swegreen.core.config import EvalConfig
from swegreen.core.dataset import Instance
from swegreen.stores import artifacts as art


def signing_s3(region: str, environ: Mapping[str, str]) -> Any:
    """The S3 client the Presign step signs the evaluate task's URLs with: SigV4, the
    bucket's regional endpoint, virtual-hosted addressing. A task in a closed subnet
    reaches S3 only through the gateway endpoint of its own region; a URL for the global
    host (``s3.amazonaws.com``, what an unconfigured client signs for outside us-east-1)
    fails there or redirects, which breaks a SigV4 signature. An emulator's endpoint
    (``AWS_ENDPOINT_URL[_S3]``, the tests') is kept."""
    import boto3
    from botocore.config import Config

    emulated = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
    return boto3.client(
        "s3",
        region_name=region,
        endpoint_url=emulated or f"https://s3.{region}.amazonaws.com",
        config=Config(
            signature_version="s3v4",
            s3={"addressing_style": "path" if emulated else "virtual"},
        ),
    )


class PipelineBase:
    """The steps' shared state (the Lambda's clients) and object helpers."""

    def __init__(
        self,
        settings: PipelineSettings,
        s3: Any,
        store: Any,
        service_quotas: Any = None,
        lambda_client: Any = None,
    ) -> None:
        self.settings = settings
        self.s3 = s3
        self.store = store
        self.service_quotas = service_quotas  # None: concurrency is left as asked
        self.lambda_client = lambda_client  # None: Lambda's concurrency is not read

    # ------------------------------------------------------------------ helpers
    def _key(self, run_id: str, instance_id: str, name: str) -> str:
        return self.settings.runs_prefix + art.instance_key(run_id, instance_id, name)

    def _get(self, key: str) -> str | None:
        try:
            return self.s3.get_object(Bucket=self.settings.bucket, Key=key)["Body"].read().decode()
        except self.s3.exceptions.NoSuchKey:
            return None

    def _get_named(self, key: str, missing: str) -> str:
        """An object the request named (the dataset, a predictions file), or ValueError
        ``missing``. AccessDenied gets the same guidance: it is what S3 answers for a
        missing object to a role that may not list where it is, and for a key outside
        what this step may read."""
        try:
            text = self._get(key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "AccessDenied":
                raise
            raise ValueError(
                f"{missing} (S3 refused the read: AccessDenied; the stack's functions "
                "read datasets under datasets/ and predictions under predictions/ only)"
            ) from None
        if text is None:
            raise ValueError(missing)
        return text

    def _put(self, key: str, text: str) -> None:
        self.s3.put_object(Bucket=self.settings.bucket, Key=key, Body=text.encode())

    def instance(self, run_id: str, instance_id: str) -> Instance:
        text = self._get(self._key(run_id, instance_id, INSTANCE))
        if text is None:
            raise ValueError(f"{instance_id} was not resolved for run {run_id}")
        return Instance.model_validate_json(text)

    def dataset_key(self, config: EvalConfig) -> str:
        return dataset_s3_key(config.dataset, config.split, self.settings.datasets_prefix)

    def _exists(self, key: str) -> bool:
        try:
            self.s3.head_object(Bucket=self.settings.bucket, Key=key)
        except ClientError as exc:
            if missing_key(exc):
                return False
            raise
        return True

    def _sign(self, method: str, key: str) -> str:
        return self.s3.generate_presigned_url(
            method,
            Params={"Bucket": self.settings.bucket, "Key": key},
            ExpiresIn=SANDBOX_URL_SECONDS,
        )


def missing_key(exc: ClientError) -> bool:
    """Whether S3 answered "no such object" (HEAD says 404, GET NoSuchKey)."""
    return exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound")
