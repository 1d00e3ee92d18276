"""The AgentSWE protocol's messages: plain data, no transport.

Agents written for AgentSWE (a green agent of its own, public) work in turns. The task is
one JSON object in a text part (``cwd``, ``problem_statement``, ``hints_text``,
``python_version``); each of the agent's turns completes its A2A task with an artifact
named for what it wants:

- ``bash``: a command that only reads; its writes do not stay;
- ``debug``: a command whose writes are thrown away after it (try a fix, run a test);
- ``patch``: the final diff.

The answer to a command is the next message of the same context: JSON text with the
command's ``stdout`` (``stderr`` empty: the workbench merges them, as a terminal shows
them), ``cwd``, and for ``debug`` ``debug_result``/``success``. Commands run in the
participant's workbench (workbench.py) under the interactive mode's budget; never in the
workspace that grades the patch. The action may also come as JSON text
``{"action": "bash", "content": "..."}``, and a bare diff is a patch, as AgentSWE reads them.

What AgentSWE's own task also carries, the instance's ``fail_to_pass`` tests, is never sent
(task_message.HIDDEN_FIELDS).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

Action = Literal["bash", "debug", "patch"]
ACTIONS: tuple[Action, ...] = ("bash", "debug", "patch")
_ACTION_OBJECT = re.compile(r'\{[^{}]*"action"\s*:\s*"(?:bash|patch|debug)"[^{}]*\}', re.S)
DEBUG_NOTE = "This was a debug session. Changes were NOT applied to the main environment."


def task(data: Mapping[str, Any], cwd: str, python_version: str) -> dict[str, Any]:
    """The first message's object: AgentSWE's fields, and the instance's identity."""
    return {
        "cwd": cwd,
        "problem_statement": data["problem_statement"],
        "hints_text": data.get("hints_text", ""),
        "python_version": python_version,
        "instance_id": data["instance_id"],
        "repo": data["repo"],
        "base_commit": data["base_commit"],
    }


def turn(artifacts: Iterable[tuple[str, str]], status_text: str) -> tuple[Action | None, str]:
    """The agent's request in one completed turn: ``artifacts`` as (name, text) in order.
    As AgentSWE reads it: the last artifact's name is the action, the text is what the
    status message and the artifacts say; else a JSON ``{"action", "content"}``; else a
    bare diff is a patch. (None, text) when it asks for nothing."""
    artifacts = list(artifacts)
    content = "\n".join([status_text, *(text for _name, text in artifacts)]).strip()
    named = artifacts[-1][0] if artifacts else ""
    if named in ACTIONS:
        body = "\n".join(text for _name, text in artifacts).strip() or content
        return named, _unwrapped(body)  # type: ignore[return-value]
    for candidate in [content, *(m.group(0) for m in _ACTION_OBJECT.finditer(content))]:
        try:
            parsed = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(parsed, dict) and parsed.get("action") in ACTIONS:
            return parsed["action"], str(parsed.get("content", ""))
    if content.startswith(("diff --git", "--- ")):
        return "patch", content
    return None, content


def _unwrapped(text: str) -> str:
    """An artifact's text that is itself the JSON object carries its ``content``."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    if isinstance(parsed, dict) and isinstance(parsed.get("content"), str):
        return parsed["content"]
    return text


def result(
    action: Action, cwd: str, output: str, exit_code: int | None, steps_left: int
) -> dict[str, Any]:
    """The answer to a ``bash`` or ``debug`` turn."""
    answer: dict[str, Any] = {"cwd": cwd, "stdout": output, "stderr": ""}
    if action == "debug":
        answer = {"debug_result": True, **answer, "success": exit_code == 0, "note": DEBUG_NOTE}
    answer["exit_code"] = exit_code  # None: it ran past its time limit
    answer["steps_left"] = steps_left
    return answer
