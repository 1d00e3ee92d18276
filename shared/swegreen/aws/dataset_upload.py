"""The dataset, put where the pipeline reads it: the first step of a first run on AWS.

Resolve reads rows from the stack's bucket only (its Lambda holds no dataset library and
should not depend on the hub at run time):
``s3://<bucket>/datasets/<owner>__<name>/<split>.jsonl`` for a hub id (so a request that
names no dataset finds SWE-bench Verified there), or any key a request names as
``s3://...``. This loads the dataset with the local loader (which
validates every row), writes it as JSON lines and says what config reaches it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel

from swegreen.core.dataset import is_local_source, load_dataset

DATASETS_PREFIX = "datasets/"


def dataset_s3_key(dataset: str, split: str, prefix: str = DATASETS_PREFIX) -> str:
    """Where the pipeline reads the hub dataset ``dataset`` (or an ``s3://`` one)."""
    if dataset.startswith("s3://"):
        return dataset.split("/", 3)[3]
    return f"{prefix}{dataset.replace('/', '__')}/{split}.jsonl"


class Uploaded(BaseModel):
    uri: str
    rows: int
    digest: str
    config: dict[str, str]  # what a request's config says to use it


def bucket_of_stack(cloudformation: Any, stack: str) -> str:
    """The stack's ``BucketName`` output."""
    try:
        outputs = cloudformation.describe_stacks(StackName=stack)["Stacks"][0].get("Outputs", [])
    except (BotoCoreError, ClientError) as exc:  # no such stack, no credentials
        raise ValueError(f"cannot read stack {stack!r}: {exc}") from exc
    for output in outputs:
        if output["OutputKey"] == "BucketName":
            return str(output["OutputValue"])
    raise ValueError(f"stack {stack!r} has no BucketName output: is it the swegreen stack?")


def upload_dataset(
    s3: Any, bucket: str, dataset: str, split: str = "test", key: str | None = None
) -> Uploaded:
    """Load ``dataset`` (hub id or local file), validate it, write it to ``bucket``."""
    loaded = load_dataset(dataset, split)
    local = is_local_source(dataset)
    if key is None:
        key = f"{DATASETS_PREFIX}{Path(dataset).name}" if local else dataset_s3_key(dataset, split)
    body = "".join(json.dumps(row.to_row()) + "\n" for row in loaded.instances)
    s3.put_object(Bucket=bucket, Key=key, Body=body.encode(), ContentType="application/x-ndjson")
    uri = f"s3://{bucket}/{key}"
    # a hub id at its own key needs no dataset in the config at all (if it is the default)
    named = not local and key == dataset_s3_key(dataset, split)
    return Uploaded(
        uri=uri,
        rows=len(loaded.instances),
        digest=loaded.digest,
        config={"dataset": dataset} if named else {"dataset": uri},
    )
