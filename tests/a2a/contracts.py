"""The contracts of public SWE-bench participants, written here from reading their code,
free of any A2A library: the doubles served by a2a-sdk 1.x (tests/test_dialects.py) and by
0.3 (participant_v03.py), as the public ones are, wrap the same ones.

Each contract reads one message's text parts as its participant does (text parts joined
with newlines: a2a's ``get_message_text``; data parts never read) and answers with a
``Reply``: how that participant finishes its task. A task it cannot read gets the answer
that participant gives then (its own words), and a note in ``complaints``, which the tests
require empty.

- ``mini``: durga-sandeep/agentbeats-mini-swe-baseline (purple/executor.py): parses the
  text as one JSON object, needs ``instance_id``, ``problem_statement`` and ``docker_image``
  (the image mini-swe-agent runs in: checked against the name expected,
  ``expected_image``), else fails its task with "Invalid instance payload: ..."; answers
  with the raw diff as the completed task's status message.
- ``purple``: zaidishahbaz1/purple-swebench (src/agent.py): JSON, else the text is the
  problem statement; needs an image in ``docker_image``, ``image_uri`` or ``image``;
  answers with an artifact named ``patch``: ``{"patch": "<diff>"}``.
- ``tagged``: jawtopi/swebench-white-agent (src/white_agent/executor.py): finds
  ``<task_id>``, ``<repository>``, ``<repo_url>``, ``<base_commit>`` (``<problem_statement>``,
  else the whole text) with its regular expressions, anywhere in the text; clones
  ``repo_url`` at ``base_commit`` itself (checked: the fix must apply there); answers with
  an artifact ``patch_response`` holding ``<patch>`` tags.
- ``agentswe``: soumya-batra/purple-swebench (src/agent.py, src/executor.py): a JSON
  message with ``problem_statement`` starts the conversation (``cwd``, ``python_version``,
  ``hints_text`` go to its model); each turn completes a task whose artifact is named for
  the action (``bash``, ``debug``, ``patch``); a JSON message with ``cwd`` and ``stdout``
  is a command's output. Four turns: look (writing a file), apply the gold patch in
  ``debug``, check that neither stayed, submit the patch.
- ``pro``: aefhm/swe-bench-purple-agent (src/agent.py), the SWE-bench Pro coding track:
  JSON with ``instance_id``, ``problem_statement``, ``docker_image``, else an artifact
  ``Error`` ("Error: could not parse problem payload: ..."); answers with an artifact
  ``Patch``: ``{"instance_id": ..., "patch": "<diff>"}``.
"""

from __future__ import annotations

import json
import os
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


def expected_image(instance_id: str) -> str:
    """The image the task must name: SWE-bench's, or, where the green agent grades in
    instance images of another source, that source's (``$CONTRACT_IMAGE_TEMPLATE``, with
    ``{official_id}``/``{instance_id}``; Docker Hub's prefix written out as mini-swe-agent
    writes it). The public participants pull whatever they are told: a name that does not
    name the grader's image makes the runner pull two."""
    template = os.environ.get("CONTRACT_IMAGE_TEMPLATE")
    if not template:
        return swebench_image(instance_id)
    name = template.format(
        arch="x86_64",
        instance_id=instance_id,
        official_id=instance_id.replace("__", "_1776_").lower(),
    )
    first = name.split("/", 1)[0]
    return name if "." in first or ":" in first else f"docker.io/{name}"


@dataclass(frozen=True)
class Reply:
    # "status": completed, the text as its status message; "artifact": an artifact, then
    # completed; "failed": failed, the text as its status message; "input_required": the
    # task input-required, then the artifact
    how: str
    text: str
    name: str = "response"  # the artifact's name


class Unreadable(Exception):
    """The task is not what this participant reads: ``reply`` is what it answers then."""

    def __init__(self, reply: Reply, why: str) -> None:
        super().__init__(why)
        self.reply = reply


@dataclass
class Contract:
    gold: dict[str, str]  # instance id -> the patch to give
    workdir: Path
    complaints: list[str] = field(default_factory=list)

    def answer(self, context_id: str, texts: list[str]) -> Reply:
        try:
            return self.reply(context_id, "\n".join(texts))
        except Unreadable as exc:
            self.complaints.append(f"{type(self).__name__}: {exc}")
            return exc.reply
        except (AssertionError, KeyError) as exc:
            self.complaints.append(f"{type(self).__name__}: {exc!r}")
            return Reply("failed", f"bad task: {exc!r}")

    def reply(self, context_id: str, text: str) -> Reply:
        raise NotImplementedError


class MiniSwe(Contract):
    def reply(self, context_id: str, text: str) -> Reply:
        try:
            task = json.loads(text)
        except ValueError as exc:
            raise Unreadable(
                Reply(
                    "failed",
                    f"Invalid instance payload: Expected JSON instance payload, got: {exc}",
                ),
                "not JSON",
            ) from None
        if not isinstance(task, dict):
            raise Unreadable(
                Reply("failed", "Invalid instance payload: not an object"), "not an object"
            )
        missing = [
            k for k in ("instance_id", "problem_statement", "docker_image") if not task.get(k)
        ]
        if missing:
            said = f"Invalid instance payload: Instance payload missing required fields: {missing}"
            raise Unreadable(Reply("failed", said), f"missing {missing}")
        wanted = expected_image(task["instance_id"])
        assert task["docker_image"] == wanted, f"image {task['docker_image']} is not {wanted}"
        return Reply("status", self.gold[task["instance_id"]])


