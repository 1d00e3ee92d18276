"""Rows in batches (one task evaluates several in turn): how Resolve groups them, what a
batch's Presign hands the task, and how a batch's rows are written when its task failed
(a real S3 API: moto; the pipeline's steps in process)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from swegreen.aws.pipeline import (
    BatchEvent,
    Item,
    Pipeline,
    PipelineSettings,
    SandboxBatch,
    StartEvent,
)
from swegreen.core.dataset import load_dataset
from swegreen.core.schedule import balanced
from swegreen.sample import SampleBenchmark
from swegreen.stores import artifacts as art
from swegreen.stores.sqlite import SqliteStore

BUCKET = "batches"


@pytest.fixture
def pipeline(mocked_s3: Any, sample: SampleBenchmark, tmp_path: Path) -> Any:
    mocked_s3.create_bucket(Bucket=BUCKET)
    mocked_s3.put_object(
        Bucket=BUCKET, Key="datasets/sample.jsonl", Body=sample.dataset.read_bytes()
    )
    store = SqliteStore(tmp_path / "store.sqlite")
    yield Pipeline(PipelineSettings(table="unused", bucket=BUCKET), mocked_s3, store)
    store.close()


def _items(pipeline: Any, run_id: str) -> list[Item]:
    key = f"runs/{run_id}/items.json"
    body = pipeline.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    return [Item.model_validate(i) for i in json.loads(body)]


CONFIG = {"dataset": f"s3://{BUCKET}/datasets/sample.jsonl", "max_rows": -1}


def test_known_patches_run_in_balanced_batches_and_a_network_row_alone(
    pipeline: Any, sample: SampleBenchmark
) -> None:
    rows = sorted(sample.expected)
    network_row = rows[0]
    config = {**CONFIG, "max_concurrent_rows": 2, "network_instances": [network_row]}
    resolved = pipeline.resolve(StartEvent(run_id="b", patches="gold", config=config))
    items = _items(pipeline, "b")
    assert resolved["count"] == len(rows) and resolved["items"] == len(items) == 3
    batched = [i for i in items if i.batch]
    alone = [i for i in items if not i.batch]
    assert [i.instance_id for i in alone] == [network_row]
    assert len(batched) == 2 and all(i.instance_id == i.batch[0] for i in batched)
    assert sorted(r for i in batched for r in i.batch) == rows[1:]
    # each row of a batch is an item of its own to the steps that take rows
    assert [r.instance_id for r in batched[0].rows()] == batched[0].batch
    assert all(not r.batch for r in batched[0].rows())
    # one per row when asked, and for A2A participants (whose patches come when they come)
    pipeline.resolve(StartEvent(run_id="one", patches="gold", config=config, batch=False))
    assert all(not i.batch for i in _items(pipeline, "one"))
    with pytest.raises(ValueError, match="batch is for patches known up front"):
        pipeline.resolve(
            StartEvent(
                run_id="a", participants={"x": "http://127.0.0.1:9"}, config=CONFIG, batch=True
            )
        )


def test_batches_balance_expected_time_slowest_first(sample: SampleBenchmark) -> None:
    instances = list(load_dataset(str(sample.dataset)).instances)
    seconds = {i.repo: float(n + 1) for n, i in enumerate(instances)}
    groups = balanced(instances, 3, seconds)
    assert sorted(i.instance_id for g in groups for i in g) == sorted(
        i.instance_id for i in instances
    )
    loads = [sum(seconds[i.repo] for i in g) for g in groups]
    assert loads == sorted(loads, reverse=True) and len(groups) <= 3
    # longest-processing-time first: within 4/3 of the best split
    assert max(loads) <= 4 / 3 * max(
        sum(seconds[i.repo] for i in instances) / 3, max(seconds.values())
    )


def test_a_batch_task_gets_only_the_rows_still_to_do_and_failed_rows_keep_their_results(
    pipeline: Any,
) -> None:
    pipeline.resolve(
        StartEvent(run_id="r", patches="gold", config={**CONFIG, "max_concurrent_rows": 1})
    )
    (item,) = _items(pipeline, "r")
    patches = asyncio.run(pipeline.dispatch_batch(item))
    assert patches.any_patch and set(patches.rows) == set(item.batch)
    # one row was evaluated by an earlier attempt (its engine wrote its result)
    done = item.batch[0]
    graded = {
        "instance_id": done, "repo": "sample/x", "status": "resolved", "reason": "resolved",
        "patch_applied": True, "tests_ran": True, "f2p_passed": 1, "f2p_total": 1,
        "p2p_passed": 0, "p2p_total": 0, "model_name_or_path": "gold",
    }  # fmt: skip
    result_key = f"runs/{art.instance_key('r', done, art.RESULT)}"
    pipeline.s3.put_object(Bucket=BUCKET, Key=result_key, Body=json.dumps(graded).encode())
    ticket = pipeline.presign_batch(item, patches)
    manifest_key = f"runs/{art.instance_key('r', item.instance_id, 'sandbox-batch.json')}"
    manifest = SandboxBatch.model_validate_json(
        pipeline.s3.get_object(Bucket=BUCKET, Key=manifest_key)["Body"].read()
    )
    assert ticket.input_url and ticket.network == "closed"
    # this bucket holds no prebuilt artifacts: no other row can start; each has its error
    # row as its result, with the reason, and the manifest is empty
    assert manifest.rows == []
    for iid in item.batch[1:]:
        key = f"runs/{art.instance_key('r', iid, art.RESULT)}"
        row = json.loads(pipeline.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
        assert row["status"] == "error" and row["reason"] == "repo_unavailable", row
    # the task then failed for good: rows with a result are classified from it, the
    # others (none here but a row whose result is removed) get the batch's error
    pipeline.s3.delete_object(
        Bucket=BUCKET, Key=f"runs/{art.instance_key('r', item.batch[-1], art.RESULT)}"
    )
    error = {"Error": "States.TaskFailed", "Cause": "reclaimed"}
    events = pipeline.batch_events(BatchEvent(item=item, patches=patches, error=error))
    assert [e.item.instance_id for e in events] == item.batch
    assert [e.error for e in events] == [None] * (len(item.batch) - 1) + [error]
    for event in events:
        pipeline.classify_row(event)
    stored = pipeline.store.get_results("r")
    assert stored[done].status.value == "resolved"
    assert stored[item.batch[-1]].status.value == "error"
    assert "reclaimed" in stored[item.batch[-1]].detail


def test_no_batch_passes_its_size_however_fast_its_rows(sample: SampleBenchmark) -> None:
    instances = list(load_dataset(str(sample.dataset)).instances)
    slow = instances[0].repo
    seconds = {i.repo: (1000.0 if i.repo == slow else 1.0) for i in instances}
    groups = balanced(instances, 2, seconds, max_size=3)
    assert max(len(g) for g in groups) <= 3
    assert sorted(i.instance_id for g in groups for i in g) == sorted(
        i.instance_id for i in instances
    )
