"""What a run publishes of its making identifies it without exposing the host's paths."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from swegreen.core.config import EvalConfig, public_url_template
from swegreen.core.dataset import load_dataset, public_dataset_name
from swegreen.evaluation.engine import LocalSettings
from swegreen.sample import SampleBenchmark
from swegreen.stores import artifacts as art

from .conftest import RunSample
from .helpers import raw_row


@pytest.mark.parametrize(
    ("template", "published"),
    [
        ("https://github.com/{repo}.git", "https://github.com/{repo}.git"),
        (
            "https://x-access-token:ghp_secret@github.com/{repo}.git",
            "https://github.com/{repo}.git",
        ),
        (
            "http://mirror.internal:8080/git/{owner}/{name}",
            "http://mirror.internal:8080/git/{owner}/{name}",
        ),
        ("ssh://git@github.com/{repo}.git", "ssh://git@github.com/{repo}.git"),
        ("git@github.com:{repo}.git", "git@github.com:{repo}.git"),
        ("/mirrors/{owner}__{name}.git", "local"),
        ("file:///home/me/mirrors/{owner}__{name}", "local"),
        ("../relative/{name}", "local"),
    ],
)
def test_repository_templates_are_published_only_as_urls(template: str, published: str) -> None:
    assert public_url_template(template) == published
    assert EvalConfig(repo_url_template=template).public()["repo_url_template"] == published


def test_datasets_are_published_by_hub_id_or_file_name(tmp_path: Path) -> None:
    path = tmp_path / "secret-project" / "rows.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps(raw_row(1)) + "\n")
    assert public_dataset_name(str(path)) == "local:rows.jsonl"
    assert public_dataset_name("SWE-bench/SWE-bench_Verified") == "SWE-bench/SWE-bench_Verified"
    assert public_dataset_name("s3://bucket/datasets/x.jsonl") == "s3://bucket/datasets/x.jsonl"
    assert public_dataset_name("file:///srv/data/x.jsonl") == "local:x.jsonl"
    dataset = load_dataset(str(path))
    assert dataset.provenance() == {
        "dataset": "local:rows.jsonl",
        "split": "test",
        "dataset_revision": None,
        "dataset_digest": dataset.digest,
        "dataset_file_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }
    assert EvalConfig(dataset=str(path)).public()["dataset"] == "local:rows.jsonl"


def test_a_published_run_names_no_host_path(
    run_sample: RunSample, settings: LocalSettings, sample: SampleBenchmark
) -> None:
    # (base validation caches per instance in the session's cache: test_engine_sample's
    # test of it wants calculator-1 and textkit-1 uncached)
    outcome = run_sample(
        "gold", run_id="provenance", instance_ids=["sample__calculator-2"], base_validation=True
    )
    provenance = outcome.result_row["provenance"]
    assert provenance["dataset"] == f"local:{sample.dataset.name}"
    assert (
        provenance["dataset_file_sha256"] == hashlib.sha256(sample.dataset.read_bytes()).hexdigest()
    )
    assert provenance["dataset_digest"] == outcome.record.dataset_digest
    assert provenance["config"]["dataset"] == f"local:{sample.dataset.name}"
    assert provenance["config"]["repo_url_template"] == "local"
    published = (settings.output_dir / "provenance" / art.RESULTS).read_text()
    on_file = json.loads(published)["results"][0]["provenance"]
    assert on_file == {k: v for k, v in provenance.items() if k != "finished_at"}
    for host_path in (settings.cache_dir, sample.root, settings.output_dir, Path.home()):
        assert str(host_path) not in published, host_path
    [row] = json.loads(published)["results"][0]["instances"]
    assert (
        row["base_validation"]["log"].endswith(".log") and "/" not in row["base_validation"]["log"]
    )
    # The local record keeps the real path: regrade reloads the dataset from it.
    assert outcome.record.dataset == str(sample.dataset)
