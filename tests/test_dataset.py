"""Loading rows (jsonl/json/parquet, F2P as strings or lists) and deterministic selection."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from swegreen.core.dataset import (
    DEFAULT_DATASET,
    Dataset,
    Selection,
    find_snapshot,
    load_dataset,
    parse_rows,
    select_instances,
)
from swegreen.core.errors import DatasetError

from .helpers import raw_row

SHARED_DATASET = Path(__file__).resolve().parents[2] / "shared" / "data" / "swebench_verified.jsonl"


def dataset_of(rows: list[dict[str, object]]) -> Dataset:
    instances = parse_rows(rows)
    return Dataset("mem", "test", None, instances, "d")


def test_loads_jsonl_json_and_parquet_alike(tmp_path: Path) -> None:
    rows = [raw_row(i) for i in range(3)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "d.json").write_text(json.dumps(rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    loaded = [load_dataset(str(tmp_path / f"d.{ext}")) for ext in ("jsonl", "json", "parquet")]
    assert loaded[0].instances == loaded[1].instances == loaded[2].instances
    assert loaded[0].digest == loaded[2].digest
    assert loaded[0].instances[0].FAIL_TO_PASS == ("t0",)


def test_a_parsed_file_is_kept_by_its_bytes_and_read_back_without_parsing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import swegreen.core.dataset as dataset_module

    path, cache = tmp_path / "d.jsonl", tmp_path / "cache" / "datasets"
    path.write_text("".join(json.dumps(raw_row(i)) + "\n" for i in range(3)))
    first = load_dataset(str(path), parsed_cache=cache)
    (kept,) = cache.glob("*.pickle")
    assert kept.stat().st_mode & 0o077 == 0  # it holds gold patches: the owner's alone

    def no_parse(*_: object, **__: object) -> None:
        raise AssertionError("parsed again")

    monkeypatch.setattr(dataset_module, "parse_rows", no_parse)
    again = load_dataset(str(path), parsed_cache=cache)
    assert again == first  # rows, digest and the file's sha256
    monkeypatch.undo()

    # Changed bytes are a new key: the change is seen, never the old parse.
    path.write_text("".join(json.dumps(raw_row(i)) + "\n" for i in range(2)))
    changed = load_dataset(str(path), parsed_cache=cache)
    assert len(changed.instances) == 2 and changed.digest != first.digest
    assert changed == load_dataset(str(path))  # the same as without a cache

    # A kept parse that cannot be read (truncated, another library's) is parsed again.
    for pickle_file in cache.glob("*.pickle"):
        pickle_file.write_bytes(b"not a pickle")
    assert load_dataset(str(path), parsed_cache=cache) == changed

    # At most PARSED_KEPT files are kept.
    for n in range(dataset_module.PARSED_KEPT + 2):
        path.write_text("".join(json.dumps(raw_row(i)) + "\n" for i in range(n + 1)))
        load_dataset(str(path), parsed_cache=cache)
    assert len(list(cache.glob("*.pickle"))) == dataset_module.PARSED_KEPT
    assert not list(cache.glob("*.part"))


def test_f2p_and_p2p_accept_lists_as_well_as_json_strings() -> None:
    a = parse_rows([raw_row(1)])[0]
    b = parse_rows([raw_row(1, FAIL_TO_PASS=["t1"], PASS_TO_PASS=[])])[0]
    assert a == b
    assert json.loads(a.to_row()["FAIL_TO_PASS"]) == ["t1"]


def test_optional_columns_default_sensibly() -> None:
    inst = parse_rows([raw_row(1, hints_text=None, version=3.1)])[0]
    assert inst.hints_text == "" and inst.version == "3.1"
    assert inst.environment_setup_commit == inst.base_commit
    assert inst.eval_script is None


def test_missing_column_names_the_row_and_the_column() -> None:
    row = raw_row(2)
    del row["test_patch"]
    with pytest.raises(
        DatasetError, match=r"row 1 \(o__r-2\) lacks required column\(s\) test_patch"
    ):
        parse_rows([row])


def test_bad_values_and_bad_files_are_clear(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="FAIL_TO_PASS"):
        parse_rows([raw_row(1, FAIL_TO_PASS="not json [")])
    with pytest.raises(DatasetError, match="appears twice"):
        parse_rows([raw_row(1), raw_row(1)])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(raw_row(1)) + "\n{oops\n")
    with pytest.raises(DatasetError, match=r"bad.jsonl:2: not valid JSON"):
        load_dataset(str(bad))
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset(str(tmp_path / "missing.jsonl"))
    cache = tmp_path / "cache"  # with a parse cache, the file is hashed before it is read
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset(str(tmp_path / "missing.jsonl"), parsed_cache=cache)
    (tmp_path / "empty.jsonl").touch()
    with pytest.raises(DatasetError, match="has no rows"):
        load_dataset(str(tmp_path / "empty.jsonl"), parsed_cache=cache)
    (tmp_path / "folder.jsonl").mkdir()
    with pytest.raises(DatasetError, match="cannot be read"):
        load_dataset(str(tmp_path / "folder.jsonl"), parsed_cache=cache)


def test_unknown_instance_id_is_an_error_with_a_suggestion() -> None:
    ds = dataset_of([raw_row(i) for i in range(3)])
    with pytest.raises(DatasetError, match=r"o__r-7 \(did you mean o__r-\d\?\)"):
        select_instances(ds, Selection(instance_ids=("o__r-1", "o__r-7")))


def test_selection_filters_sorts_and_cuts() -> None:
    rows = [raw_row(i, repo=repo) for i in (3, 1, 2) for repo in ("a/x", "b/y")]
    ds = dataset_of(rows)
    assert [i.instance_id for i in select_instances(ds, Selection(max_rows=2))] == [
        "a__x-1",
        "a__x-2",
    ]
    assert len(select_instances(ds, Selection(max_rows=-1))) == 6
    by_repo = select_instances(ds, Selection(max_rows=-1, repos=("b/y",)))
    assert [i.instance_id for i in by_repo] == ["b__y-1", "b__y-2", "b__y-3"]
    picked = select_instances(ds, Selection(max_rows=-1, instance_ids=("b__y-3", "a__x-2")))
    assert [i.instance_id for i in picked] == ["a__x-2", "b__y-3"]
    with pytest.raises(DatasetError, match="no rows for repo"):
        select_instances(ds, Selection(repos=("c/z",)))


def test_shards_partition_the_selection_whatever_the_file_order() -> None:
    rows = [raw_row(i, repo=repo) for i in range(10) for repo in ("a/x", "b/y", "c/z")]
    forward, backward = dataset_of(rows), dataset_of(list(reversed(rows)))
    whole = [i.instance_id for i in select_instances(forward, Selection(max_rows=20))]
    shards = [
        [
            i.instance_id
            for i in select_instances(backward, Selection(max_rows=20, shard_index=k, num_shards=3))
        ]
        for k in range(3)
    ]
    assert sorted(i for shard in shards for i in shard) == sorted(whole)
    assert all(set(a).isdisjoint(b) for a in shards for b in shards if a is not b)
    assert [len(s) for s in shards] == [7, 7, 6]


@pytest.mark.parametrize("num_shards", [1, 3, 7, 20, 31])
def test_contiguous_shards_partition_the_selection_in_runs_of_ids(num_shards: int) -> None:
    """The Docker backend's sharding: each shard a run of neighbouring ids (one repository
    mostly), the union exactly the selection, sizes within one of each other."""
    rows = [raw_row(i, repo=repo) for i in range(10) for repo in ("a/x", "b/y", "c/z")]
    ds = dataset_of(list(reversed(rows)))
    whole = [i.instance_id for i in select_instances(ds, Selection(max_rows=-1))]
    shards = [
        [
            i.instance_id
            for i in select_instances(
                ds,
                Selection(max_rows=-1, shard_index=k, num_shards=num_shards, shard_by="contiguous"),
            )
        ]
        for k in range(num_shards)
    ]
    assert [i for shard in shards for i in shard] == whole  # in order, each row once
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1
    if num_shards == 3:
        assert [{i.split("__")[0] for i in shard} for shard in shards] == [{"a"}, {"b"}, {"c"}]


@pytest.mark.parametrize(
    "bad",
    [
        {"max_rows": 0},
        {"max_rows": -2},
        {"shard_index": 2, "num_shards": 2},
        {"num_shards": 0},
        {"shard_index": -1},
    ],
)
def test_bad_selections_are_refused(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        Selection(**bad)


@pytest.mark.skipif(
    not SHARED_DATASET.exists(), reason="the team's offline Verified copy is not beside the repo"
)
def test_the_500_verified_rows_load_with_their_quirks() -> None:
    ds = load_dataset(str(SHARED_DATASET))
    assert len(ds.instances) == 500
    assert sum(1 for i in ds.instances if not i.PASS_TO_PASS) == 11
    assert {i.repo for i in ds.instances} >= {"django/django", "sympy/sympy", "psf/requests"}
    first = select_instances(ds, Selection())
    assert [i.instance_id for i in first] == sorted(i.instance_id for i in ds.instances)[:3]


def snapshot_folder(tmp_path: Path, rows_path: Path, **entry: object) -> Path:
    folder = tmp_path / "snapshots"
    folder.mkdir()
    data = rows_path.read_bytes()
    (folder / "verified.jsonl").write_bytes(data)
    index = {
        "name": DEFAULT_DATASET,
        "split": "test",
        "revision": "c0ffee",
        "file": "verified.jsonl",
        "sha256": hashlib.sha256(data).hexdigest(),
    } | entry
    (folder / "index.json").write_text(json.dumps([index]))
    return folder


def test_a_hub_dataset_kept_in_the_image_is_read_from_it_pinned(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(raw_row(1)) + "\n")
    folder = snapshot_folder(tmp_path, rows)
    loaded = load_dataset(snapshots=folder, parsed_cache=tmp_path / "parsed")
    assert loaded.name == DEFAULT_DATASET and loaded.revision == "c0ffee"
    assert len(loaded.instances) == 1
    provenance = loaded.provenance()
    assert provenance["dataset"] == DEFAULT_DATASET and provenance["dataset_revision"] == "c0ffee"
    assert provenance["dataset_read_from"] == "the image's snapshot"
    assert provenance["dataset_file_sha256"] == hashlib.sha256(rows.read_bytes()).hexdigest()
    # asked at the revision it holds: the same; another revision or dataset: not this file
    assert load_dataset(revision="c0ffee", snapshots=folder).digest == loaded.digest
    assert find_snapshot(folder, DEFAULT_DATASET, "test", "other") is None
    assert find_snapshot(folder, "someone/else", "test", None) is None


def test_a_changed_snapshot_is_refused(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(raw_row(1)) + "\n")
    folder = snapshot_folder(tmp_path, rows, sha256="0" * 64)
    with pytest.raises(DatasetError, match="does not hold what"):
        load_dataset(snapshots=folder)
    (folder / "index.json").write_text("{not json")
    with pytest.raises(DatasetError, match="not a dataset snapshot index"):
        load_dataset(snapshots=folder)
