"""`swegreen upload-dataset`: a dataset into the AWS stack's bucket, where runs find it."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from swegreen.core.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console


def upload_dataset_command(args: argparse.Namespace, console: Console) -> int:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from swegreen.aws.dataset_upload import bucket_of_stack, upload_dataset

    try:
        bucket = args.bucket or bucket_of_stack(boto3.client("cloudformation"), args.stack)
        done = upload_dataset(boto3.client("s3"), bucket, args.dataset, args.split, args.key)
    except (BotoCoreError, ClientError) as exc:
        raise ConfigError(f"upload to the stack's bucket failed: {exc}") from exc
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    console.print(
        f"{done.rows} rows (digest {done.digest[:12]}) -> {done.uri}\n"
        f"a run's config reaches them with: {json.dumps(done.config)}",
        markup=False,
        soft_wrap=True,  # a line to copy, never broken
    )
    return 0
