"""The documented DuckDB leaderboard queries run on real results files and add up."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from .conftest import RunSample

ROOT = Path(__file__).resolve().parents[1]


def queries() -> list[str]:
    text = (ROOT / "agentbeats" / "leaderboard.sql").read_text()
    return [q.strip() for q in text.split(";") if "SELECT" in q]


@pytest.fixture
def results_dir(run_sample: RunSample, settings, tmp_path: Path) -> Path:
    """Results files as AgentBeats stores them: two participants, one split in two shards."""
    out = tmp_path / "leaderboard"
    out.mkdir()
    run_sample("gold", run_id="lb-gold", max_rows=4)
    for shard in (0, 1):
        run_sample("empty", run_id=f"lb-empty-{shard}", max_rows=4, shard_index=shard, num_shards=2)
    for run_id, agent_id in (
        ("lb-gold", "id-gold"),
        ("lb-empty-0", "id-empty"),
        ("lb-empty-1", "id-empty"),
    ):
        data = json.loads((settings.output_dir / run_id / "results.json").read_text())
        data["participants"] = {"agent": agent_id}  # AgentBeats writes the participant's id
        (out / f"{run_id}.json").write_text(json.dumps(data))
    return out


def test_leaderboard_queries_rank_participants_and_sum_shards(results_dir: Path) -> None:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE results AS SELECT * FROM read_json_auto('{results_dir}/*.json')")
    overall, per_repo = queries()
    rows = con.execute(overall).fetchall()
    columns = [d[0] for d in con.description]
    assert columns[0] == "id"
    table = {r[0]: dict(zip(columns, r, strict=True)) for r in rows}
    assert table["id-gold"]["instances"] == 4 and table["id-gold"]["resolved"] == 1.0
    assert table["id-empty"]["instances"] == 4  # the two shards add up to the whole
    assert table["id-empty"]["no_op"] == 1.0 and table["id-empty"]["f2p_pass_rate"] == 0.0
    assert table["id-gold"]["tests_ran"] == 4 and table["id-empty"]["tests_ran"] == 0
    assert [r[0] for r in rows] == ["id-gold", "id-empty"]
    repos = con.execute(per_repo).fetchall()
    assert {(r[0], r[1]) for r in repos} >= {("id-gold", "sample/calculator")}
