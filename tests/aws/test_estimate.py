"""What a run will take and cost, said before it starts (Resolve's estimate, the dry run),
and results of any size through the API's pages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from swegreen.aws import cost_model
from swegreen.aws.pipeline import Pipeline, PipelineSettings, StartEvent
from swegreen.core.classify import Status
from swegreen.core.dataset import load_dataset
from swegreen.core.results import InstanceResult
from swegreen.reports.publish import PAGE_BYTES, joined, pages, public_row
from swegreen.sample import SampleBenchmark
from swegreen.stores.sqlite import SqliteStore

BUCKET = "estimates"
VERIFIED_500 = cost_model.verified_rows(cost_model.Scenario())


def test_fewer_tasks_at_once_take_longer_and_say_how_to_get_more() -> None:
    asked = cost_model.estimate(
        VERIFIED_500, concurrency=100, asked_concurrency=100, build_concurrency=50
    )
    capped = cost_model.estimate(
        VERIFIED_500, concurrency=6, asked_concurrency=100, build_concurrency=2,
        region="eu-west-1",
    )  # fmt: skip
    assert asked.raise_quota == ""
    assert capped.pessimistic.wall_minutes > 10 * asked.pessimistic.wall_minutes
    assert "--region eu-west-1" in capped.raise_quota
    assert "--quota-code L-36FBB829 --desired-value 200" in capped.raise_quota
    assert "L-3032A538" in capped.raise_quota
    for bound in (asked, capped):
        assert bound.optimistic.wall_minutes < bound.pessimistic.wall_minutes
        assert bound.optimistic.usd < bound.pessimistic.usd


def test_what_the_bucket_lacks_is_built_first_and_costs_more() -> None:
    warm = cost_model.estimate(
        VERIFIED_500, concurrency=100, asked_concurrency=100, build_concurrency=50
    )
    cold = cost_model.estimate(
        VERIFIED_500,
        concurrency=100,
        asked_concurrency=100,
        build_concurrency=50,
        mirrors=sorted(cost_model.VERIFIED),
        envs=["django/django"] * 20 + ["astropy/astropy"] * 10,
        prepares=[["django/django"] * 4] * 60,
    )
    assert (warm.builds, warm.prepares, warm.pessimistic.build_usd) == (0, 0, 0)
    assert (cold.builds, cold.prepares) == (12 + 30, 60)
    assert cold.pessimistic.build_minutes > 0
    assert cold.pessimistic.wall_minutes > warm.pessimistic.wall_minutes
    assert cold.pessimistic.usd > warm.pessimistic.usd


@pytest.fixture
def s3(mocked_s3: Any) -> Any:
    mocked_s3.create_bucket(Bucket=BUCKET)
    return mocked_s3


def test_a_dry_run_records_its_estimate_and_starts_nothing(
    s3: Any, sample: SampleBenchmark, tmp_path: Path
) -> None:
    s3.put_object(Bucket=BUCKET, Key="datasets/sample.jsonl", Body=sample.dataset.read_bytes())
    store = SqliteStore(tmp_path / "store.sqlite")
    pipeline = Pipeline(PipelineSettings(table="unused", bucket=BUCKET), s3, store)
    config = {"dataset": f"s3://{BUCKET}/datasets/sample.jsonl", "max_rows": 3}
    try:
        resolved = pipeline.resolve(
            StartEvent(run_id="dry", patches="gold", config=config, dry_run=True)
        )
        assert resolved == {"run_id": "dry", "dry_run": True, "count": 3}
        record = store.get_run("dry")
        assert record is not None and record.state == "estimated"
        estimate = cost_model.Estimate.model_validate(record.provenance["estimate"])
        assert estimate.rows == 3 and estimate.concurrency == 1
        # nothing built: the bucket holds no artifacts, so the estimate includes building them
        assert estimate.builds > 0 and estimate.pessimistic.build_usd > 0
        listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="runs/")
        assert listed["KeyCount"] == 0, [o["Key"] for o in listed["Contents"]]
        # the same request for real records the same estimate and writes the Map's items
        real = pipeline.resolve(StartEvent(run_id="real", patches="gold", config=config))
        assert real["dry_run"] is False and real["count"] == 3
        stored = store.get_run("real")
        assert stored is not None and stored.state == "running"
        assert stored.provenance["estimate"] == record.provenance["estimate"]
    finally:
        store.close()


def _big_results(rows: int, sample: SampleBenchmark) -> dict[str, Any]:
    """results.json of a run of ``rows`` rows, each with a full detail (as failing rows
    carry): larger than API Gateway's 10 MB."""
    base = list(load_dataset(str(sample.dataset)).instances)
    instances = [
        public_row(
            InstanceResult(
                instance_id=f"{base[n % len(base)].instance_id}.{n:05d}",
                repo=base[n % len(base)].repo,
                status=Status.ERROR,
                reason="sandbox_crashed",
                detail="x" * 2000,
                model_name_or_path="m",
            )
        )
        for n in range(rows)
    ]
    board = {"total_instances": rows, "resolved_pct": 0.0}
    return {"participants": {"agent": "m"}, "results": [{**board, "instances": instances}]}


def test_ten_thousand_rows_reach_the_caller_in_pages_under_the_apis_limit(
    sample: SampleBenchmark,
) -> None:
    document = _big_results(10_000, sample)
    assert len(json.dumps(document)) > 10 * 1024 * 1024
    cut = pages(document)
    assert len(cut) > 1 and [p["page"] for p in cut] == list(range(1, len(cut) + 1))
    assert {p["pages"] for p in cut} == {len(cut)}
    for page in cut:
        assert len(json.dumps(page)) < PAGE_BYTES + 64 * 1024  # the leaderboard row's fields
        assert page["participants"] == document["participants"]
    assert joined(cut) == document
    # a run that fits is one page: the document as it always was, with page 1 of 1
    small = _big_results(3, sample)
    assert pages(small) == [{**small, "page": 1, "pages": 1}]


