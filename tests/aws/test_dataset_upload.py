"""`swegreen upload-dataset`: the dataset where Resolve reads it (a real S3 API: moto)."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from swegreen.aws.dataset_upload import bucket_of_stack, dataset_s3_key, upload_dataset
from swegreen.aws.pipeline import Pipeline, PipelineSettings
from swegreen.cli import main
from swegreen.core.config import EvalConfig
from swegreen.core.dataset import load_dataset, parse_rows
from swegreen.sample import SampleBenchmark


@pytest.fixture
def aws(mocked_s3: Any) -> Any:
    mocked_s3.create_bucket(Bucket="stack-bucket")
    return mocked_s3


def test_the_upload_lands_where_a_request_naming_the_dataset_reads_it(
    aws: Any, sample: SampleBenchmark
) -> None:
    done = upload_dataset(aws, "stack-bucket", str(sample.dataset))
    assert done.uri == "s3://stack-bucket/datasets/dataset.jsonl"
    assert done.config == {"dataset": done.uri}
    pipeline = Pipeline(PipelineSettings(table="t", bucket="stack-bucket"), aws, None)
    key = pipeline.dataset_key(EvalConfig(dataset=done.uri))
    body = aws.get_object(Bucket="stack-bucket", Key=key)["Body"].read().decode()
    rows = parse_rows(json.loads(line) for line in body.splitlines())
    local = load_dataset(str(sample.dataset))
    assert rows == local.instances and done.digest == local.digest and done.rows == len(rows)
    # a hub id's own key is the one a request that names it (or names none) reads
    hub = "SWE-bench/SWE-bench_Verified"
    assert pipeline.dataset_key(EvalConfig()) == dataset_s3_key(hub, "test")
    assert dataset_s3_key(hub, "test") == "datasets/SWE-bench__SWE-bench_Verified/test.jsonl"


def test_the_command_says_what_went_wrong(
    aws: Any, sample: SampleBenchmark, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match="cannot read stack 'Nope'"):
        bucket_of_stack(boto3.client("cloudformation", region_name="us-east-1"), "Nope")
    assert main(["upload-dataset", "--stack", "Nope", "--dataset", str(sample.dataset)]) == 2
    assert "cannot read stack 'Nope'" in capsys.readouterr().out
    code = main(["upload-dataset", "--bucket", "no-such-bucket", "--dataset", str(sample.dataset)])
    assert code == 2 and "NoSuchBucket" in capsys.readouterr().out
    assert (
        main(["upload-dataset", "--bucket", "stack-bucket", "--dataset", str(sample.dataset)]) == 0
    )
    out = capsys.readouterr().out
    assert '{"dataset": "s3://stack-bucket/datasets/dataset.jsonl"}' in out