class Purple(Contract):
    def reply(self, context_id: str, text: str) -> Reply:
        try:
            task = json.loads(text)
        except ValueError:
            task = {"problem_statement": text}
        if not isinstance(task, dict):
            task = {"problem_statement": str(task)}
        image = task.get("docker_image") or task.get("image_uri") or task.get("image")
        if not image or "instance_id" not in task:
            raise Unreadable(
                Reply("failed", "Error: the task names no image (docker_image, image_uri, image)"),
                "no image",
            )
        assert image == expected_image(task["instance_id"]), image
        patch = json.dumps({"patch": self.gold[task["instance_id"]]})
        return Reply("artifact", patch, "patch")


class Tagged(Contract):
    def reply(self, context_id: str, text: str) -> Reply:
        if not text:
            raise Unreadable(Reply("failed", "No input provided"), "no text")

        def tag(name: str) -> str | None:
            found = re.search(rf"<{name}>(.*?)</{name}>", text, re.DOTALL)
            return found.group(1).strip() if found else None

        task_id, repo, commit = tag("task_id"), tag("repository"), tag("base_commit")
        url = tag("repo_url") or (f"https://github.com/{repo}" if repo else None)
        if not (task_id and url and commit):
            # it would work on its default /repo and wrap whatever its model said in tags
            said = "<patch>\nI could not find the repository.\n</patch>"
            why = f"tags task_id={task_id} repo_url={url} base_commit={commit}"
            raise Unreadable(Reply("artifact", said, "patch_response"), why)
        assert tag("problem_statement") or text, "no issue"
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
        return Reply(
            "artifact",
            f"Here is the fix.\n<patch>\n{self.gold[task_id]}</patch>\n",
            "patch_response",
        )


@dataclass
class AgentSwe(Contract):
    state: dict[str, dict[str, Any]] = field(default_factory=dict)  # by context

    def reply(self, context_id: str, text: str) -> Reply:
        state = self.state.setdefault(context_id, {"turn": 0})
        try:
            said = json.loads(text)
        except ValueError:
            said = {}
        if isinstance(said, dict) and "problem_statement" in said:
            state.clear()
            state["turn"] = 0
        elif not (isinstance(said, dict) and "cwd" in said and "stdout" in said):
            # raw text goes to its model, which answers in its own words
            raise Unreadable(
                Reply("artifact", "What should I do?", "error"), "neither task nor output"
            )
        name, body = self.step(state, said)
        state["turn"] += 1
        return Reply("artifact", body, name)

    def step(self, state: dict[str, Any], said: dict[str, Any]) -> tuple[str, str]:
        turn = state["turn"]
        if turn == 0:
            # its prompt: "Current Working Directory (cwd): {cwd}" ("unknown" when the task
            # has none), the Python ("3.9" by default), the hints; then its first command
            for key in ("problem_statement", "hints_text"):
                assert key in said, f"the task has no {key}"
            python = said.get("python_version", "3.9")
            assert re.fullmatch(r"\d+\.\d+", python), python
            assert "FAIL_TO_PASS" not in json.dumps(said).upper(), "hidden tests were sent"
            state.update(cwd=said.get("cwd", "unknown"), gold=self.gold[said["instance_id"]])
            return "bash", f"cd {state['cwd']} && touch LEFT_BEHIND && git status --short"
        assert said.get("cwd") == state["cwd"], said
        if turn == 1:
            assert "LEFT_BEHIND" in said["stdout"], said
            command = f"cd {state['cwd']} && git apply - <<'EOF'\n{state['gold']}EOF\n"
            return "debug", command + "git diff --stat"
        if turn == 2:
            assert said["debug_result"] is True and said["success"] is True, said
            assert "1 file changed" in said["stdout"], said
            check = "test ! -e LEFT_BEHIND && git status --short | wc -l"
            return "bash", f"cd {state['cwd']} && {check}"
        assert said["exit_code"] == 0 and said["stdout"].strip() == "0", said  # nothing stayed
        return "patch", state["gold"]


@dataclass
class AgentSweWaiting(AgentSwe):
    """AgentSWE as soumya-batra/purple-swebench's earlier versions end a command's turn:
    the task goes input-required first, and the artifact naming the command follows it
    (a2a-sdk 0.3 keeps the stream open for it). The patch completes the task."""

    def reply(self, context_id: str, text: str) -> Reply:
        reply = super().reply(context_id, text)
        if reply.how == "artifact" and reply.name in ("bash", "debug"):
            return Reply("input_required", reply.text, reply.name)
        return reply


class Pro(Contract):
    def reply(self, context_id: str, text: str) -> Reply:
        try:
            problem = json.loads(text)
            instance_id = problem["instance_id"]
            problem["problem_statement"]
            image = problem["docker_image"]
        except (ValueError, KeyError, TypeError) as exc:
            raise Unreadable(
                Reply("artifact", f"Error: could not parse problem payload: {exc}", "Error"),
                repr(exc),
            ) from None
        assert image == expected_image(instance_id), image
        patch = json.dumps({"instance_id": instance_id, "patch": self.gold[instance_id]})
        return Reply("artifact", patch, "Patch")


CONTRACTS: dict[str, type[Contract]] = {
    "mini": MiniSwe,
    "purple": Purple,
    "tagged": Tagged,
    "agentswe": AgentSwe,
    "pro": Pro,
}
# Served by a2a-sdk 0.3 only: 1.x ends a stream at input-required, so nothing follows it.
CONTRACTS_V03 = {**CONTRACTS, "agentswe_waiting": AgentSweWaiting}