def test_no_run_ends_before_its_floor_and_a_row_per_slot_ends_on_it() -> None:
    """The floor (one start and the slowest row) bounds every schedule; with a slot and a
    task for every row and nothing reclaimed, the run is its slowest row."""
    for batch in (1, 8):
        for concurrency in (10, 100):
            s = cost_model.Scenario(concurrency=concurrency, max_batch_rows=batch, seed=3)
            f = cost_model.simulate(s)
            assert 0 < f.floor_minutes <= f.wall_minutes
    alone = cost_model.Scenario(rows=40, concurrency=40, spot_interruptions=0.0)
    f = cost_model.simulate(alone)
    assert f.wall_minutes == pytest.approx(f.floor_minutes)


def test_a_run_counts_the_rows_and_build_tasks_the_runs_running_beside_it_hold(
    s3: Any, sample: SampleBenchmark, tmp_path: Path
) -> None:
    """Resolve reads the runs running beside a new one from the store: what their
    capacity gave them is taken from the quotas before this run's is fitted, their build
    phase's tasks too (a cold run holds 4-vCPU build tasks before any row starts)."""
    s3.put_object(Bucket=BUCKET, Key="datasets/sample.jsonl", Body=sample.dataset.read_bytes())
    store = SqliteStore(tmp_path / "store.sqlite")
    pipeline = Pipeline(PipelineSettings(table="unused", bucket=BUCKET), s3, store)
    config = {"dataset": f"s3://{BUCKET}/datasets/sample.jsonl", "max_rows": 3}
    try:
        pipeline.resolve(
            StartEvent(run_id="first", patches="gold", config={**config, "max_concurrent_rows": 3})
        )
        first = store.get_run("first")
        assert first is not None
        estimate = first.provenance["estimate"]
        work = estimate["builds"] + estimate["prepares"]
        assert work > 0  # the bucket held no artifacts: a cold run, its build phase first
        held = pipeline._held("second")
        settings = pipeline.settings
        builds = min(first.provenance["capacity"]["builds"], work)
        assert held.rows == 3
        assert held.vcpu == max(3 * settings.sandbox_vcpu, builds * settings.build_vcpu)
        assert held.vcpu > 3 * settings.sandbox_vcpu  # the build tasks, not the rows
        assert pipeline._held("first").rows == 0  # not its own
        store.update_run(first.model_copy(update={"state": "finished"}))
        assert (pipeline._held("second").rows, pipeline._held("second").vcpu) == (
            0,
            0.0,
        )  # finished: holds nothing
    finally:
        store.close()


def test_a_run_the_quotas_hold_back_is_told_the_requests_and_what_they_would_give(
    s3: Any, sample: SampleBenchmark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resolve reads the account's Fargate quotas (2 + 2 vCPUs: 2 rows of 2 vCPU) and its
    Lambda concurrency (moto's answer); a run of the sample's rows that names no
    concurrency is fitted to 2 at a time, and its estimate carries the requests that
    would give it all its rows at once and the time it would then take."""
    import boto3
    from moto.servicequotas.models import ServiceQuotasBackend

    from swegreen.aws.quotas import ON_DEMAND_VCPU, SPOT_VCPU

    answers = {ON_DEMAND_VCPU: 2.0, SPOT_VCPU: 2.0}
    original = ServiceQuotasBackend.get_service_quota

    def fargate(backend: Any, service_code: str, quota_code: str) -> Any:
        if service_code == "fargate" and quota_code in answers:  # moto knows only VPC's
            return {"ServiceCode": "fargate", "QuotaCode": quota_code, "Value": answers[quota_code]}
        return original(backend, service_code, quota_code)

    monkeypatch.setattr(ServiceQuotasBackend, "get_service_quota", fargate)
    s3.put_object(Bucket=BUCKET, Key="datasets/sample.jsonl", Body=sample.dataset.read_bytes())
    store = SqliteStore(tmp_path / "store.sqlite")
    pipeline = Pipeline(
        PipelineSettings(table="unused", bucket=BUCKET),
        s3,
        store,
        boto3.client("service-quotas", region_name="us-east-1"),
        boto3.client("lambda", region_name="us-east-1"),
    )
    config = {"dataset": f"s3://{BUCKET}/datasets/sample.jsonl", "max_rows": -1}
    try:
        pipeline.resolve(StartEvent(run_id="held", patches="gold", config=config, dry_run=True))
        record = store.get_run("held")
    finally:
        store.close()
    assert record is not None
    rows = len(sample.expected)
    assert record.provenance["capacity"]["rows"] == 2
    estimate = record.provenance["estimate"]
    assert estimate["concurrency"] == 2 and estimate["wanted"] == rows
    assert estimate["raise_quota"].startswith(f"{rows} rows at a time need: ")
    assert f"--quota-code {SPOT_VCPU} --desired-value {2 * rows}" in estimate["raise_quota"]
    assert f"--quota-code {ON_DEMAND_VCPU} --desired-value {2 * rows}" in estimate["raise_quota"]
    faster, slower = estimate["wanted_minutes"]
    rows_only = estimate["pessimistic"]["wall_minutes"] - estimate["pessimistic"]["build_minutes"]
    assert faster <= slower < rows_only
