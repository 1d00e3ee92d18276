"""The SQLite result store: a real WAL file, idempotent rows, refusal of mismatched resumes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from swegreen.core.classify import Status
from swegreen.core.errors import StoreError
from swegreen.core.ports import RunRecord
from swegreen.core.results import InstanceResult
from swegreen.stores.sqlite import SqliteStore


def record(run_id: str = "r1", **kw: object) -> RunRecord:
    values: dict[str, object] = {
        "run_id": run_id,
        "dataset": "d.jsonl",
        "dataset_digest": "abc",
        "patch_source": "gold",
        "instance_ids": ["a", "b"],
    }
    values.update(kw)
    return RunRecord(**values)


def result(iid: str, status: Status = Status.RESOLVED) -> InstanceResult:
    return InstanceResult(instance_id=iid, repo="o/r", status=status, reason="x")


def test_rows_survive_a_new_connection_and_are_never_duplicated(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    store = SqliteStore(path)
    store.begin_run(record())
    store.save_result("r1", result("a", Status.ERROR))
    store.save_result("r1", result("a", Status.RESOLVED))  # a retry replaces, never adds
    store.save_result("r1", result("b"))
    store.close()
    reopened = SqliteStore(path)
    assert {k: v.status for k, v in reopened.get_results("r1").items()} == {
        "a": Status.RESOLVED,
        "b": Status.RESOLVED,
    }
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 2
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_an_error_row_never_replaces_a_verdict(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.sqlite")
    store.begin_run(record())
    store.save_result("r1", result("a", Status.NO_OP))
    store.save_result("r1", result("a", Status.ERROR))  # a failed step after the verdict
    store.save_result("r1", result("b", Status.ERROR))
    store.save_result("r1", result("b", Status.REGRESSION))  # --retry-errors: the verdict
    rows = store.get_results("r1")
    assert (rows["a"].status, rows["b"].status) == (Status.NO_OP, Status.REGRESSION)


def test_runs_are_kept_apart(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.sqlite")
    store.begin_run(record("r1"))
    store.begin_run(record("r2"))
    store.save_result("r1", result("a"))
    assert store.get_results("r2") == {}
    assert [r.run_id for r in store.list_runs()] == ["r1", "r2"]


def test_resuming_with_another_dataset_or_source_is_refused(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.sqlite")
    store.begin_run(record())
    with pytest.raises(StoreError, match=r"started on dataset .* choose a new run id"):
        store.begin_run(record(dataset_digest="other"))
    with pytest.raises(StoreError, match="evaluated patches from 'gold', not 'empty'"):
        store.begin_run(record(patch_source="empty"))
    resumed = store.begin_run(record(instance_ids=["a", "b", "c"]))
    assert resumed.instance_ids == ["a", "b", "c"] and resumed.state == "running"


def test_a_corrupt_store_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="cannot open the result store"):
        SqliteStore(path)
