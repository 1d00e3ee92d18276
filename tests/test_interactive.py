"""The interactive mode end to end: the green agent and participants as real A2A servers on
127.0.0.1, commands run in real sandboxed copies of the sample's prepared workspace.

One assessment, five participants on the same task: a scripted one that explores,
reproduces the bug, fixes it in its copy and submits what git shows; the reference bash +
submit agent loop driven by litellm's mock responses; one that uses up its step budget;
one that looks for the hidden tests and the graded workspace; and the gold participant,
which answers with a patch at once as before.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from swegreen.core.dataset import load_dataset
from swegreen.sample import SampleBenchmark
from tests.helpers import Server, start, stop
from tests.test_agent import assess

INSTANCE = "sample__calculator-1"
MAX_STEPS = 6


@pytest.fixture(scope="module")
def setup(
    session_cache: Path, sample: SampleBenchmark, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, Server], Path, list[str]]]:
    out = tmp_path_factory.mktemp("interactive")
    gold = {i.instance_id: i.patch for i in load_dataset(str(sample.dataset)).instances}[INSTANCE]
    answers = out / "answers.json"
    answers.write_text(
        json.dumps(
            [
                "Let me look around.\n```bash\nls calculator && grep -n 'def mean' -A3 "
                "calculator/stats.py\n```",
                "Reproduce it.\n```bash\npython -c 'from calculator import mean; mean([])'\n```",
                f"Fix it.\n```bash\ngit apply - <<'EOF'\n{gold}EOF\n```",
                "Done.\n```bash\nsubmit\n```",
            ]
        )
    )
    # Where the hidden tests live on the host: the dataset, the repository cache (the fix's
    # future commits), the green agent's results (each graded row's eval.sh holds its test
    # patch); and the work root, beside which graded workspaces are made.
    hidden = [
        str(sample.dataset),
        str(session_cache / "repos"),
        str(out / "green"),
    ]
    snoop = [a for path in hidden for a in ("--snoop-path", path)]
    specs = {
        "green": ["serve", "--heartbeat", "1", "--llm-mock-response", "MOCK DIAGNOSIS"],
        "explore": ["participant", "scripted", "--mode", "explore", "--dataset", "swegreen:sample"],
        "agent": [
            "participant",
            "agent",
            "--model",
            "gpt-4o",
            "--llm-mock-responses",
            str(answers),
        ],
        "greedy": ["participant", "scripted", "--mode", "greedy"],
        "snoop": ["participant", "scripted", "--mode", "snoop", *snoop],
        "gold": ["participant", "gold", "--dataset", "swegreen:sample"],
    }
    running: dict[str, Server] = {}
    try:
        for name, args in specs.items():
            running[name] = start(args, session_cache, out, name)
        yield running, out, hidden
    finally:
        stop(running.values())


@pytest.fixture(scope="module")
def assessed(setup: tuple[dict[str, Server], Path, list[str]]) -> dict[str, Any]:
    servers, out, _ = setup
    roles = ("explore", "agent", "greedy", "snoop", "gold")
    request = {
        "participants": {r: servers[r].url for r in roles},
        "config": {
            "dataset": "swegreen:sample",
            "instance_ids": [INSTANCE],
            "max_steps": MAX_STEPS,
            "command_output_bytes": 4000,
            "participant_timeout": 300,
        },
    }
    outcome = asyncio.run(assess(servers["green"].url, request))
    assert outcome.state == "TASK_STATE_COMPLETED", outcome.statuses[-5:]
    reports = {
        role: path.read_text()
        for role in roles
        for path in (out / "green").glob(f"*-{role}/report.html")
    }
    transcripts = {
        role: json.loads(path.read_text())
        for role in roles
        for path in (out / "green").glob(f"*-{role}/instances/{INSTANCE}/interaction.json")
    }
    return {"rows": outcome.rows, "transcripts": transcripts, "reports": reports}


def only(rows: dict[str, Any], role: str) -> dict[str, Any]:
    [instance] = rows[role]["instances"]
    return instance


def test_a_scripted_participant_explores_reproduces_edits_and_resolves(assessed) -> None:
    row = only(assessed["rows"], "explore")
    assert (row["status"], row["reason"]) == ("resolved", "all_tests_pass")
    assert row["interaction"]["steps"] == 5 and row["interaction"]["ended"] is None
    assert row["interaction"]["command_seconds"] > 0
    explore = assessed["transcripts"]["explore"]
    assert [c["exit_code"] for c in explore] == [0, 1, 0, 1, 0]
    assert "calculator" in explore[0]["output"]
    assert "ZeroDivisionError" in explore[1]["output"]  # the bug, reproduced
    assert "ValueError" in explore[3]["output"] and "empty" in explore[3]["output"]
    assert explore[4]["output"].startswith("diff --git a/calculator/stats.py")
    leaderboard = assessed["rows"]["explore"]
    assert leaderboard["resolved_pct"] == 1.0
    assert leaderboard["mean_steps_per_resolved"] == 5.0
    page = assessed["reports"]["explore"]
    assert "steps per resolved" in page and "5 command(s)" in page
    assert f'href="instances/{INSTANCE}/interaction.json"' in page
    assert "interaction.json" not in assessed["reports"]["gold"]


def test_the_reference_agent_loop_resolves_with_mock_model_answers(assessed) -> None:
    row = only(assessed["rows"], "agent")
    assert (row["status"], row["reason"]) == ("resolved", "all_tests_pass")
    assert row["interaction"]["steps"] == 4  # ls, reproduce, apply, the diff it submits
    assert row["participant_usage"]["total_tokens"] > 0  # litellm's mock usage, reported
    commands = [c["command"] for c in assessed["transcripts"]["agent"]]
    assert commands[0].startswith("ls calculator") and commands[-1].startswith("git add -A")
    leaderboard = assessed["rows"]["agent"]
    assert leaderboard["mean_tokens_per_resolved"] == row["participant_usage"]["total_tokens"]


def test_an_exhausted_budget_ends_the_instance_with_its_reason(assessed) -> None:
    row = only(assessed["rows"], "greedy")
    assert (row["status"], row["reason"]) == ("no_op", "budget_exhausted")
    assert row["interaction"]["steps"] == MAX_STEPS
    assert row["interaction"]["ended"] == f"step budget exhausted ({MAX_STEPS} commands)"
    leaderboard = assessed["rows"]["greedy"]
    assert leaderboard["participant_failures"] == 1
    assert leaderboard["mean_steps_per_resolved"] is None


def test_commands_find_neither_the_hidden_tests_nor_the_graded_workspace(assessed, setup) -> None:
    _, out, hidden = setup
    assert (out / "green").is_dir() and any((out / "green").rglob("eval.sh"))  # they exist
    transcript = assessed["transcripts"]["snoop"]
    for path, step in zip(hidden, transcript, strict=False):
        assert "No such file or directory" in step["output"], (path, step["output"])
    history, revisions, alternates = transcript[len(hidden) :]
    assert history["output"].strip() == "1" and revisions["output"].strip() == "1"
    assert "No such file" in alternates["output"]
    row = only(assessed["rows"], "snoop")
    assert (row["status"], row["reason"]) == ("no_op", "no_patch")


def test_a_participant_answering_with_a_patch_is_unaffected(assessed) -> None:
    row = only(assessed["rows"], "gold")
    assert (row["status"], row["reason"]) == ("resolved", "all_tests_pass")
    assert row["interaction"] is None
    assert "gold" not in assessed["transcripts"]
