"""Cancellation without races: a participant call cancelled at any moment leaves no remote
task running, and a cancelled assessment leaves no sandboxed process behind.

The participants here run in the test's own event loop (real A2A servers on 127.0.0.1), so
the test decides when they name their task; every wait is on an event, never a sleep."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers import new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import (
    AgentSkill,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Role,
    SendMessageRequest,
    TaskState,
)
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.types import Message as AsgiMessage

from swegreen.a2a.participant_client import WAITING_FOR_TASK, A2AParticipant
from swegreen.agent.assessment import AgentSettings
from swegreen.agent.executor import GreenAgentExecutor
from swegreen.agent.server import agent_card, build_app, green_card, open_task
from swegreen.core.classify import Reason
from swegreen.core.dataset import Instance, load_dataset
from swegreen.evaluation.engine import LocalSettings
from swegreen.participants.server import Reply, participant_app
from swegreen.sample import SampleBenchmark
from swegreen.sandbox.isolation import Isolation
from tests.helpers import GIT_ID, read_jsonl, serving

GUARD = 60  # seconds: a test that waits longer than this has hung (the bug it guards)
CANCELED = TaskState.TASK_STATE_CANCELED


# --- a participant that names its task only when told -------------------------------------


class GatedParticipant(AgentExecutor):
    """Names its task (its first event) only once ``gate`` opens, then works until cancelled;
    with ``detach`` it returns at once instead, leaving the task working, so the caller's
    stream ends early and it must re-subscribe. Records the task ids it was given."""

    def __init__(self, detach: bool = False) -> None:
        self.detach = detach
        self.gate = asyncio.Event()
        self.started = asyncio.Event()  # an execute() began
        self.working = asyncio.Event()  # a task was named and went working
        self.idle = asyncio.Event()  # no execute() is running
        self.idle.set()
        self.task_ids: list[str] = []
        self._running = 0

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None
        self.task_ids.append(context.task_id)
        self._running += 1
        self.idle.clear()
        self.started.set()
        try:
            await self.gate.wait()
            _, updater = await open_task(context, event_queue)
            await updater.start_work()
            self.working.set()
            if not self.detach:
                await asyncio.Event().wait()  # until cancelled
        finally:
            self._running -= 1
            if not self._running:
                self.idle.set()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class Wire:
    """ASGI middleware in front of a participant: records the JSON-RPC methods called (with
    an event per method), and can hold back the agent card or the start of a streamed
    answer (as a buffering proxy does) until told."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.methods: list[str] = []
        self.seen: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.card_gate = asyncio.Event()
        self.card_gate.set()
        self.stream_gate = asyncio.Event()
        self.stream_gate.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"].endswith("agent-card.json"):
            self.seen["card"].set()
            await self.card_gate.wait()
            return await self.app(scope, receive, send)
        chunks: list[AsgiMessage] = []
        while not chunks or chunks[-1].get("more_body"):
            chunks.append(await receive())
        body = b"".join(c.get("body", b"") for c in chunks)
        method = json.loads(body).get("method", "") if body else ""
        self.methods.append(method)
        self.seen[method].set()

        async def replay() -> AsgiMessage:
            return chunks.pop(0) if chunks else await receive()

        async def held(message: AsgiMessage) -> None:
            if message["type"] == "http.response.start" and method == "SendStreamingMessage":
                await self.stream_gate.wait()
            await send(message)

        await self.app(scope, replay, held)


