"""scripts/gold_stability.py: which rows the evidence validates, and why the others not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .helpers import raw_row

ROOT = Path(__file__).resolve().parents[1]


def result(run: Path, iid: str, status: str, reason: str, tests_ran: bool = True) -> None:
    path = run / "instances" / iid / "result.json"
    path.parent.mkdir(parents=True)
    row = {"instance_id": iid, "status": status, "reason": reason, "tests_ran": tests_ran}
    path.write_text(json.dumps(row))


def test_a_row_is_validated_only_when_every_graded_run_resolved_it(tmp_path: Path) -> None:
    ids = [f"o__r-{i}" for i in range(5)]
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text("".join(json.dumps(raw_row(i)) + "\n" for i in range(5)))
    table = tmp_path / "validation.md"
    table.write_text(
        "| o__r-0 | resolved |\n"  # before the heading: not part of any table
        "## What validation found, and what was fixed\n"
        "| instance | gold |\n|---|---|\n"
        "| o__r-0 | resolved |\n| o__r-1 | resolved |\n| o__r-2 | error |\n"
        "| o__r-3 | breaking_resolved |\n| o__r-4 | error |\n"
    )
    results = tmp_path / "results"
    result(results / "a", ids[0], "resolved", "all_tests_pass")
    result(results / "a", ids[1], "no_op", "no_f2p_pass")  # re-run after a fix (b):
    result(results / "a", ids[2], "resolved", "all_tests_pass")  # graded once, resolved
    result(results / "b", ids[1], "resolved", "all_tests_pass")  # the later run counts
    result(results / "a", ids[4], "error", "env_setup_failed", tests_ran=False)
    out = tmp_path / "stability.json"
    argv = [sys.executable, str(ROOT / "scripts" / "gold_stability.py"), str(results)]
    argv += ["--table", f"first={table}", "--runs", "second=a,b"]
    argv += ["--dataset", str(dataset), "--out", str(out)]
    env = {"PYTHONPATH": str(ROOT / "shared"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert [e["rows"] for e in data["evidence"]] == [5, 4]
    assert sorted(data["rows"]) == ["o__r-3", "o__r-4"]
    assert data["rows"]["o__r-3"]["verdicts"] == {"first": "breaking_resolved"}
    assert data["rows"]["o__r-4"]["why"].startswith("never graded")
    assert data["rows"]["o__r-4"]["verdicts"] == {
        "first": "error",
        "second": "error/env_setup_failed",
    }


def test_a_runs_validated_rate_is_its_own_rows_over_the_packaged_list() -> None:
    """The same rows give the same figures whatever else was run: the validated rate
    counts this run's rows against the packaged list alone, and says so."""
    from swegreen.core import gold_stability
    from swegreen.core.classify import Reason, Status
    from swegreen.core.metrics import RunMetrics
    from swegreen.core.results import InstanceResult

    listed = sorted(gold_stability.not_validated())[0]
    rows = [
        InstanceResult(instance_id=iid, repo="o/r", status=status, reason=Reason.ALL_TESTS_PASS)
        for iid, status in ((listed, Status.NO_OP), ("o__r-1", Status.RESOLVED))
    ]
    row = RunMetrics.from_results(rows).result_row("m")
    assert (row["validated_instances"], row["validated_resolved"]) == (1, 1)
    assert row["resolved_pct_validated"] == 1.0
    assert row["resolved_pct_validated_by"].startswith("swegreen/data/gold_stability.json (55")
    assert RunMetrics.from_results(rows).result_row("m") == row
