"""Participants that already exist, unchanged: doubles of the contracts in
tests/a2a/contracts.py (written here from docs/agentbeats.md, "Task dialects"), served over
A2A on 127.0.0.1 by a2a-sdk 1.x and by 0.3, each given a sample task by the real green agent
and each resolving it with the gold patch.

The dialect is chosen each way the docs name: the request (``task_dialect``, per role), the
card's extension, a skill's ``task-dialect:`` tag, or the default.
"""

from __future__ import annotations

import asyncio
import json
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
from tests.a2a.contracts import CONTRACTS, Contract
from tests.helpers import Server, free_port, serving, start, stop, wait_for_card
from tests.test_agent import assess

ROOT = Path(__file__).resolve().parents[1]
INSTANCE = "sample__calculator-2"


class Double(AgentExecutor):
    """A contract served by a2a-sdk 1.x."""

    def __init__(self, contract: Contract) -> None:
        self.contract = contract

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        _task, updater = await open_task(context, event_queue)
        texts = [p.text for p in context.message.parts if p.WhichOneof("content") == "text"]
        try:
            reply = await asyncio.to_thread(self.contract.answer, context.context_id, texts)
        except ValueError as exc:  # a task it cannot read
            await updater.failed(updater.new_agent_message([new_text_part(str(exc))]))
            return
        if reply.how == "status":
            await updater.complete(updater.new_agent_message([new_text_part(reply.text)]))
        else:
            await updater.add_artifact([new_text_part(reply.text)], name=reply.name)
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


def gold_patches(sample: SampleBenchmark) -> dict[str, str]:
    return {i.instance_id: i.patch for i in load_dataset(str(sample.dataset)).instances}


# where each contract's reply puts its patch, as the row records it
REPLIES = {
    "mini": "status message: bare diff",
    "tagged": "artifact: <patch> tag",
    "jsonreply": "artifact: JSON text part 'model_patch'",
    "agentswe": "artifact: bare diff",
}


def check_rows(rows: dict[str, Any], expected: dict[str, tuple[str, str]]) -> None:
    """Each role's one row resolved, with its dialect, what chose it and the reply's shape."""
    for role, (dialect, chosen_by) in expected.items():
        [row] = rows[role]["instances"]
        assert row["status"] == "resolved", (role, row)
        conversation = row["conversation"]
        assert conversation["dialect"] == dialect, (role, conversation)
        assert conversation["dialect_chosen_by"] == chosen_by, (role, conversation)
        assert conversation["reply"] == REPLIES[role], (role, conversation)
    turns = rows["agentswe"]["instances"][0]
    assert turns["conversation"]["turns"] == 4
    assert turns["interaction"]["steps"] == 3  # bash, debug, bash: under the budget


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
    """a2a-sdk 1.x: the tag reader's card declares its dialect with the extension; the
    request names the others' that are not the default."""
    contracts = {name: cls(gold_patches(sample), tmp_path) for name, cls in CONTRACTS.items()}

    def app(role: str, url: str) -> Any:
        skill = AgentSkill(id="fix", name="fix", description="fixes issues", tags=["swe-bench"])
        card = agent_card(role, "a participant written elsewhere", url, [skill])
        if role == "tagged":
            params = Struct()
            params.update({"dialect": "xml"})
            card.capabilities.extensions.append(AgentExtension(uri=EXTENSION_URI, params=params))
        return build_app(Double(contracts[role]), card)

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
    assert not any(c.complaints for c in contracts.values()), {
        k: c.complaints for k, c in contracts.items()
    }
    check_rows(
        rows,
        {
            "mini": ("json", "request"),
            "tagged": ("xml", "agent card extension"),
            "jsonreply": ("standard", "default"),
            "agentswe": ("agentswe", "request"),
        },
    )


def test_the_same_participants_served_by_a2a_0_3_work_unchanged(
    green: Server, sample: SampleBenchmark, a2a03_python: Path, tmp_path: Path
) -> None:
    """a2a-sdk 0.3, which public wrappers use. The mini-swe-agent wrapper's card says
    nothing of dialects, so the request asks for json; the tag reader and the AgentSWE
    agent declare theirs with a skill's ``task-dialect:`` tag."""
    (tmp_path / "gold.json").write_text(json.dumps(gold_patches(sample)))
    script = ROOT / "tests" / "a2a" / "participant_v03.py"
    running: dict[str, tuple[str, subprocess.Popen[bytes], Path]] = {}
    try:
        for name in CONTRACTS:
            port, log = free_port(), tmp_path / f"{name}.log"
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    [str(a2a03_python), str(script), str(port), name, str(tmp_path / "gold.json"),
                     str(tmp_path)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )  # fmt: skip
            running[name] = (f"http://127.0.0.1:{port}/", proc, log)
        for url, proc, log in running.values():
            wait_for_card(url, proc, log)
        request = {
            "participants": {name: url for name, (url, _, _) in running.items()},
            "config": {
                "dataset": "swegreen:sample",
                "instance_ids": [INSTANCE],
                "task_dialect": {"mini": "json"},
                "max_concurrent_rows": 4,
                "participant_timeout": 120,
            },
        }
        rows = asyncio.run(assess(green.url, request)).rows
    finally:
        for _, proc, _ in running.values():
            proc.terminate()
        for _, proc, _ in running.values():
            proc.wait(timeout=30)
    logs = {name: log.read_text()[-2000:] for name, (_, _, log) in running.items()}
    assert not any("bad task" in text for text in logs.values()), logs
    check_rows(
        rows,
        {
            "mini": ("json", "request"),
            "tagged": ("xml", "agent card skill"),
            "jsonreply": ("standard", "default"),
            "agentswe": ("agentswe", "agent card skill"),
        },
    )
