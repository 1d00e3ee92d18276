"""Predictions files (SWE-bench's format) and the gold/empty sources."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from swegreen.core.dataset import parse_rows
from swegreen.core.errors import PredictionsError
from swegreen.core.ports import PatchResult
from swegreen.core.sources import (
    EmptyPatches,
    GoldPatches,
    PredictionsSource,
    exchange_entry,
    load_predictions,
    source_for,
)

from .helpers import raw_row


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_jsonl_json_list_and_swe_agent_dict_are_equivalent(tmp_path: Path) -> None:
    preds = [
        {"instance_id": "a", "model_name_or_path": "m", "model_patch": "diff a"},
        {"instance_id": "b", "model_name_or_path": "m", "model_patch": None},
    ]
    jsonl = load_predictions(
        write(tmp_path / "p.jsonl", "".join(json.dumps(p) + "\n" for p in preds))
    )
    as_list = load_predictions(write(tmp_path / "p.json", json.dumps(preds)))
    as_dict = load_predictions(
        write(tmp_path / "q.json", json.dumps({p["instance_id"]: p for p in preds}))
    )
    key = lambda d: {k: (v.model_patch, v.model_name_or_path) for k, v in d.items()}  # noqa: E731
    assert key(jsonl) == key(as_list) == key(as_dict)
    assert jsonl["b"].model_patch is None


def test_model_name_defaults_to_the_file_name(tmp_path: Path) -> None:
    preds = load_predictions(
        write(tmp_path / "my-agent.jsonl", '{"instance_id": "a", "model_patch": ""}\n')
    )
    assert preds["a"].model_name_or_path == "my-agent"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"instance_id": "a", "model_patch": "x"}\n{"instance_id": ',
            r"p.jsonl:2: not valid JSON",
        ),
        ('["not an object"]\n', r"p.jsonl:1: a prediction must be a JSON object"),
        ('{"model_patch": "x"}\n', r"p.jsonl:1: missing or empty 'instance_id'"),
        ('{"instance_id": "a"}\n', r"p.jsonl:1: a has no 'model_patch'"),
        ('{"instance_id": "a", "model_patch": 3}\n', r"model_patch must be a string"),
        (
            '{"instance_id": "a", "model_patch": "x"}\n{"instance_id": "a", "model_patch": "y"}\n',
            r"p.jsonl:2: a second prediction for a \(first at .*p.jsonl:1\)",
        ),
        ("\n\n", r"holds no predictions"),
        # the green agent's account of an exchange: its own fields, a participant's reasons
        (
            '{"instance_id": "a", "model_patch": null, "swegreen": {"failure": "test_timeout"}}',
            r"p.jsonl:1: 'swegreen.failure' 'test_timeout' is not a participant's reason",
        ),
        (
            '{"instance_id": "a", "model_patch": "x", "swegreen": {"status": "resolved"}}',
            r"p.jsonl:1: 'swegreen' holds status; it may hold conversation, detail",
        ),
        ('{"instance_id": "a", "model_patch": "x", "swegreen": 1}', r"must be an object"),
        (
            '{"instance_id": "a", "model_patch": "x", "swegreen": {"duration": -1}}',
            r"'swegreen.duration' must be seconds",
        ),
    ],
)
def test_corrupt_predictions_files_name_the_line(
    tmp_path: Path, content: str, message: str
) -> None:
    with pytest.raises(PredictionsError, match=message):
        load_predictions(write(tmp_path / "p.jsonl", content))


def test_wrong_suffix_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PredictionsError, match=r"must be a \.jsonl or \.json"):
        load_predictions(write(tmp_path / "p.txt", "{}"))
    with pytest.raises(PredictionsError, match="does not exist"):
        load_predictions(tmp_path / "nope.jsonl")
    with pytest.raises(PredictionsError, match="not valid JSON"):
        load_predictions(write(tmp_path / "p.json", "{"))


def test_predictions_for_unknown_instances_are_refused(tmp_path: Path) -> None:
    src = PredictionsSource(
        write(tmp_path / "p.jsonl", '{"instance_id": "zz", "model_patch": "x"}\n')
    )
    with pytest.raises(PredictionsError, match="not in the dataset: zz"):
        src.check_against(["o__r-1"])


def test_sources_give_the_expected_patches(tmp_path: Path) -> None:
    inst = parse_rows([raw_row(1, patch="diff --git gold")])[0]
    path = write(tmp_path / "p.jsonl", '{"instance_id": "other", "model_patch": "x"}\n')
    assert asyncio.run(GoldPatches().get_patch(inst)).patch == "diff --git gold"
    assert asyncio.run(EmptyPatches().get_patch(inst)).patch == ""
    missing = asyncio.run(PredictionsSource(path).get_patch(inst))
    assert missing.patch is None and missing.failure == "no_patch"
    assert isinstance(source_for("gold"), GoldPatches) and isinstance(
        source_for("empty"), EmptyPatches
    )


def test_an_exchange_written_as_a_prediction_reads_back_as_it_ended(tmp_path: Path) -> None:
    """What the green agent sends the pipeline: each row's patch or why there is none,
    with the participant's time, usage and dialect; read back, the same PatchResult."""
    answered = PatchResult(
        "diff --git a/x b/x\n",
        "coder",
        duration=12.5,
        usage={"tokens": 7},
        conversation={"dialect": "swegreen", "chosen_by": "card"},
    )
    timed_out = PatchResult(
        None, "coder", failure="participant_timeout", detail="no answer in 60 s", duration=60.0
    )
    lines = [exchange_entry("a", answered), exchange_entry("b", timed_out)]
    path = write(tmp_path / "p.jsonl", "\n".join(json.dumps(e) for e in lines))
    source = PredictionsSource(path)
    from swegreen.core.dataset import Instance

    got = {
        iid: asyncio.run(source.get_patch(Instance.model_construct(instance_id=iid)))
        for iid in ("a", "b")
    }
    assert got["a"] == answered
    assert got["b"] == timed_out
    # a file from any other tool is read as before: the patch, nothing claimed about it
    plain = write(tmp_path / "q.jsonl", '{"instance_id": "a", "model_patch": "x"}')
    result = asyncio.run(
        PredictionsSource(plain).get_patch(Instance.model_construct(instance_id="a"))
    )
    assert result == PatchResult("x", "q")
