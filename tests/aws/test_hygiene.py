"""The AWS side of issue 8's hygiene, on a real S3 API (the moto server) and SQLite: the
sandbox task redacts the host's secrets from what it writes to S3, and the pipeline
refuses an oversized patch before it ever stores it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from swegreen.aws.pipeline import (
    SANDBOX_OUTPUTS,
    ClassifyEvent,
    Item,
    Pipeline,
    PipelineSettings,
    SandboxInput,
    StartEvent,
)
from swegreen.aws.sandbox_task import evaluate as evaluate_task
from swegreen.core.classify import Reason, Status
from swegreen.core.dataset import load_dataset
from swegreen.sample import SampleBenchmark
from swegreen.stores import artifacts as art
from swegreen.stores.sqlite import SqliteStore
from tests.aws.local_services import wait_for
from tests.helpers import free_port
from tests.test_scrub import CANARY, CANARY_ENV, LEAKY_PATCH

BUCKET = "swegreen-hygiene"


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        wait_for(endpoint + "/moto-api/")
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        client.create_bucket(Bucket=BUCKET)
        yield client
    finally:
        server.stop()


def objects(s3: Any, prefix: str) -> dict[str, bytes]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return {o["Key"]: s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listed}


@pytest.fixture
def pipeline(s3: Any, sample: SampleBenchmark, tmp_path: Path) -> Iterator[Pipeline]:
    """The pipeline's steps over the sample in S3, writing rows to a SQLite store."""
    s3.put_object(Bucket=BUCKET, Key="datasets/sample.jsonl", Body=sample.dataset.read_bytes())
    store = SqliteStore(tmp_path / "store.sqlite")
    try:
        yield Pipeline(PipelineSettings(table="unused", bucket=BUCKET), s3, store)
    finally:
        store.close()


def one_item(s3: Any, pipeline: Pipeline, run_id: str, patches: str, **config: Any) -> Item:
    """Resolve a run of sample__calculator-1 alone; its one item."""
    config = {
        "dataset": f"s3://{BUCKET}/datasets/sample.jsonl",
        "instance_ids": ["sample__calculator-1"],
        **config,
    }
    resolved = pipeline.resolve(StartEvent(run_id=run_id, patches=patches, config=config))
    [raw] = json.loads(s3.get_object(Bucket=BUCKET, Key=resolved["items_key"])["Body"].read())
    return Item.model_validate(raw)


def test_the_sandbox_task_writes_no_secret_of_its_environment_to_s3(
    s3: Any, sample: SampleBenchmark, session_cache: Path, host_env: dict[str, str]
) -> None:
    iid, run_id = "sample__calculator-1", "aws-canary"
    instance = load_dataset(str(sample.dataset)).by_id()[iid]
    prefix = f"runs/{run_id}/instances/{iid}/"

    def sign(method: str, key: str) -> str:
        params = {"Bucket": BUCKET, "Key": key}
        return s3.generate_presigned_url(method, Params=params, ExpiresIn=600)

    given = SandboxInput(
        instance=instance,
        patch=LEAKY_PATCH,
        uploads={name: sign("put_object", prefix + name) for name in SANDBOX_OUTPUTS},
    )
    s3.put_object(Bucket=BUCKET, Key=prefix + "input.json", Body=given.model_dump_json())
    env = {
        **host_env,
        **CANARY_ENV,
        "SWEGREEN_INPUT_URL": sign("get_object", prefix + "input.json"),
        "SWEGREEN_RUN_ID": run_id,
        "SWEGREEN_INSTANCE_ID": iid,
        "SWEGREEN_MODEL": "fixed",
        "SWEGREEN_CONFIG": json.dumps(
            {"repo_url_template": sample.url_template, "max_attempts": 1}
        ),
        "SWEGREEN_CACHE_DIR": str(session_cache),
    }
    with httpx.Client(timeout=60) as http:
        assert evaluate_task(env, http) == 0
    written = objects(s3, prefix)
    written.pop(prefix + "input.json")  # what the test gave it, not what it wrote
    row = json.loads(written[prefix + art.RESULT])
    assert row["tests_ran"] and row["status"] == "no_op", (row["reason"], row["detail"])
    log = written[prefix + art.TEST_OUTPUT].decode()
    assert "leaking [redacted:SWEGREEN_TEST_CANARY_TOKEN] here" in log  # it was printed
    assert prefix + art.EVAL_SCRIPT in written and prefix + art.INSTANCE_LOG in written
    # Even the patch: the task writes back the patch it evaluated, redacted.
    assert [k for k, v in written.items() if CANARY.encode() in v] == []


