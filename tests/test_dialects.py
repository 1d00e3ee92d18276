"""Participants that already exist, unchanged: doubles written here from their contracts
(docs/agentbeats.md, "Task dialects"), served over A2A on 127.0.0.1, each given a sample
task by the real green agent and each resolving it with the gold patch.

- ``mini``: a mini-swe-agent wrapper. It reads only text parts, parses them as one JSON
  object, needs ``instance_id``, ``problem_statement`` and ``docker_image`` (named as
  SWE-bench names its images) and replies with the raw diff as the completed task's status
  message. It gets the JSON dialect because the request asks for it.
- ``tagged``: reads XML-tagged text, clones ``repo_url`` at ``base_commit`` itself, and
  answers with ``<patch>`` tags in an artifact. Its card declares the XML dialect.
- ``json-reply``: takes the standard task, answers with a text part holding
  ``{"model_patch": "<diff>"}``.
- ``agentswe``: speaks the AgentSWE protocol: a JSON task with ``cwd``, each turn a
  completed task whose artifact is named ``bash``, ``debug`` or ``patch`` (or says so as
  JSON), the command's output in the next message of the same context. It checks that
  what its commands wrote did not stay.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2a.helpers import new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.types import AgentExtension, AgentSkill
from google.protobuf.struct_pb2 import Struct

from swegreen.agent.server import agent_card, build_app, open_task
from swegreen.core.dataset import load_dataset
from swegreen.core.task_dialects import EXTENSION_URI
from swegreen.sample import SampleBenchmark
from tests.helpers import Server, free_port, serving, start, stop, wait_for_card
from tests.test_agent import assess

ROOT = Path(__file__).resolve().parents[1]
INSTANCE = "sample__calculator-2"
IMAGE = "docker.io/swebench/sweb.eval.x86_64.sample_1776_calculator-2:latest"


class Double(AgentExecutor):
    """Answers each task by ``answer(text parts) -> (how, reply text)``; a complaint about
    the task fails it, with the complaint as its reason."""

    def __init__(self, gold: dict[str, str], workdir: Path) -> None:
        self.gold = gold
        self.workdir = workdir
        self.complaints: list[str] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        _task, updater = await open_task(context, event_queue)
        texts = [p.text for p in context.message.parts if p.WhichOneof("content") == "text"]
        try:
            how, reply = await asyncio.to_thread(self.answer, texts)
        except (AssertionError, ValueError) as exc:  # a task it cannot read
            self.complaints.append(str(exc))
            await updater.failed(updater.new_agent_message([new_text_part(str(exc))]))
            return
        if how == "status":
            await updater.complete(updater.new_agent_message([new_text_part(reply)]))
        else:
            await updater.add_artifact([new_text_part(reply)], name="response")
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None

    def answer(self, texts: list[str]) -> tuple[str, str]:
        raise NotImplementedError


class MiniSweDouble(Double):
    def answer(self, texts: list[str]) -> tuple[str, str]:
        assert len(texts) == 1, f"expected one text part, got {len(texts)}"
        task = json.loads(texts[0])
        for key in ("instance_id", "problem_statement", "docker_image", "base_commit", "repo"):
            assert task.get(key), f"the task has no {key}"
        assert "hints" in task, "the task has no hints"
        assert task["docker_image"] == IMAGE, task["docker_image"]
        return "status", self.gold[task["instance_id"]]


class TaggedDouble(Double):
    def answer(self, texts: list[str]) -> tuple[str, str]:
        text = "\n".join(texts)

        def tag(name: str) -> str:
            found = re.search(rf"<{name}>(.*?)</{name}>", text, re.DOTALL)
            assert found, f"no <{name}> in the task"
            return found.group(1).strip()

        task_id, url, commit = tag("task_id"), tag("repo_url"), tag("base_commit")
        assert tag("problem_statement") and tag("repository") == "sample/calculator"
        checkout = self.workdir / task_id
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
        return "artifact", f"Here is the fix.\n<patch>\n{self.gold[task_id]}</patch>\n"


class JsonReplyDouble(Double):
    def answer(self, texts: list[str]) -> tuple[str, str]:
        found = re.search(r"Instance: (\S+)", "\n".join(texts))
        assert found, "the standard task names its instance"
        return "artifact", json.dumps({"model_patch": self.gold[found.group(1)]})


class AgentSweDouble(AgentExecutor):
    """Four turns per context: look (writing a file), try the gold patch in ``debug``,
    check that neither stayed, submit the gold patch."""

    def __init__(self, gold: dict[str, str]) -> None:
        self.gold = gold
        self.state: dict[str, dict[str, Any]] = {}
        self.complaints: list[str] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        _task, updater = await open_task(context, event_queue)
        [text] = [p.text for p in context.message.parts if p.WhichOneof("content") == "text"]
        state = self.state.setdefault(context.context_id, {"turn": 0})
        try:
            name, body = self.step(state, json.loads(text))
        except (AssertionError, ValueError, KeyError) as exc:
            self.complaints.append(f"turn {state['turn']}: {exc!r}")
            await updater.failed(updater.new_agent_message([new_text_part(str(exc))]))
            return
        state["turn"] += 1
        await updater.add_artifact([new_text_part(body)], name=name)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None

    def step(self, state: dict[str, Any], said: dict[str, Any]) -> tuple[str, str]:
        turn = state["turn"]
        if turn == 0:
            for key in ("cwd", "problem_statement", "hints_text", "python_version"):
                assert key in said, f"the task has no {key}"
            assert re.fullmatch(r"\d+\.\d+", said["python_version"]), said["python_version"]
            assert "fail_to_pass" not in said and "FAIL_TO_PASS" not in json.dumps(said)
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


@pytest.fixture(scope="module")
def green(session_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start(["serve"], session_cache, tmp_path_factory.mktemp("green"), "green")
    try:
        yield server
    finally:
        stop([server])


def test_existing_participants_work_unchanged(
    green: Server, sample: SampleBenchmark, tmp_path: Path
) -> None:
    gold = {i.instance_id: i.patch for i in load_dataset(str(sample.dataset)).instances}
    doubles = {
        "mini": MiniSweDouble(gold, tmp_path),
        "tagged": TaggedDouble(gold, tmp_path),
        "jsonreply": JsonReplyDouble(gold, tmp_path),
        "agentswe": AgentSweDouble(gold),
    }

    def app(role: str, url: str) -> Any:
        skill = AgentSkill(id="fix", name="fix", description="fixes issues", tags=["swe-bench"])
        card = agent_card(role, "a participant written elsewhere", url, [skill])
        if role == "tagged":
            params = Struct()
            params.update({"dialect": "xml"})
            card.capabilities.extensions.append(AgentExtension(uri=EXTENSION_URI, params=params))
        return build_app(doubles[role], card)

    async def run() -> dict[str, Any]:
        async with (
            serving(lambda url: app("mini", url)) as mini,
            serving(lambda url: app("tagged", url)) as tagged,
            serving(lambda url: app("jsonreply", url)) as jsonreply,
            serving(lambda url: app("agentswe", url)) as agentswe,
        ):
            participants = {
                "mini": mini,
                "tagged": tagged,
                "jsonreply": jsonreply,
                "agentswe": agentswe,
            }
            request = {
                "participants": participants,
                "config": {
                    "dataset": "swegreen:sample",
                    "instance_ids": [INSTANCE],
                    "task_dialect": {"mini": "json", "agentswe": "agentswe"},
                    "max_concurrent_rows": 4,
                    "participant_timeout": 120,
                },
            }
            return (await assess(green.url, request)).rows

    rows = asyncio.run(run())
    assert not any(d.complaints for d in doubles.values()), {
        k: d.complaints for k, d in doubles.items()
    }
    expected = {
        "mini": ("json", "request", "status message: bare diff"),
        "tagged": ("xml", "agent card extension", "artifact: <patch> tag"),
        "jsonreply": ("standard", "default", "artifact: JSON text part 'model_patch'"),
        "agentswe": ("agentswe", "request", "artifact: bare diff"),
    }
    for role, (dialect, chosen_by, reply) in expected.items():
        [row] = rows[role]["instances"]
        assert row["status"] == "resolved", (role, row)
        conversation = row["conversation"]
        assert conversation["dialect"] == dialect and conversation["dialect_chosen_by"] == chosen_by
        assert conversation["reply"] == reply, (role, conversation)
    agentswe = rows["agentswe"]["instances"][0]
    assert agentswe["conversation"]["turns"] == 4
    assert agentswe["interaction"]["steps"] == 3  # bash, debug, bash: under the budget


def test_a_mini_swe_agent_wrapper_on_a2a_0_3_resolves_its_task_unchanged(
    green: Server, sample: SampleBenchmark, a2a03_python: Path, tmp_path: Path
) -> None:
    """The same contract served by a2a-sdk 0.3, which public wrappers use: its card says
    nothing of dialects, so the request asks for json."""
    gold = {i.instance_id: i.patch for i in load_dataset(str(sample.dataset)).instances}
    (tmp_path / "gold.json").write_text(json.dumps(gold))
    port = free_port()
    log = (tmp_path / "mini03.log").open("wb")
    script = ROOT / "tests" / "a2a" / "participant_v03.py"
    proc = subprocess.Popen(
        [str(a2a03_python), str(script), str(port), str(tmp_path / "gold.json")],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_for_card(url, proc, tmp_path / "mini03.log")
        request = {
            "participants": {"mini": url},
            "config": {
                "dataset": "swegreen:sample",
                "instance_ids": [INSTANCE],
                "task_dialect": "json",
                "participant_timeout": 120,
            },
        }
        rows = asyncio.run(assess(green.url, request)).rows
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    [row] = rows["mini"]["instances"]
    assert row["status"] == "resolved", (row, (tmp_path / "mini03.log").read_text()[-2000:])
    assert row["conversation"] == {
        "dialect": "json",
        "dialect_chosen_by": "request",
        "reply": "status message: bare diff",
    }
