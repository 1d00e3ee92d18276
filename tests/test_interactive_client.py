"""The green agent's side of the interactive mode against participants that do not stream
(polled) and that answer with plain messages instead of a task: real A2A servers on
127.0.0.1 in this event loop, real workbenches from the sample's prepared workspace."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
from a2a.helpers import new_data_part, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.types import AgentSkill, Message, Role

from swegreen.a2a.participant_client import A2AParticipant
from swegreen.agent.server import agent_card, build_app
from swegreen.core.config import EvalConfig
from swegreen.core.dataset import Instance, load_dataset
from swegreen.evaluation.engine import Engine
from swegreen.evaluation.workbench import Workbenches
from swegreen.participants.server import SolverExecutor, task_facts
from swegreen.participants.solvers import ScriptedShellSolver
from swegreen.sample import SampleBenchmark
from tests.conftest import sample_config, sample_instance
from tests.test_cancellation import serving

INSTANCE = "sample__calculator-1"
SKILL = AgentSkill(id="fix", name="fix", description="fixes issues", tags=["test"])


def the_instance(sample: SampleBenchmark) -> Instance:
    return sample_instance(sample, INSTANCE)


async def ask(url: str, engine: Engine, instance: Instance, config: EvalConfig) -> Any:
    async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=300)) as http:
        participant = A2AParticipant(
            "p",
            url,
            timeout=300,
            url_template="{repo}",
            http=http,
            poll_interval=0.2,
            workbenches=Workbenches(engine.testbeds),
            budget=config.budget(),
        )
        return await participant.get_patch(instance)


def test_a_participant_that_does_not_stream_is_polled_through_its_commands(
    sample_engine: Engine, sample: SampleBenchmark
) -> None:
    dataset = load_dataset(str(sample.dataset))
    solver = ScriptedShellSolver("explore", dataset)

    def build(url: str) -> Any:
        card = agent_card("polled", "does not stream", url, [SKILL])
        card.capabilities.streaming = False
        return build_app(SolverExecutor(solver), card)

    async def scenario() -> Any:
        async with serving(build) as url:
            return await ask(url, sample_engine, the_instance(sample), sample_config(sample))

    result = asyncio.run(scenario())
    assert result.failure is None, result.detail
    assert result.patch.startswith("diff --git a/calculator/stats.py")
    assert "raise ValueError" in result.patch
    assert result.interaction["steps"] == 5
    outputs = [c["output"] for c in result.extra["transcript"]]
    assert "ZeroDivisionError" in outputs[1] and "ValueError" in outputs[3]


class MessageParticipant(AgentExecutor):
    """Answers with plain messages, no task: one command, then a patch built from what the
    command printed (the file's first line, commented)."""

    def __init__(self) -> None:
        self.results: list[dict[str, Any]] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        data, _ = task_facts(context)
        assert context.message is not None
        if "command_result" not in data:
            said = [new_data_part({"command": "head -1 calculator/stats.py"})]
        else:
            self.results.append(data["command_result"])
            first = data["command_result"]["output"].splitlines()[0]
            patch = (
                "diff --git a/calculator/stats.py b/calculator/stats.py\n"
                "--- a/calculator/stats.py\n+++ b/calculator/stats.py\n"
                f"@@ -1 +1,2 @@\n+# seen: {first}\n {first}\n"
            )
            said = [new_text_part("done"), new_data_part({"patch": patch})]
        await event_queue.enqueue_event(
            Message(
                role=Role.ROLE_AGENT,
                message_id=uuid.uuid4().hex,
                context_id=context.message.context_id,
                parts=said,
            )
        )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


def test_a_participant_that_answers_with_messages_gets_its_results_in_the_context(
    sample_engine: Engine, sample: SampleBenchmark
) -> None:
    executor = MessageParticipant()

    def build(url: str) -> Any:
        return build_app(executor, agent_card("messages", "no tasks", url, [SKILL]))

    async def scenario() -> Any:
        async with serving(build) as url:
            return await ask(url, sample_engine, the_instance(sample), sample_config(sample))

    result = asyncio.run(scenario())
    [seen] = executor.results
    assert seen["exit_code"] == 0 and seen["output"].strip()
    assert result.failure is None and f"+# seen: {seen['output'].strip()}" in result.patch
    assert result.interaction["steps"] == 1
    assert json.loads(json.dumps(result.extra["transcript"]))[0]["command"].startswith("head")


def test_in_process_isolation_the_green_agent_says_the_mode_is_not_offered(
    sample: SampleBenchmark, session_cache: Path, host_env: dict[str, str], tmp_path: Path
) -> None:
    from a2a.types import SendMessageRequest
    from google.protobuf.json_format import MessageToDict

    from swegreen.agent.assessment import AgentSettings
    from swegreen.agent.executor import GreenAgentExecutor
    from swegreen.agent.server import green_card
    from swegreen.evaluation.engine import LocalSettings
    from swegreen.participants.server import participant_app
    from swegreen.sandbox.isolation import Isolation
    from tests.test_cancellation import a2a_client

    solver = ScriptedShellSolver("explore", load_dataset(str(sample.dataset)))
    settings = AgentSettings(
        local=LocalSettings(output_dir=tmp_path / "results", cache_dir=session_cache),
        host_env=host_env,
        isolation=Isolation.probe("process"),
        defaults={"isolation": "process"},  # the host's setting
        diagnose=False,
    )
    request: dict[str, Any] = {"config": {"dataset": "swegreen:sample", "instance_ids": [INSTANCE]}}

    async def scenario() -> tuple[list[str], list[dict[str, Any]]]:
        said, rows = [], []
        async with (
            serving(lambda url: participant_app("explore", solver, url)) as explore,
            serving(lambda url: build_app(GreenAgentExecutor(settings), green_card(url))) as green,
            a2a_client(green) as client,
        ):
            request["participants"] = {"explore": explore}
            message = Message(
                role=Role.ROLE_USER,
                message_id=uuid.uuid4().hex,
                parts=[new_text_part(json.dumps(request))],
            )
            async for event in client.send_message(SendMessageRequest(message=message)):
                found = MessageToDict(event)
                status = found.get("statusUpdate", {}).get("status", {})
                said += [p.get("text", "") for p in status.get("message", {}).get("parts", [])]
                for part in found.get("artifactUpdate", {}).get("artifact", {}).get("parts", []):
                    rows += part.get("data", {}).get("instances", [])
        return said, rows

    said, rows = asyncio.run(scenario())
    assert any("interactive mode is not offered" in s for s in said)
    [row] = rows
    assert (row["status"], row["reason"], row["interaction"]) == ("no_op", "no_patch", None)
