"""A reference participant for the interactive mode: a small bash + submit agent loop.

In the spirit of mini-swe-agent: the model sees the issue, answers each turn with one
```bash block, and gets the command's output back (run by the green agent in the prepared
workspace). When it answers ``submit``, its changes (``git add -A && git diff --cached``,
which the workspace keeps free of build products) are its patch. It has no tools of its
own and no checkout: everything goes through the green agent's shell.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from swegreen.participants.server import Reply, Shell

SUBMIT = "submit"
DIFF_COMMAND = "git add -A && git diff --cached"
SYSTEM = """\
You are a software engineer fixing a GitHub issue in a repository you reach only through a
shell. Each of your replies holds a short thought and exactly one ```bash block with one
command; its output comes back as the next message. Each command runs in a fresh shell in
the repository's root (files persist, `cd` and variables do not; there is no network).
Explore, reproduce the issue, edit files (sed, cat <<'EOF', python), check your fix. Do
not edit the tests. When you are done, reply with a ```bash block holding only `submit`.
"""
FIRST = """\
{task}

You have {max_steps} commands (the last one is kept for `submit`). Start exploring.
"""
OBSERVATION = "exit code {exit_code} ({duration:.1f} s){note}\n```\n{output}\n```"
NO_COMMAND = "Your reply held no ```bash block. Reply with exactly one."
_BASH = re.compile(r"```(?:bash|sh)?[ \t]*\n(.*?)\n?```", re.S)


class BashAgent:
    """``interactive``: the participant server hands it the green agent's shell."""

    interactive = True

    def __init__(
        self,
        model: str,
        *,
        mock_responses: Sequence[str] = (),
        max_turns: int | None = None,
        request_timeout: float = 600.0,
    ) -> None:
        self.model = model
        self.mock_responses = list(mock_responses)  # offline: one per model call, in order
        self.max_turns = max_turns
        self.request_timeout = request_timeout

    async def __call__(self, data: dict[str, Any], text: str, shell: Shell | None) -> Reply:
        if shell is None:
            return Reply(None, "this agent works only in the green agent's interactive mode")
        import litellm

        budget = int(shell.offer.get("max_steps") or 50)
        turns = min(budget, self.max_turns or budget)
        messages: list[dict[str, str]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": FIRST.format(task=text, max_steps=budget)},
        ]
        usage: Counter[str] = Counter()
        for turn in range(turns * 2):  # replies without a command count too, up to a point
            mock = self.mock_responses[turn] if turn < len(self.mock_responses) else None
            if self.mock_responses and mock is None:
                return Reply(None, "the scripted model answers ran out", usage=dict(usage))
            response = await litellm.acompletion(
                model=self.model,
                messages=messages,
                mock_response=mock,
                timeout=self.request_timeout,
            )
            answer = response.choices[0].message.content or ""
            for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
                usage[key] += int(getattr(response.usage, key, 0) or 0)
            messages.append({"role": "assistant", "content": answer})
            blocks = _BASH.findall(answer)
            if len(blocks) != 1:
                messages.append({"role": "user", "content": NO_COMMAND})
                continue
            command = blocks[0].strip()
            if command == SUBMIT:
                return await submit(shell, "submitted after working in the shell", usage)
            result = await shell.run(command)
            if int(result.get("steps_left") or 0) <= 1:  # the last step reads the diff back
                return await submit(shell, "submitted as its step budget ran out", usage)
            messages.append({"role": "user", "content": observation(result)})
        return Reply(None, "ran out of turns without submitting", usage=dict(usage))


async def submit(shell: Shell, why: str, usage: Counter[str]) -> Reply:
    """The workspace's changes as the patch (the diff command's output, if whole)."""
    result = await shell.run(DIFF_COMMAND)
    if result.get("truncated") or result.get("exit_code") != 0:
        return Reply(None, "its diff could not be read back whole", usage=dict(usage))
    return Reply(result["output"], why, usage=dict(usage))


def observation(result: dict[str, Any]) -> str:
    note = ", output truncated" if result.get("truncated") else ""
    if result.get("timed_out"):
        note += ", timed out"
    return OBSERVATION.format(
        exit_code=result.get("exit_code"),
        duration=float(result.get("duration") or 0.0),
        note=note,
        output=result.get("output", ""),
    )
