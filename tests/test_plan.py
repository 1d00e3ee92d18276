"""The worst case of a shard against the platform's step (core/plan.py), and the plan the
shipped manifest and scenario ask for."""

from __future__ import annotations

import json
from pathlib import Path

import json5
import pytest

from swegreen.core.config import EvalConfig
from swegreen.core.plan import PLATFORM_PLAN, PLATFORM_STEP_MINUTES, plan, what_fits

ROOT = Path(__file__).resolve().parents[1]


def platform_plan(config: dict, rows: int = 500, backend: str = "docker"):
    """The worst shard of ``rows`` rows under ``config``, as the green agent plans it."""
    checked = EvalConfig.model_validate({**config, "shard_index": 0})
    per_shard = -(-rows // checked.num_shards)
    return plan(
        rows=per_shard,
        participants=1,
        concurrent=checked.max_concurrent_rows,
        participant_timeout=checked.participant_timeout,
        eval_timeout=checked.eval_timeout,
        backend=backend,
        budget_minutes=checked.time_budget(),
    )


def test_the_worst_case_is_waves_of_the_slowest_row() -> None:
    found = plan(
        rows=25,
        participants=2,
        concurrent=3,
        participant_timeout=600,
        eval_timeout=300,
        backend="docker",
        budget_minutes=300,
    )
    # 9 waves of at most 3 rows, each 10 + 5 + 5 min, for each participant in turn
    assert found.waves == 9 and found.worst_minutes == 5 + 2 * 9 * 20
    assert not found.fits and "over by 65" in found.describe()
    assert "max_concurrent_rows to 4" in what_fits(found)
    # no eval_timeout: the official harness's 1800 s
    assert plan(
        rows=1, participants=1, concurrent=1, participant_timeout=60, eval_timeout=None,
        backend="engine", budget_minutes=None,
    ).eval_minutes == 30  # fmt: skip


def test_the_budget_is_the_platforms_step_only_where_the_platform_shards() -> None:
    assert EvalConfig().time_budget() is None
    assert EvalConfig(num_shards=1, shard_index=0).time_budget() == PLATFORM_STEP_MINUTES
    assert EvalConfig(num_shards=4, time_budget_minutes=0).time_budget() is None
    assert EvalConfig(time_budget_minutes=90).time_budget() == 90


@pytest.mark.parametrize("where", ["manifest", "scenario"])
def test_the_shipped_plan_fits_a_full_run_in_the_step_with_margin(where: str) -> None:
    if where == "manifest":
        manifest = json5.loads((ROOT / "agentbeats" / "amber-manifest.json5").read_text())
        config = manifest["metadata"]["assessment_config"]
    else:
        scenario = json5.loads((ROOT / "agentbeats" / "scenario.json5").read_text())
        config = scenario["components"]["gateway"]["config"]["assessment_config"]
    assert {k: config[k] for k in PLATFORM_PLAN} == PLATFORM_PLAN
    found = platform_plan(config)
    assert found.rows == 25 and found.fits
    assert found.worst_minutes <= 0.75 * PLATFORM_STEP_MINUTES  # an hour and more to spare


def test_a_quick_submit_of_the_old_defaults_is_refused_with_what_fits() -> None:
    one_shard = platform_plan({"num_shards": 1, "max_concurrent_rows": 1})
    assert not one_shard.fits and one_shard.rows == 500
    assert "num_shards" in what_fits(one_shard)
    # the previous scenario: 20 shards, 2 at once, the default timeouts
    old = platform_plan({"num_shards": 20, "max_concurrent_rows": 2})
    assert not old.fits and old.worst_minutes > PLATFORM_STEP_MINUTES


def test_swegreen_plan_says_whether_a_config_fits_and_what_would(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from swegreen.cli import main

    assert main(["plan", "--config", json.dumps(PLATFORM_PLAN)]) == 0
    said = capsys.readouterr().out
    assert "500 rows in 20 shard(s): worst case 205 min" in said and "over by" not in said
    assert main(["plan"]) == 1  # the config defaults: one shard of 500 rows
    said = capsys.readouterr().out
    assert "over by 32205" in said and "the shipped plan for all 500 rows" in said
    assert main(["plan", "--config", "[1]"]) == 2
    assert "must be a JSON object" in capsys.readouterr().out
