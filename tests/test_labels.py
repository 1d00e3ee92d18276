"""Pinned labels: a run against rows labelled otherwise says which rows, in its record
and on the console; the same labels say nothing."""

from __future__ import annotations

import json
from pathlib import Path

from swegreen.core.dataset import load_dataset
from swegreen.core.labels import check_labels, label_digest, pin_file, pinned

from .test_cli import SHARED_DATASET, cli

RELABELLED = ("astropy__astropy-7606", "django__django-10097", "astropy__astropy-8707")


def relabel(rows: list[dict], tmp_path: Path) -> Path:
    """The offline copy as the hub served it after a relabelling: a P2P list changed on
    two rows, an eval script added to a third."""
    for row in rows:
        if row["instance_id"] in RELABELLED[:2]:
            p2p = json.loads(row["PASS_TO_PASS"])
            row["PASS_TO_PASS"] = json.dumps(p2p[:-1])  # one test dropped
        elif row["instance_id"] == RELABELLED[2]:
            row["eval_script"] = "#!/bin/bash\necho relabelled\n"
    path = tmp_path / "relabelled.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_pin_is_the_offline_copy_and_a_relabelling_is_found_row_by_row(
    tmp_path: Path,
) -> None:
    offline = load_dataset(str(SHARED_DATASET))
    pin = pinned()
    assert len(pin.labels) == 500 and pin.source and pin.name
    same = check_labels(offline.instances)
    assert same is not None and same.checked == 500 and same.differ == ()
    assert same.warning() is None
    # the file the script writes is the one the package holds
    assert json.loads(pin_file(offline.instances, pin.name, pin.source))["labels"] == pin.labels

    rows = [json.loads(line) for line in SHARED_DATASET.read_text().splitlines()]
    moved = load_dataset(str(relabel(rows, tmp_path))).instances
    check = check_labels(moved)
    assert check is not None and check.checked == 500
    assert check.differ == tuple(sorted(RELABELLED))
    assert "3 row(s)" in (check.warning() or "")
    # only what grading reads counts: a problem statement edited is not a relabelling
    edited = [i.model_copy(update={"problem_statement": "x"}) for i in offline.instances[:3]]
    assert [label_digest(i) for i in edited] == [
        pin.labels[i.instance_id] for i in offline.instances[:3]
    ]
    # another dataset (the sample, a user's own) is not compared at all
    assert check_labels([]) is None


def test_a_run_on_relabelled_rows_warns_and_records_which(
    tmp_path: Path, session_cache: Path
) -> None:
    rows = [json.loads(line) for line in SHARED_DATASET.read_text().splitlines()]
    dataset = relabel(rows, tmp_path)
    ids = ",".join([RELABELLED[0], RELABELLED[1], "astropy__astropy-12907"])
    out = cli(
        "run",
        "--dataset",
        str(dataset),
        "--instance-ids",
        ids,
        "--patches",
        "empty",
        "--run-id",
        "relabelled",
        "--no-progress",
        cwd=tmp_path,
        cache=session_cache,
    )
    assert out.returncode == 0, out.stderr
    said = out.stdout + out.stderr
    assert "differ from the pinned ones" in said and RELABELLED[0] in said
    published = json.loads((tmp_path / "results" / "relabelled" / "results.json").read_text())
    labels = published["results"][0]["provenance"]["labels"]
    assert labels["rows_checked"] == 3
    assert labels["differ"] == sorted(RELABELLED[:2])
    assert labels["pinned"] == pinned().name
