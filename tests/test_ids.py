"""Ids that become paths: one rule, checked where they enter, with errors that say the fix."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from swegreen.agent.assessment import AgentSettings, Assessment
from swegreen.agent.request import RequestError, parse_request
from swegreen.aws.pipeline import RunRequest, StartEvent
from swegreen.cli import main
from swegreen.core.dataset import load_dataset, parse_rows
from swegreen.core.errors import DatasetError, PredictionsError
from swegreen.core.ids import check_id, id_problem
from swegreen.core.sources import parse_predictions
from swegreen.evaluation.engine import LocalSettings
from swegreen.stores import artifacts as art

from .helpers import raw_row

SHARED_DATASET = Path(__file__).resolve().parents[2] / "shared" / "data" / "swebench_verified.jsonl"
UNSAFE = [
    "../escape",
    "a/b",
    "",
    ".hidden",
    "-flag",
    "a..b",
    "x" * 129,
    "with space",
    "naïve",
    "a\\b",
]


def test_every_swe_bench_verified_instance_id_is_accepted() -> None:
    if not SHARED_DATASET.exists():
        pytest.skip(f"{SHARED_DATASET} is not on this machine")
    dataset = load_dataset(str(SHARED_DATASET))  # validates every row's id
    assert len(dataset.instances) == 500
    assert [i.instance_id for i in dataset.instances if id_problem(i.instance_id)] == []
    assert {i.instance_id for i in dataset.instances} >= {
        "astropy__astropy-12907",
        "sympy__sympy-20590",
        "django__django-11099",
    }


@pytest.mark.parametrize("value", UNSAFE)
def test_unsafe_ids_are_refused_with_the_rule_and_a_safe_suggestion(value: str) -> None:
    assert id_problem(value) is not None
    with pytest.raises(ValueError) as info:
        check_id(value, "run id")
    message = str(info.value)
    assert f"run id {value!r} cannot be used" in message
    assert "letters, digits, '.', '_' or '-'" in message
    suggestion = message.rsplit("use e.g. ", 1)[1].strip("'")
    assert id_problem(suggestion) is None, suggestion


def test_dataset_rows_with_unsafe_ids_are_refused() -> None:
    rows = [raw_row(1), raw_row(2, instance_id="../../etc")]
    with pytest.raises(DatasetError) as info:
        parse_rows(rows, source="data.jsonl")
    assert "data.jsonl: row 2 (../../etc)" in str(info.value)
    assert "instance id '../../etc' cannot be used: it contains '/'" in str(info.value)


def test_predictions_with_unsafe_ids_are_refused() -> None:
    text = json.dumps({"instance_id": "o__r-1/../../x", "model_patch": None}) + "\n"
    with pytest.raises(PredictionsError) as info:
        parse_predictions(text, "preds.jsonl")
    assert str(info.value).startswith("preds.jsonl:1: instance id 'o__r-1/../../x'")


def test_a_run_id_flag_that_leaves_its_directory_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results"
    code = main(
        [
            "run",
            "--patches",
            "gold",
            "--dataset",
            str(tmp_path / "absent.jsonl"),
            "--run-id",
            "../escape",
            "--output-dir",
            str(out),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-progress",
        ]
    )
    said = " ".join(capsys.readouterr().out.split())
    assert code == 2
    assert "--run-id '../escape' cannot be used: it contains '/'" in said
    assert "use e.g. 'escape'" in said
    assert not out.exists() and not (tmp_path / "escape").exists()


def test_a2a_participant_roles_and_aws_run_ids_follow_the_rule() -> None:
    with pytest.raises(RequestError) as info:
        parse_request(json.dumps({"participants": {"../x": "http://127.0.0.1:1/"}}), {})
    assert "participant role '../x' cannot be used" in str(info.value)
    with pytest.raises(ValidationError, match=re.escape("run id '..' cannot be used")):
        StartEvent(run_id="..", patches="gold")
    with pytest.raises(ValidationError, match="participant role 'a b' cannot be used"):
        RunRequest(participants={"a b": "http://127.0.0.1:1/"})
    assert StartEvent(run_id="3f6c1c1e-0b9e-4c59-9f0e-6d6b2f0f8a11", patches="gold")


def test_artifact_keys_refuse_unsafe_ids_as_a_last_line() -> None:
    assert art.instance_key("run-1", "o__r-1", art.PATCH) == "run-1/instances/o__r-1/patch.diff"
    with pytest.raises(ValueError, match="instance id"):
        art.instance_key("run-1", "../../x", art.PATCH)
    with pytest.raises(ValueError, match="run id"):
        art.run_key("a/../../b", art.RUN_INFO)


def test_an_assessment_whose_run_id_would_be_unsafe_is_rejected(tmp_path: Path) -> None:
    role = "r" * 100  # a valid role, but with the task's id the run id is too long
    request, config = parse_request(json.dumps({"participants": {role: "http://127.0.0.1:1/"}}), {})
    settings = AgentSettings(local=LocalSettings(output_dir=tmp_path, cache_dir=tmp_path))

    async def nothing(_: str) -> None:
        return None

    assessment = Assessment(settings, request, config, "a2a-" + "0" * 36, nothing)
    with pytest.raises(RequestError) as info:
        asyncio.run(assessment.prepare())
    assert f"the run id of participant {role!r} (task id + role)" in str(info.value)
    assert "is 141 characters long" in str(info.value)


@pytest.mark.parametrize("repo", ["astropy", "../../etc/x", "o/r/../x", "o/..", "o/a b"])
def test_dataset_repos_must_be_a_safe_owner_and_name(repo: str) -> None:
    with pytest.raises(DatasetError, match="repo"):
        parse_rows([raw_row(1, repo="o/r") | {"repo": repo}], source="data.jsonl")
