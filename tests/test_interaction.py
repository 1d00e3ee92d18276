"""The interactive mode's protocol and budgets, as plain data."""

from __future__ import annotations

import pytest

from swegreen.core.interaction import (
    Budget,
    BudgetExhausted,
    CommandRequest,
    Meter,
    parse_command,
    truncate,
)
from swegreen.core.patch_extraction import ReplyPart

BUDGET = Budget(max_steps=3, command_timeout=60, command_output_bytes=100, max_output_bytes=250)


def test_a_command_in_a_data_part_with_its_own_time_limit() -> None:
    assert parse_command([ReplyPart(data={"command": "ls -la", "timeout": 5})]) == CommandRequest(
        "ls -la", 5.0
    )
    assert parse_command([ReplyPart(data={"command": "ls", "timeout": "soon"})]) == CommandRequest(
        "ls"
    )


@pytest.mark.parametrize(
    ("text", "command"),
    [
        ('{"command": "pytest -x"}', "pytest -x"),
        ("Let me look.\n```bash\ngrep -rn foo src\n```\n", "grep -rn foo src"),
        ("```sh\ncat <<'EOF' > a.py\nx = 1\nEOF\n```", "cat <<'EOF' > a.py\nx = 1\nEOF"),
    ],
)
def test_the_text_fallback(text: str, command: str) -> None:
    assert parse_command([ReplyPart(text=text)]) == CommandRequest(command)


@pytest.mark.parametrize(
    "parts",
    [
        [ReplyPart(text="Here is my fix:\n```diff\n--- a/x\n+++ b/x\n```")],
        [ReplyPart(text="```bash\nls\n```\nor\n```bash\npwd\n```")],  # which one?
        [ReplyPart(data={"command": ""})],
        [ReplyPart(data={"patch": "diff --git a/x b/x"})],
        [ReplyPart(text="{not json")],
    ],
)
def test_what_is_not_a_command(parts: list[ReplyPart]) -> None:
    assert parse_command(parts) is None


def test_long_output_keeps_its_head_and_its_tail() -> None:
    text = "START " + "x" * 10_000 + " END"
    cut, truncated = truncate(text, 200)
    assert truncated and len(cut.encode()) <= 200
    assert cut.startswith("START") and cut.endswith("END") and "bytes elided" in cut
    assert truncate("short", 200) == ("short", False)
    cut, _ = truncate("é" * 500, 101)  # never a broken character
    cut.encode("utf-8")
    assert truncate("x" * 100, 5) == ("xxxxx", True)  # no room for the marker: the head


def test_steps_are_counted_and_the_budget_ends_the_instance() -> None:
    meter = Meter(BUDGET)
    for _ in range(3):
        assert meter.admit(CommandRequest("true", 500)) == 60  # capped at command_timeout
        meter.charge(CommandRequest("true"), 0, "", 0.5)
    with pytest.raises(BudgetExhausted, match=r"step budget exhausted \(3 commands\)"):
        meter.admit(CommandRequest("true"))
    assert meter.usage.ended == "step budget exhausted (3 commands)"
    assert meter.usage.as_row()["steps"] == 3 and meter.usage.command_seconds == 1.5


def test_output_is_cut_per_command_and_counted_per_instance() -> None:
    meter = Meter(BUDGET)
    first = meter.charge(CommandRequest("yes"), 141, "y\n" * 1000, 0.1)
    assert first.truncated and len(first.output.encode()) <= 100
    assert first.output_bytes_left == 250 - len(first.output.encode())
    meter.charge(CommandRequest("yes"), 141, "y\n" * 1000, 0.1)
    third = meter.charge(CommandRequest("yes"), 141, "y\n" * 1000, 0.1)  # what is left
    assert third.output_bytes_left == 0 and meter.usage.output_bytes <= 250
    meter.budget = Budget(9, 60, 100, 250)
    with pytest.raises(BudgetExhausted, match="output budget exhausted"):
        meter.admit(CommandRequest("yes"))
    assert meter.usage.commands[0]["exit_code"] == 141


def test_a_timed_out_command_says_so() -> None:
    outcome = Meter(BUDGET).charge(CommandRequest("sleep 99"), None, "", 60.0)
    assert outcome.timed_out and outcome.exit_code is None
    assert outcome.message_data()["command_result"]["timed_out"] is True
    assert "timed out" in outcome.message_text()