@contextlib.asynccontextmanager
async def gated(
    *, detach: bool = False, streaming: bool = True
) -> AsyncIterator[tuple[str, GatedParticipant, Wire]]:
    executor = GatedParticipant(detach)
    wires: list[Wire] = []

    def build(url: str) -> ASGIApp:
        skill = AgentSkill(id="fix", name="fix", description="fixes issues", tags=["test"])
        card = agent_card("gated", "names its task when told", url, [skill])
        card.capabilities.streaming = streaming
        wires.append(Wire(build_app(executor, card)))
        return wires[0]

    async with serving(build) as url:
        try:
            yield url, executor, wires[0]
        finally:  # let anything still held go, so the server can stop
            for gate in (executor.gate, wires[0].card_gate, wires[0].stream_gate):
                gate.set()
            async with a2a_client(url) as client:
                for task_id in executor.task_ids:  # a task the test left running
                    with contextlib.suppress(Exception):
                        await client.cancel_task(CancelTaskRequest(id=task_id))


@contextlib.asynccontextmanager
async def a2a_client(url: str) -> AsyncIterator[Any]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=300)) as http:
        yield await ClientFactory(ClientConfig(httpx_client=http)).create_from_url(url)


async def states(url: str, task_ids: list[str]) -> list[int]:
    async with a2a_client(url) as client:
        return [(await client.get_task(GetTaskRequest(id=i))).status.state for i in task_ids]


