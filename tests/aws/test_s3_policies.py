"""The functions' S3 grants as a real account enforces them: each step's own code run in
process against moto's S3, behind the synthesized template's policy for that function
(tests/aws/iam_policy.py: explicit Deny wins, S3 answers 403 for a missing object the
caller may not list). The emulators enforce no IAM; without this, a step that reads an
object that may be missing works in every test and fails on the first real deploy."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from swegreen.aws.pipeline import (
    ClassifyEvent,
    Item,
    PatchState,
    Pipeline,
    PipelineSettings,
    StartEvent,
)
from swegreen.core.classify import Reason, Status
from swegreen.sample import SampleBenchmark
from swegreen.stores.sqlite import SqliteStore
from tests.aws.iam_policy import Enforced, allowed, data_bucket, render, role_statements

pytestmark = pytest.mark.timeout(1200)  # the template fixture runs `cdk synth` once
BUCKET = "policies"
DATASET = f"s3://{BUCKET}/datasets/sample.jsonl"
FUNCTIONS = ("Resolve", "Dispatch", "Presign", "Classify", "Aggregate")


@pytest.fixture
def world(
    mocked_s3: Any, template: dict[str, Any], tmp_path: Path
) -> Iterator[tuple[Any, SqliteStore]]:
    mocked_s3.create_bucket(Bucket=BUCKET)
    store = SqliteStore(tmp_path / "store.sqlite")
    yield template, store
    store.close()


def step(world: tuple[Any, SqliteStore], function: str) -> tuple[Pipeline, Enforced]:
    """The pipeline as ``function``'s Lambda runs it: its S3 calls judged by its role."""
    template, store = world
    client = boto3.client("s3", region_name="us-east-1")
    enforced = Enforced(
        client,
        role_statements(template, f"Workflow{function}"),
        data_bucket(template, BUCKET),
    )
    return Pipeline(PipelineSettings(table="unused", bucket=BUCKET), client, store), enforced


def _dataset(sample: SampleBenchmark) -> None:
    boto3.client("s3", region_name="us-east-1").put_object(
        Bucket=BUCKET, Key="datasets/sample.jsonl", Body=sample.dataset.read_bytes()
    )


def test_a_run_before_its_dataset_is_uploaded_gets_the_guided_message(world: Any) -> None:
    """The first run on a new stack, before `swegreen upload-dataset`: Resolve reads a
    missing object; with the list grant S3 says 404 and the run's error says what to do."""
    resolve, enforced = step(world, "Resolve")
    with pytest.raises(ValueError, match="upload it there: swegreen upload-dataset"):
        resolve.resolve(StartEvent(run_id="r", patches="gold", config={"dataset": DATASET}))
    assert enforced.denied == []


def test_a_wrong_predictions_key_gets_the_guided_message(
    world: Any, sample: SampleBenchmark
) -> None:
    _dataset(sample)
    resolve, enforced = step(world, "Resolve")
    with pytest.raises(ValueError, match="does not exist; send it first"):
        resolve.resolve(
            StartEvent(run_id="r", patches="predictions/typo.jsonl", config={"dataset": DATASET})
        )
    assert enforced.denied == []