def test_the_pipeline_refuses_an_oversized_patch_before_storing_it(
    s3: Any, pipeline: Pipeline
) -> None:
    item = one_item(s3, pipeline, "aws-big", "gold", max_patch_bytes=100)
    assert json.loads(item.config_json)["max_patch_bytes"] == 100
    state = asyncio.run(pipeline.dispatch(item))
    assert state.done and state.patch_key is None
    assert state.failure == Reason.PATCH_TOO_LARGE
    assert "; the limit is 100 (config key max_patch_bytes)" in state.detail
    assert objects(s3, f"runs/aws-big/instances/sample__calculator-1/{art.PATCH}") == {}
    pipeline.classify_row(ClassifyEvent(item=item, patch=state))
    row = pipeline.store.get_results("aws-big")["sample__calculator-1"]
    assert (row.status, row.reason) == (Status.NO_OP, Reason.PATCH_TOO_LARGE)
    record = pipeline.store.get_run("aws-big")
    assert record is not None
    assert record.provenance["dataset"] == f"s3://{BUCKET}/datasets/sample.jsonl"
    assert record.provenance["config"]["repo_url_template"] == "https://github.com/{repo}.git"


def test_an_empty_patch_is_decided_without_storing_it_or_starting_a_task(
    s3: Any, pipeline: Pipeline
) -> None:
    """As a local run decides it (no_op, empty_patch, no tests run): Dispatch stores no
    patch, so the Rows machine's HasPatch goes straight to Classify."""
    item = one_item(s3, pipeline, "aws-empty", "empty")
    state = asyncio.run(pipeline.dispatch(item))
    assert state.done and state.patch_key is None and state.failure == Reason.EMPTY_PATCH
    assert objects(s3, f"runs/aws-empty/instances/sample__calculator-1/{art.PATCH}") == {}
    pipeline.classify_row(ClassifyEvent(item=item, patch=state))
    row = pipeline.store.get_results("aws-empty")["sample__calculator-1"]
    assert (row.status, row.reason, row.detail) == (
        Status.NO_OP,
        Reason.EMPTY_PATCH,
        "the patch is empty",
    )
    assert not row.tests_ran and not row.patch_applied and row.patch_bytes == 0


def test_the_pipeline_refuses_the_local_env_files_fallback(s3: Any, tmp_path: Path) -> None:
    """env_files_at_base is for local runs from forks: the build phase names artifacts by
    the environment_setup_commit, so the pipeline says so instead of building others."""
    store = SqliteStore(tmp_path / "store.sqlite")
    pipeline = Pipeline(PipelineSettings(table="unused", bucket=BUCKET), s3, store)
    try:
        with pytest.raises(ValueError, match="env_files_at_base is for local runs"):
            pipeline.resolve(
                StartEvent(run_id="aws-fork", patches="gold", config={"env_files_at_base": True})
            )
        assert store.get_run("aws-fork") is None
        with pytest.raises(ValueError, match="regression_check is for local runs"):
            pipeline.resolve(
                StartEvent(run_id="aws-rc", patches="gold", config={"regression_check": True})
            )
        assert store.get_run("aws-rc") is None
        with pytest.raises(ValueError, match="task_dialect agentswe is for local runs"):
            pipeline.resolve(
                StartEvent(
                    run_id="aws-turns",
                    patches="gold",
                    config={"task_dialect": {"solver": "agentswe"}},
                )
            )
        assert store.get_run("aws-turns") is None
    finally:
        store.close()


def test_the_pipeline_holds_a_run_to_the_deployments_ceilings(
    s3: Any, sample: SampleBenchmark, tmp_path: Path
) -> None:
    """What the gateway refuses with a 400, Resolve refuses too (a run started another
    way), and the worst-case task-hours, which only Resolve can count."""
    from swegreen.aws.guardrails import Guardrails

    s3.put_object(Bucket=BUCKET, Key="datasets/sample.jsonl", Body=sample.dataset.read_bytes())
    store = SqliteStore(tmp_path / "store.sqlite")
    guardrails = Guardrails(max_concurrent_rows=4, max_task_hours=2)
    settings = PipelineSettings(table="unused", bucket=BUCKET, guardrails=guardrails)
    pipeline = Pipeline(settings, s3, store)
    dataset = {"dataset": f"s3://{BUCKET}/datasets/sample.jsonl"}
    try:
        with pytest.raises(ValueError, match=r"max_concurrent_rows 5 is over .* ceiling of 4"):
            pipeline.resolve(
                StartEvent(
                    run_id="aws-wide", patches="gold", config={**dataset, "max_concurrent_rows": 5}
                )
            )
        # 3 rows of up to 30 min + 30 min each: 3 task-hours, over 2
        with pytest.raises(ValueError, match=r"worst case is 3 task-hours \(3 rows") as refused:
            pipeline.resolve(
                StartEvent(run_id="aws-long", patches="gold", config={**dataset, "max_rows": 3})
            )
        assert "select fewer rows" in str(refused.value)
        assert store.get_run("aws-wide") is None and store.get_run("aws-long") is None
        resolved = pipeline.resolve(
            StartEvent(
                run_id="aws-fits",
                patches="gold",
                config={**dataset, "max_rows": 1, "max_concurrent_rows": 4},
            )
        )
        assert resolved["count"] == 1
    finally:
        store.close()
