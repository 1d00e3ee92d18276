"""`swegreen upload-dataset`: a dataset into the AWS stack's bucket, where runs find it.
`swegreen upload-predictions`: a predictions file through the stack's API (and the run
that grades it): how patches the green agent kept after a failed upload are sent again."""

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


def upload_predictions_command(
    args: argparse.Namespace, env: dict[str, str], console: Console
) -> int:
    import asyncio
    from pathlib import Path

    import httpx

    from swegreen.aws.front_door_client import FrontDoorClient, FrontDoorError
    from swegreen.cli.serve import front_door_settings

    path = Path(args.file)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read the predictions file {path}: {exc.strerror}") from None
    config: dict | None = None
    beside = path.with_suffix(".config.json")
    given = args.config
    where = "--config"
    if given is None and beside.exists():
        given, where = beside.read_text(), str(beside)
    if given is not None:
        try:
            config = json.loads(given)
        except ValueError as exc:
            raise ConfigError(f"{where} is not JSON: {exc}") from None
        if not isinstance(config, dict):
            raise ConfigError(f"{where}: a run's config is a JSON object")
    args.api_poll, args.exchange = 15.0, None  # front_door_settings reads serve's flags
    settings = front_door_settings(args, env)

    async def send() -> tuple[str, str | None]:
        async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=300.0)) as http:
            client = FrontDoorClient(settings, http)
            key = await client.upload_predictions(text)
            run = None
            if args.start:
                run = await client.start({"patches": key, "config": config or {}})
            return key, run

    try:
        key, run = asyncio.run(send())
    except (FrontDoorError, httpx.HTTPError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    console.print(f"sent {path} -> patches {key}", markup=False, soft_wrap=True)
    if run is not None:
        console.print(f"started run {run}: GET {settings.url}runs/{run}", markup=False)
    return 0