def test_a_row_without_a_prediction_and_a_row_without_a_result_are_rows_not_crashes(
    world: Any, sample: SampleBenchmark
) -> None:
    """Dispatch of a row the predictions file leaves out (its own prediction object is
    missing), and Classify of a row whose task wrote no result: each reads an object that
    is not there, and must get "not there", not AccessDenied."""
    _dataset(sample)
    ids = sorted(sample.expected)
    gold = {
        json.loads(line)["instance_id"]: json.loads(line)["patch"]
        for line in sample.dataset.read_text().splitlines()
    }
    boto3.client("s3", region_name="us-east-1").put_object(
        Bucket=BUCKET,
        Key="predictions/one.jsonl",
        Body=json.dumps(
            {"instance_id": ids[0], "model_name_or_path": "m", "model_patch": gold[ids[0]]}
        ).encode(),
    )
    resolve, _ = step(world, "Resolve")
    config = {"dataset": DATASET, "instance_ids": ids[:2], "max_rows": -1}
    resolve.resolve(
        StartEvent(run_id="p", patches="predictions/one.jsonl", config=config, batch=False)
    )
    plain = boto3.client("s3", region_name="us-east-1")  # the Map's item reader, not a step
    listed = plain.get_object(Bucket=BUCKET, Key="runs/p/items.json")["Body"].read()
    items = {i["instance_id"]: Item.model_validate(i) for i in json.loads(listed)}
    dispatch, denied = step(world, "Dispatch")
    left_out = asyncio.run(dispatch.dispatch(items[ids[1]]))
    assert left_out.failure == Reason.NO_PATCH and denied.denied == []
    sent = asyncio.run(dispatch.dispatch(items[ids[0]]))
    assert sent.patch_key is not None and denied.denied == []
    classify, judged = step(world, "Classify")
    out = classify.classify_row(ClassifyEvent(item=items[ids[0]], patch=sent))
    assert out["status"] == Status.ERROR.value and judged.denied == [], out
    assert "without a result" in world[1].get_results("p")[ids[0]].detail
    assert isinstance(sent, PatchState)


def test_every_function_may_list_wherever_it_may_read(template: dict[str, Any]) -> None:
    """The rule behind the three above, for every function and every prefix it may read:
    a read there of an object that is missing is a 404 (its code's "not there"), never a
    403. A grant to read a prefix without the list under it is the defect this finds."""
    names = data_bucket(template, BUCKET)
    checked = 0
    for function in FUNCTIONS:
        statements = role_statements(template, f"Workflow{function}")
        reads = [
            render(r, names)
            for s in statements
            if s["Effect"] == "Allow" and "s3:GetObject" in json.dumps(s.get("Action"))
            for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
        ]
        reads = [r for r in reads if r.startswith(f"arn:aws:s3:::{BUCKET}/")]
        assert reads, function
        for arn in reads:
            key = arn.removeprefix(f"arn:aws:s3:::{BUCKET}/").replace("*", "x")
            assert allowed(statements, "s3:GetObject", f"arn:aws:s3:::{BUCKET}/{key}", names)
            assert allowed(
                statements, "s3:ListBucket", f"arn:aws:s3:::{BUCKET}", names, {"s3:prefix": key}
            ), f"{function} may read {arn} but not list there: a missing object is a 403"
            checked += 1
    assert checked >= 10


def test_a_predictions_file_is_kept_only_when_it_parses_and_a_large_one_goes_by_url(
    world: Any,
) -> None:
    """The Predictions function's two answers under its own role: a sent file checked by
    Resolve's parser (400 with the line, nothing kept) then kept at the request's key;
    and a pre-signed PUT for a fresh key, which moto accepts from an unsigned client."""
    import requests

    from swegreen.aws import predictions_upload as uploads

    _, enforced = step(world, "Predictions")
    s3 = enforced.client
    line = json.dumps({"instance_id": "a__b-1", "model_patch": "", "model_name_or_path": "m"})
    status, out = uploads.accept(s3, BUCKET, line + "\n{oops\n", "req-1")
    assert status == 400 and "request body:2: not valid JSON" in out["error"], out
    plain = boto3.client("s3", region_name="us-east-1")
    assert "Contents" not in plain.list_objects_v2(Bucket=BUCKET, Prefix="predictions/")
    status, out = uploads.accept(s3, BUCKET, line + "\n", "req-2")
    assert (status, out) == (201, {"patches": "predictions/uploads/req-2", "predictions": 1})
    ticket = uploads.ticket(s3, BUCKET, "req-3")
    assert ticket["patches"] == "predictions/uploads/req-3" and enforced.denied == []
    body = (line + "\n").encode() * 1
    assert requests.put(ticket["upload_url"], data=body, timeout=30).status_code == 200
    got = plain.get_object(Bucket=BUCKET, Key="predictions/uploads/req-3")["Body"].read()
    assert got == body
    with pytest.raises(ValueError, match="not a request id"):
        uploads.upload_key("../runs/x")