class WaitingLog(logging.Handler):
    """Sets ``seen`` when the client logs that a cancelled call waits for its task id."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen = asyncio.Event()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        if record.msg == WAITING_FOR_TASK:
            self.seen.set()


@contextlib.contextmanager
def client_log() -> Any:
    logger = logging.getLogger("swegreen.agent.participant")
    handler, level = WaitingLog(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def instance() -> Instance:
    return Instance(
        instance_id="o__r-1",
        repo="o/r",
        base_commit="c" * 40,
        patch="",
        test_patch="",
        problem_statement="fix it",
        version="1.0",
        FAIL_TO_PASS=("t1",),
        PASS_TO_PASS=(),
    )


def guarded(coro: Coroutine[Any, Any, None]) -> None:
    async def main() -> None:
        async with asyncio.timeout(GUARD):
            await coro

    asyncio.run(main())


async def call(url: str, http: httpx.AsyncClient, **options: Any) -> asyncio.Task[Any]:
    participant = A2AParticipant(
        "gated",
        url,
        timeout=options.pop("timeout", 600),
        url_template="https://example.invalid/{repo}.git",
        http=http,
        **options,
    )
    return asyncio.create_task(participant.get_patch(instance()))


async def cancelled(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# --- the participant client ------------------------------------------------------------


def test_cancelled_before_the_request_is_sent_nothing_is_sent() -> None:
    async def main() -> None:
        async with gated() as (url, participant, wire), httpx.AsyncClient() as http:
            wire.card_gate.clear()
            task = await call(url, http)
            await wire.seen["card"].wait()
            task.cancel()
            wire.card_gate.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert participant.task_ids == []
            assert wire.methods == []

    guarded(main())


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "polling"])
def test_cancelled_before_the_participant_names_its_task_the_task_is_cancelled(
    streaming: bool,
) -> None:
    """The race the review found: the request is out, the task id not back yet."""

    async def main() -> None:
        with client_log() as log:
            async with (
                gated(streaming=streaming) as (url, participant, _),
                httpx.AsyncClient(timeout=httpx.Timeout(30, read=300)) as http,
            ):
                task = await call(url, http)
                await participant.started.wait()
                task.cancel()
                await log.seen.wait()  # the client waits for the id...
                participant.gate.set()  # ...which comes only now
                with pytest.raises(asyncio.CancelledError):
                    await task
                await participant.idle.wait()
                assert await states(url, participant.task_ids) == [CANCELED]
            assert any("was cancelled" in line for line in log.lines)

    guarded(main())


@pytest.mark.parametrize(
    ("moment", "detach", "streaming"),
    [
        ("working", False, True),  # while the answer streams
        ("GetTask", False, False),  # while polling an agent that does not stream
        ("SubscribeToTask", True, True),  # while re-subscribed after the stream ended
    ],
    ids=["streaming", "polling", "resubscribed"],
)
def test_cancelled_once_the_task_is_named_the_task_is_cancelled(
    moment: str, detach: bool, streaming: bool
) -> None:
    async def main() -> None:
        async with gated(detach=detach, streaming=streaming) as (url, participant, wire):
            participant.gate.set()
            async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=300)) as http:
                task = await call(url, http)
                await (participant.working if moment == "working" else wire.seen[moment]).wait()
                await cancelled(task)
            await participant.idle.wait()
            assert await states(url, participant.task_ids) == [CANCELED]
            assert "CancelTask" in wire.methods

    guarded(main())


def test_a_deadline_before_the_participant_names_its_task_cancels_the_task() -> None:
    async def main() -> None:
        with client_log() as log:
            async with (
                gated() as (url, participant, _),
                httpx.AsyncClient(timeout=httpx.Timeout(30, read=300)) as http,
            ):
                client = A2AParticipant("gated", url, timeout=0.5, url_template="{repo}", http=http)
                await client._connect()  # the deadline then falls after the request is sent
                task = asyncio.create_task(client.get_patch(instance()))
                await log.seen.wait()
                participant.gate.set()
                result = await task
                await participant.idle.wait()
                assert await states(url, participant.task_ids) == [CANCELED]
        assert result.failure == Reason.PARTICIPANT_TIMEOUT
        assert "was cancelled" in result.detail

    guarded(main())


def test_a_participant_that_never_names_its_task_cannot_hold_up_the_cancel() -> None:
    async def main() -> None:
        with client_log() as log:
            async with gated() as (url, participant, wire), httpx.AsyncClient() as http:
                task = await call(url, http, cancel_grace=0.2)
                await participant.started.wait()
                await cancelled(task)  # the gate never opens: the wait for the id is bounded
                assert "ListTasks" in wire.methods  # the last resort found nothing
        assert any("named no task" in line for line in log.lines)

    guarded(main())


def test_a_task_whose_stream_is_held_back_is_found_by_its_context_and_cancelled() -> None:
    """A proxy that buffers the stream: the task exists, but its id never reaches us."""

    async def main() -> None:
        async with gated() as (url, participant, wire):
            wire.stream_gate.clear()
            participant.gate.set()
            async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=300)) as http:
                task = await call(url, http, cancel_grace=0.2)
                await participant.working.wait()
                await cancelled(task)
            await participant.idle.wait()
            assert await states(url, participant.task_ids) == [CANCELED]
            calls = [m for m in wire.methods if m in ("ListTasks", "CancelTask")]
            assert calls == ["ListTasks", "CancelTask"]

    guarded(main())


# --- the green agent: a cancelled assessment kills its sandboxes ---------------------------


def hanging_patch(sample: SampleBenchmark, row: dict[str, Any], token: str, work: Path) -> str:
    """A diff whose module, once imported by the tests, starts a child (named by ``token``)
    and then hangs: the eval script runs until someone kills its tree."""
    repo = work / "repo"
    owner, name = row["repo"].split("/")
    url = sample.url_template.format(owner=owner, name=name)
    subprocess.run(["git", "clone", "-q", url, str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", row["base_commit"]], check=True)
    stats = repo / "calculator" / "stats.py"
    stats.write_text(
        stats.read_text()
        + "\n\nimport subprocess as _sp, sys as _sys, time as _time\n"
        + f'_sp.Popen([_sys.executable, "-c", "import time; time.sleep(3600)", "{token}"])\n'
        + "_time.sleep(3600)\n"
    )
    return subprocess.run(
        ["git", "-C", str(repo), *GIT_ID, "diff"], check=True, capture_output=True, text=True
    ).stdout


def _stat(pid: str) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # state, ppid, pgrp, ... (after the name)


def tree_of(token: str) -> set[tuple[str, str]]:
    """(pid, start time) of every process in the process group of the one named by
    ``token``: the eval script's whole tree."""
    groups = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if token in Path(f"/proc/{pid}/cmdline").read_text():
                stat = _stat(pid)
                if stat is not None:
                    groups.add(stat[2])
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        stat = _stat(pid)
        if stat is not None and stat[2] in groups:
            found.add((pid, stat[19]))
    return found


