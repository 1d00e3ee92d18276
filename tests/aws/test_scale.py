"""The pipeline's steps at scale (a real S3 API: moto): 2,500 rows, past S3's 1,000-key
listing page and, as one list, past the 256 KB a Step Functions state may carry. Nothing
in the steps changes with size beyond those; 10,000 rows (the most a run may have) took
two minutes of the suite on two cores and found nothing more.

Resolve writes every row's objects (its instance, its prediction) and the Map's lists;
Dispatch reads only its own row's prediction, never the run's whole predictions file;
Aggregate writes the rows the Map lost (in parallel) and publishes every row."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from swegreen.aws.guardrails import Guardrails
from swegreen.aws.pipeline import PREDICTION, Item, Pipeline, PipelineSettings, StartEvent
from swegreen.core.classify import Reason, Status
from swegreen.core.dataset import load_dataset
from swegreen.core.results import InstanceResult
from swegreen.sample import SampleBenchmark
from swegreen.stores.sqlite import SqliteStore

BUCKET = "scale"
ROWS = 2_500


@pytest.fixture
def s3(mocked_s3: Any) -> Any:
    mocked_s3.create_bucket(Bucket=BUCKET)
    return mocked_s3


def test_thousands_of_rows_resolve_and_dispatch_from_their_own_objects(
    s3: Any, sample: SampleBenchmark, tmp_path: Path
) -> None:
    base = list(load_dataset(str(sample.dataset)).instances)
    rows, predictions, ids = [], [], []
    for n in range(ROWS):
        inst = base[n % len(base)]
        iid = f"{inst.instance_id}.{n:05d}"
        ids.append(iid)
        rows.append(json.dumps({**inst.to_row(), "instance_id": iid}))
        if n % 10:  # every tenth row has no prediction
            predictions.append(
                json.dumps(
                    {"instance_id": iid, "model_name_or_path": "m", "model_patch": inst.patch}
                )
            )
    s3.put_object(Bucket=BUCKET, Key="datasets/big.jsonl", Body="\n".join(rows).encode())
    s3.put_object(Bucket=BUCKET, Key="predictions/m.jsonl", Body="\n".join(predictions).encode())
    store = SqliteStore(tmp_path / "store.sqlite")
    # a deployment whose owner allows a run this size (swegreen:guardrails)
    guardrails = Guardrails(max_task_hours=ROWS)
    settings = PipelineSettings(table="unused", bucket=BUCKET, guardrails=guardrails)
    pipeline = Pipeline(settings, s3, store)
    try:
        config = {"dataset": f"s3://{BUCKET}/datasets/big.jsonl", "max_rows": -1}
        resolved = pipeline.resolve(
            StartEvent(run_id="big", patches="predictions/m.jsonl", config=config, batch=False)
        )
        assert resolved["count"] == ROWS
        items = json.loads(s3.get_object(Bucket=BUCKET, Key=resolved["items_key"])["Body"].read())
        assert len(items) == ROWS
        record = store.get_run("big")
        assert record is not None and len(record.instance_ids) == ROWS
        # Dispatch no longer needs the run's file: only the row's own object
        s3.delete_object(Bucket=BUCKET, Key="predictions/m.jsonl")
        by_id = {i["instance_id"]: Item.model_validate(i) for i in items}
        with_patch, without = by_id[ids[1]], by_id[ids[0]]
        state = asyncio.run(pipeline.dispatch(with_patch))
        assert state.done and state.patch_key and state.model == "m"
        missing = asyncio.run(pipeline.dispatch(without))
        assert missing.failure == Reason.NO_PATCH and "has no prediction" in missing.detail
        listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="runs/big/instances/", MaxKeys=1000)
        assert listed["KeyCount"] == 1000  # (paged) every row has its objects
        own = s3.get_object(
            Bucket=BUCKET, Key=f"runs/big/instances/{with_patch.instance_id}/{PREDICTION}"
        )
        assert json.loads(own["Body"].read())["model_name_or_path"] == "m"

        # Aggregate: 95% of the rows written, 5% lost by the Map (written now as error
        # rows, from their own instance objects); the leaderboard counts them all
        for n, iid in enumerate(ids):
            if n % 20:
                store.save_result(
                    "big",
                    InstanceResult(
                        instance_id=iid, repo="r", status=Status.RESOLVED, reason="resolved",
                        model_name_or_path="m", patch_applied=True, tests_ran=True,
                        f2p_passed=1, f2p_total=1, p2p_passed=2, p2p_total=2,
                    ),
                )  # fmt: skip
        summary = pipeline.aggregate("big")["summary"]
        assert summary["total_instances"] == ROWS
        assert summary["resolved_pct"] == pytest.approx(0.95)
        assert summary["error_pct"] == pytest.approx(0.05)
        stored = store.get_results("big")
        assert len(stored) == ROWS
        assert stored[ids[0]].status is Status.ERROR
        assert "ended without a row" in stored[ids[0]].detail
        published = s3.get_object(Bucket=BUCKET, Key="runs/big/instances.jsonl")["Body"].read()
        assert len(published.splitlines()) == ROWS
    finally:
        store.close()
