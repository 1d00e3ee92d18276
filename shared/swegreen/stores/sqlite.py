"""The default result store: one SQLite file in WAL mode.

Each row is committed as soon as its instance finishes, keyed by (run id, instance id),
so a killed run loses at most the rows still in flight and a resumed run never writes a
row twice.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from swegreen.core.errors import StoreError
from swegreen.core.ports import RunRecord
from swegreen.core.results import InstanceResult, utcnow

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id     TEXT PRIMARY KEY,
    record     TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    run_id      TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    status      TEXT NOT NULL,
    result      TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (run_id, instance_id)
);
"""


class SqliteStore:
    """A ``ResultStore`` on a local SQLite file. Safe to share between threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(
                path, check_same_thread=False, timeout=30, isolation_level=None
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open the result store {path}: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def begin_run(self, record: RunRecord) -> RunRecord:
        with self._lock:
            row = self._db.execute(
                "SELECT record FROM runs WHERE run_id = ?", (record.run_id,)
            ).fetchone()
            if row is None:
                self._put_run(record)
                return record
            stored = RunRecord.model_validate_json(row[0])
            resumed = stored.resumed_by(record)
            self._put_run(resumed)
            return resumed

    def get_run(self, run_id: str) -> RunRecord | None:
        with self._lock:
            row = self._db.execute("SELECT record FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return RunRecord.model_validate_json(row[0]) if row else None

    def update_run(self, record: RunRecord) -> None:
        with self._lock:
            self._put_run(record.model_copy(update={"updated_at": utcnow()}))

    def list_runs(self) -> list[RunRecord]:
        with self._lock:
            rows = self._db.execute("SELECT record FROM runs ORDER BY updated_at").fetchall()
        return [RunRecord.model_validate_json(r[0]) for r in rows]

    def list_running(self) -> list[RunRecord]:
        return [r for r in self.list_runs() if r.state == "running"]

    def save_result(self, run_id: str, result: InstanceResult) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO results (run_id, instance_id, status, result, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id, instance_id) DO UPDATE SET "
                "status = excluded.status, result = excluded.result, "
                "updated_at = excluded.updated_at "
                # an error row never replaces a verdict (as the DynamoDB store)
                "WHERE results.status = 'error' OR excluded.status != 'error'",
                (
                    run_id,
                    result.instance_id,
                    result.status.value,
                    result.model_dump_json(),
                    utcnow(),
                ),
            )

    def get_results(self, run_id: str) -> dict[str, InstanceResult]:
        with self._lock:
            rows = self._db.execute(
                "SELECT result FROM results WHERE run_id = ? ORDER BY instance_id", (run_id,)
            ).fetchall()
        results = (InstanceResult.model_validate_json(r[0]) for r in rows)
        return {r.instance_id: r for r in results}

    def _put_run(self, record: RunRecord) -> None:
        self._db.execute(
            "INSERT INTO runs (run_id, record, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT (run_id) DO UPDATE SET record = excluded.record, "
            "updated_at = excluded.updated_at",
            (record.run_id, record.model_dump_json(), record.updated_at),
        )
