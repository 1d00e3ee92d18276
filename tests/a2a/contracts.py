"""The contracts of participants people already run, written here from their description
(docs/agentbeats.md, "Task dialects"), free of any A2A library: the doubles served by
a2a-sdk 1.x (tests/test_dialects.py) and by 0.3 (participant_v03.py) wrap the same ones.

Each contract answers one message's text parts in a context with a ``Reply``; a task it
cannot read raises ``ValueError`` (or ``AssertionError``) whose text becomes the failed
task's reason, and is kept in ``complaints``.

- ``mini``: a mini-swe-agent wrapper. Reads only text parts, parses them as one JSON
  object, needs ``instance_id``, ``problem_statement`` and ``docker_image`` (named as
  SWE-bench names its images; also checks ``repo``, ``base_commit``, ``hints``) and replies
  with the raw diff as the completed task's status message.
- ``tagged``: reads XML-tagged text, clones ``repo_url`` at ``base_commit`` itself, checks
  the fix applies there and answers with ``<patch>`` tags in an artifact.
- ``jsonreply``: takes the standard task, answers with a text part holding
  ``{"model_patch": "<diff>"}``.
- ``agentswe``: the AgentSWE protocol: a JSON task with ``cwd``, each turn a completed task
  whose artifact is named ``bash``, ``debug`` or ``patch`` (or says so as JSON), the
  command's output in the next message of the same context. Four turns: look (writing a
  file), apply the gold patch in ``debug``, check that neither stayed, submit the patch.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def swebench_image(instance_id: str) -> str:
    """As mini-swe-agent names SWE-bench's images (written here, not imported from the
    product, so a wrong name there fails the double)."""
    name = instance_id.replace("__", "_1776_").lower()
    return f"docker.io/swebench/sweb.eval.x86_64.{name}:latest"


@dataclass(frozen=True)
class Reply:
    how: str  # "status": the completed task's status message; "artifact": an artifact
    text: str
    name: str = "response"  # the artifact's name


@dataclass
class Contract:
    gold: dict[str, str]  # instance id -> the patch to give
    workdir: Path
    complaints: list[str] = field(default_factory=list)

    def answer(self, context_id: str, texts: list[str]) -> Reply:
        try:
            return self.reply(context_id, texts)
        except (AssertionError, ValueError, KeyError) as exc:
            self.complaints.append(f"{type(self).__name__}: {exc!r}")
            raise ValueError(str(exc)) from exc

    def reply(self, context_id: str, texts: list[str]) -> Reply:
        raise NotImplementedError


class MiniSwe(Contract):
    def reply(self, context_id: str, texts: list[str]) -> Reply:
        assert len(texts) == 1, f"expected one text part, got {len(texts)}"
        task = json.loads(texts[0])
        for key in ("instance_id", "problem_statement", "docker_image", "base_commit", "repo"):
            assert task.get(key), f"the task has no {key}"
        assert "hints" in task, "the task has no hints"
        wanted = swebench_image(task["instance_id"])
        assert task["docker_image"] == wanted, f"image {task['docker_image']} is not {wanted}"
        return Reply("status", self.gold[task["instance_id"]])


class Tagged(Contract):
    def reply(self, context_id: str, texts: list[str]) -> Reply:
        text = "\n".join(texts)

        def tag(name: str) -> str:
            found = re.search(rf"<{name}>(.*?)</{name}>", text, re.DOTALL)
            assert found, f"no <{name}> in the task"
            return found.group(1).strip()

        task_id, url, commit = tag("task_id"), tag("repo_url"), tag("base_commit")
        assert tag("problem_statement") and tag("repository"), "an empty tag"
        checkout = self.workdir / f"{task_id}-{context_id}"
        subprocess.run(["git", "clone", "-q", url, str(checkout)], check=True)
        subprocess.run(["git", "checkout", "-q", commit], cwd=checkout, check=True)
        applied = subprocess.run(
            ["git", "apply", "--check", "-"],
            input=self.gold[task_id],
            text=True,
            cwd=checkout,
            capture_output=True,
        )
        assert applied.returncode == 0, f"the gold patch does not apply: {applied.stderr}"
        return Reply("artifact", f"Here is the fix.\n<patch>\n{self.gold[task_id]}</patch>\n")


class JsonReply(Contract):
    def reply(self, context_id: str, texts: list[str]) -> Reply:
        found = re.search(r"Instance: (\S+)", "\n".join(texts))
        assert found, "the standard task names its instance"
        return Reply("artifact", json.dumps({"model_patch": self.gold[found.group(1)]}))


@dataclass
class AgentSwe(Contract):
    state: dict[str, dict[str, Any]] = field(default_factory=dict)  # by context

    def reply(self, context_id: str, texts: list[str]) -> Reply:
        assert len(texts) == 1, f"expected one text part, got {len(texts)}"
        state = self.state.setdefault(context_id, {"turn": 0})
        name, body = self.step(state, json.loads(texts[0]))
        state["turn"] += 1
        return Reply("artifact", body, name)

    def step(self, state: dict[str, Any], said: dict[str, Any]) -> tuple[str, str]:
        turn = state["turn"]
        if turn == 0:
            for key in ("cwd", "problem_statement", "hints_text", "python_version"):
                assert key in said, f"the task has no {key}"
            assert re.fullmatch(r"\d+\.\d+", said["python_version"]), said["python_version"]
            assert "FAIL_TO_PASS" not in json.dumps(said).upper(), "hidden tests were sent"
            state.update(cwd=said["cwd"], gold=self.gold[said["instance_id"]])
            return "bash", f"cd {state['cwd']} && touch LEFT_BEHIND && git status --short"
        assert said.get("cwd") == state["cwd"], said
        if turn == 1:
            assert "LEFT_BEHIND" in said["stdout"], said
            command = f"cd {state['cwd']} && git apply - <<'EOF'\n{state['gold']}EOF\n"
            command += "git diff --stat"
            # the action as JSON text in an artifact of another name, as AgentSWE also reads it
            return "response", json.dumps({"action": "debug", "content": command})
        if turn == 2:
            assert said["debug_result"] is True and said["success"] is True, said
            assert "1 file changed" in said["stdout"], said
            check = "test ! -e LEFT_BEHIND && git status --short | wc -l"
            return "bash", f"cd {state['cwd']} && {check}"
        assert said["exit_code"] == 0 and said["stdout"].strip() == "0", said  # nothing stayed
        return "patch", state["gold"]


CONTRACTS: dict[str, type[Contract]] = {
    "mini": MiniSwe,
    "tagged": Tagged,
    "jsonreply": JsonReply,
    "agentswe": AgentSwe,
}
