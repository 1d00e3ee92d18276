"""The reference bash + submit agent loop, its model answered by litellm's mock responses
and its shell answered in-process the way the green agent answers it (steps_left counted
down), so that its own decisions can be checked turn by turn."""

from __future__ import annotations

import asyncio
from typing import Any

from swegreen.participants.agent_loop import DIFF_COMMAND, BashAgent
from swegreen.participants.server import Reply, Shell

DIFF = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"


async def converse(agent: BashAgent, max_steps: int) -> tuple[Reply, list[str]]:
    shell = Shell({"max_steps": max_steps})
    ran: list[str] = []

    async def green_agent() -> None:
        while True:
            _, request = await shell.outbox.get()
            ran.append(request["command"])
            output = DIFF if request["command"] == DIFF_COMMAND else "ok\n"
            await shell.inbox.put(
                {"exit_code": 0, "output": output, "steps_left": max_steps - len(ran)}
            )

    answering = asyncio.create_task(green_agent())
    try:
        reply = await agent({"instance_id": "x"}, "Fix x.", shell)
    finally:
        answering.cancel()
    return reply, ran


def test_it_runs_its_commands_and_submits_the_workspace_diff() -> None:
    answers = [
        "I will look first.\n```bash\nls\n```",
        "No command in this one.",
        "```bash\nsed -i s/a/b/ x.py\n```",
        "```bash\nsubmit\n```",
    ]
    reply, ran = asyncio.run(converse(BashAgent("gpt-4o", mock_responses=answers), 10))
    assert ran == ["ls", "sed -i s/a/b/ x.py", DIFF_COMMAND]
    assert reply.patch == DIFF and reply.text == "submitted after working in the shell"
    assert reply.usage["total_tokens"] > 0  # litellm's mock usage, summed over 4 calls


def test_it_keeps_its_last_step_to_submit() -> None:
    answers = ["```bash\nls\n```"] * 5
    reply, ran = asyncio.run(converse(BashAgent("gpt-4o", mock_responses=answers), 3))
    assert ran == ["ls", "ls", DIFF_COMMAND]  # never a command the budget would refuse
    assert reply.patch == DIFF and "budget" in reply.text


def test_without_the_mode_it_says_so() -> None:
    reply: Any = asyncio.run(BashAgent("gpt-4o")({"instance_id": "x"}, "Fix x.", None))
    assert reply.patch is None and "interactive mode" in reply.text