def alive(processes: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Those still running (a zombie has died; only its parent has not reaped it yet)."""
    out = set()
    for pid, started in processes:
        stat = _stat(pid)
        if stat is not None and stat[19] == started and stat[0] != "Z":
            out.add((pid, started))
    return out


async def until(check: Callable[[], Any], what: str, limit: float) -> Any:
    """Poll a condition of the outside world (processes) until it holds; its value."""
    try:
        async with asyncio.timeout(limit):
            while not (value := check()):  # noqa: ASYNC110 (no event for another process)
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"{what}: not within {limit:g} s") from None
    return value


def test_cancelling_an_assessment_kills_the_running_eval_scripts(
    sample: SampleBenchmark,
    session_cache: Path,
    isolation: Isolation,
    host_env: dict[str, str],
    tmp_path: Path,
) -> None:
    row = next(r for r in read_jsonl(sample.dataset) if r["instance_id"] == "sample__calculator-1")
    token = f"swegreen-hang-{uuid.uuid4().hex}"
    patch = hanging_patch(sample, row, token, tmp_path)
    load_dataset(str(sample.dataset))  # fail here, not in the agent, if the sample is broken

    async def hang_solver(data: dict[str, Any], text: str) -> Reply:
        return Reply(patch, "a fix that hangs the tests")

    settings = AgentSettings(
        local=LocalSettings(output_dir=tmp_path / "results", cache_dir=session_cache),
        host_env=host_env,
        isolation=isolation,
        diagnose=False,
    )

    async def main() -> tuple[str, set[tuple[str, str]]]:
        async with (
            serving(lambda url: participant_app("hang", hang_solver, url)) as hang,
            serving(lambda url: build_app(GreenAgentExecutor(settings), green_card(url))) as green,
            a2a_client(green) as client,
        ):
            request = {
                "participants": {"hang": hang},
                "config": {
                    "dataset": "swegreen:sample",
                    "instance_ids": [row["instance_id"]],
                    "eval_timeout": 900,  # far beyond this test: only the cancel can stop it
                },
            }
            message = Message(
                role=Role.ROLE_USER,
                message_id=uuid.uuid4().hex,
                parts=[new_text_part(json.dumps(request))],
            )
            named = asyncio.Event()
            task_id, state = "", ""

            async def follow() -> None:
                nonlocal task_id, state
                stream = client.send_message(SendMessageRequest(message=message))
                async for event in stream:
                    kind = event.WhichOneof("payload")
                    if kind == "task":
                        task_id = event.task.id
                        named.set()
                    elif kind == "status_update":
                        state = TaskState.Name(event.status_update.status.state)

            follower = asyncio.create_task(follow())
            try:
                await named.wait()
                # the eval script is running once the patched module has started its child
                tree = await until(lambda: tree_of(token), "the eval script's start", 400)
                try:  # the cancel returns once the assessment has unwound
                    async with asyncio.timeout(GUARD):
                        cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
                        await follower
                except TimeoutError:
                    raise AssertionError("the assessment did not unwind after its cancel") from None
                assert cancelled.status.state == CANCELED
            finally:
                follower.cancel()
                with contextlib.suppress(BaseException):
                    await follower
            return state, tree

    async def guarded_main() -> tuple[str, set[tuple[str, str]]]:
        async with asyncio.timeout(500):
            return await main()

    state, tree = asyncio.run(guarded_main())
    assert state == "TASK_STATE_CANCELED"
    assert len(tree) >= 2  # at least the test runner and the child it started
    # SIGKILL has been sent to the whole group by now; dying is the kernel's business
    asyncio.run(until(lambda: not alive(tree), "the eval script's processes to die", 30))
