"""Asking a participant agent for a patch over A2A: a ``PatchSource``.

One message per instance (the issue as text plus the same facts as data), streamed with a
per-instance deadline. If the stream drops before the task ends, the client re-subscribes
(or polls when the agent does not stream). Whatever goes wrong (connection refused, HTTP
error, A2A error, timeout, a reply with no diff) becomes that row's reason; it never stops
other rows.

At the deadline, or when the row is cancelled, the remote task is cancelled too: closing a
stream does not stop it. The conversation runs as its own asyncio task so that a
cancellation that arrives before the participant has named its task (its first event) does
not tear down the request in flight: the stream is read on, for at most ``cancel_grace``
seconds, until the task id arrives, and that task is then cancelled. A participant that
names nothing in time is looked up by the context id the client chose for the message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.client.errors import A2AClientTimeoutError
from a2a.types import (
    AgentCard,
    Artifact,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Part,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

from swegreen.a2a.parts import reply_parts, text_of, user_message
from swegreen.core import agentswe
from swegreen.core.classify import Reason
from swegreen.core.dataset import Instance
from swegreen.core.errors import EvaluationFailure, ProtocolUnavailable
from swegreen.core.interaction import (
    Budget,
    BudgetExhausted,
    CommandOutcome,
    CommandRequest,
    Meter,
    parse_command,
)
from swegreen.core.patch_extraction import extract_patch
from swegreen.core.ports import PatchResult, Workbench, Workbenches
from swegreen.core.task_dialects import AUTO, CardFacts, choose, render
from swegreen.core.task_message import task_data, task_text

TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
    TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_AUTH_REQUIRED,
}
FAILED = {TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED}
# States after which the participant's task is over (input-required is over only for us).
FINISHED = FAILED | {TaskState.TASK_STATE_COMPLETED}
POLL_INTERVAL = 5.0
CANCEL_GRACE = 10.0  # seconds a cancelled call still waits for the participant to name its task
CANCEL_TIMEOUT = 10.0  # seconds for the cancel request itself
# Logged when a cancelled call waits for the task id (tests wait on it).
WAITING_FOR_TASK = "%s: cancelled before its task was named; waiting up to %g s for it"
# A stream that dies mid-way: the task goes on remotely, so re-attach instead of failing.
STREAM_DROPPED = (httpx.ReadTimeout, httpx.RemoteProtocolError, A2AClientTimeoutError)


WORKBENCH_SCOPE = "workbench"  # under the engine's work root, apart from graded testbeds
log = logging.getLogger("swegreen.agent.participant")
T = TypeVar("T")


@dataclass
class _Exchange:
    """One call for one instance: what the participant has said so far, and what it takes
    to cancel the call."""

    task_id: str = ""
    context_id: str = ""
    client: Client | None = None  # set once the request may have reached the participant
    # Set once the task id is known, the reply is complete, or the conversation is over.
    named: asyncio.Event = field(default_factory=asyncio.Event)
    state: int = TaskState.TASK_STATE_UNSPECIFIED
    artifacts: dict[str, list[Part]] = field(default_factory=dict)
    artifact_names: dict[str, str] = field(default_factory=dict)
    status_parts: list[Part] = field(default_factory=list)
    message_parts: list[Part] | None = None
    usage: dict[str, Any] | None = None
    # The task dialect and what chose it; where the patch was found (outcome_of).
    conversation: dict[str, Any] = field(default_factory=dict)
    # Input requests already answered (by their message id): a poll that still shows one
    # means the participant has not taken up our answer yet, not that it asks again.
    answered: set[str] = field(default_factory=set)
    _status_id: str = ""

    @property
    def done(self) -> bool:
        return self.message_parts is not None or self.state in TERMINAL

    def take_task(self, task: Task) -> None:
        self.task_id = task.id or self.task_id
        self._status(task.status)
        for artifact in task.artifacts:
            self.take_artifact(artifact, append=False)
        self._usage(task.metadata)
        self._check_named()

    def take_artifact(self, artifact: Artifact, append: bool) -> None:
        key = artifact.artifact_id or str(len(self.artifacts))
        parts = self.artifacts.setdefault(key, []) if append else []
        parts.extend(artifact.parts)
        self.artifacts[key] = parts
        self.artifact_names[key] = artifact.name or self.artifact_names.get(key, "")
        self._usage(artifact.metadata)

    def take(self, event: StreamResponse) -> None:
        kind = event.WhichOneof("payload")
        if kind == "task":
            self.take_task(event.task)
        elif kind == "message":
            self.message_parts = list(event.message.parts)
            self._usage(event.message.metadata)
        elif kind == "status_update":
            update = event.status_update
            self.task_id = update.task_id or self.task_id
            self._status(update.status)
        elif kind == "artifact_update":
            self.take_artifact(event.artifact_update.artifact, event.artifact_update.append)
        self._check_named()

    def _status(self, status: Any) -> None:
        message = status.message if status.HasField("message") else None
        if (
            status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            and message is not None
            and message.message_id in self.answered
        ):
            self.state = TaskState.TASK_STATE_WORKING
            return
        self.state = status.state
        if message is not None:
            self.status_parts = list(message.parts)
            self._status_id = message.message_id

    def turn(self) -> list[Part] | None:
        """What the participant said in a turn that waits for us (input-required, or a plain
        message without a patch): where the interactive mode looks for a command."""
        if self.message_parts is not None:
            if extract_patch(reply_parts(self.reply())).patch is not None:
                return None  # a final answer, whatever else it says
            return self.message_parts
        if self.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            return self.status_parts
        return None

    def next_turn(self) -> None:
        if self.state == TaskState.TASK_STATE_INPUT_REQUIRED and self._status_id:
            self.answered.add(self._status_id)
        self.state = TaskState.TASK_STATE_UNSPECIFIED
        self.status_parts = []
        self.message_parts = None

    def next_task(self) -> None:
        """The participant's task is over and the conversation goes on in a new task of
        the same context (the AgentSWE protocol): nothing of this one is kept."""
        self.next_turn()
        self.task_id = ""
        self.artifacts.clear()
        self.artifact_names.clear()

    def reply(self) -> list[Part]:
        parts = [p for chunk in self.artifacts.values() for p in chunk]
        return parts + (self.message_parts or []) + self.status_parts

    def _usage(self, metadata: Any) -> None:
        if metadata is not None and "usage" in metadata:
            self.usage = MessageToDict(metadata).get("usage")

    def _check_named(self) -> None:
        if self.task_id or self.done:
            self.named.set()


@dataclass
class _Session:
    """One instance's interactive mode: its meter, and its workbench, opened at the first
    command (so a participant that never sends one costs nothing). The time spent opening
    it (copying the prepared workspace, or building it first) is not the participant's:
    ``extend`` pushes its deadline back by as much."""

    workbenches: Workbenches
    instance: Instance
    meter: Meter
    extend: Callable[[float], None] = lambda _seconds: None
    stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    bench: Workbench | None = None

    async def open(self) -> Workbench:
        if self.bench is None:
            t0 = time.monotonic()
            self.bench = await self.stack.enter_async_context(
                self.workbenches.open(WORKBENCH_SCOPE, self.instance)
            )
            self.meter.usage.setup_seconds = time.monotonic() - t0
            self.extend(self.meter.usage.setup_seconds)
        return self.bench

    async def run(self, request: CommandRequest, *, discard: bool = False) -> CommandOutcome:
        """One command in the workbench; ``discard``: nothing it writes stays."""
        timeout = self.meter.admit(request)
        bench = await self.open()
        if discard:
            ran = await bench.run_discarded(request.command, timeout)
        else:
            ran = await bench.run(request.command, timeout)
        return self.meter.charge(request, ran.exit_code, ran.output, ran.duration)

    @property
    def python_version(self) -> str:
        """The workbench environment's Python (major.minor)."""
        assert self.bench is not None, "open() first"
        return self.bench.python_version

    @property
    def used(self) -> dict[str, Any] | None:
        usage = self.meter.usage
        return usage.as_row() if usage.steps or usage.ended else None


class A2AParticipant:
    """A participant reached over A2A (1.0, or 0.3 through the SDK's compat transport)."""

    deterministic = False

    def __init__(
        self,
        role: str,
        url: str,
        *,
        timeout: float,
        url_template: str,
        http: httpx.AsyncClient,
        poll_interval: float = POLL_INTERVAL,
        cancel_grace: float = CANCEL_GRACE,
        workbenches: Workbenches | None = None,
        budget: Budget | None = None,
        dialect: str = AUTO,
    ) -> None:
        """With ``workbenches`` and ``budget`` the interactive mode is offered (where the
        workbenches can isolate commands). ``dialect``: the task message's shape, or
        ``auto`` for what the participant's card declares (task_dialects.py)."""
        self.role = role
        self.url = url
        self.timeout = timeout
        self.url_template = url_template
        self.http = http
        self.poll_interval = poll_interval
        self.cancel_grace = cancel_grace
        self.workbenches = (
            workbenches if workbenches is not None and workbenches.available else None
        )
        self.budget = budget
        self.dialect = dialect
        self.name = f"a2a:{role}"
        self._client: Client | None = None
        self._card: AgentCard | None = None

    async def get_patch(self, instance: Instance) -> PatchResult:
        session = None
        if self.workbenches is not None and self.budget is not None:
            session = _Session(self.workbenches, instance, Meter(self.budget))
        try:
            return await self._get_patch(instance, session)
        finally:
            if session is not None:
                await _to_the_end(session.stack.aclose())

    async def _get_patch(self, instance: Instance, session: _Session | None) -> PatchResult:
        start = time.monotonic()
        data = task_data(instance, self.url_template, self.budget if session else None)
        # A context id of our own: the task can be looked up by it if the participant never
        # names it (see _stop).
        exchange = _Exchange(context_id=uuid.uuid4().hex)

        def result(patch: str | None, failure: str | None = None, detail: str = "") -> PatchResult:
            return PatchResult(
                patch,
                self.role,
                failure=failure,
                detail=detail,
                duration=time.monotonic() - start,
                usage=exchange.usage,
                interaction=session.used if session else None,
                conversation=dict(exchange.conversation) or None,
                extra={"transcript": session.meter.usage.commands} if session else {},
            )

        talk = asyncio.create_task(
            self._talk(data, exchange, session), name=f"{self.name}:{instance.instance_id}"
        )
        talk.add_done_callback(lambda _: exchange.named.set())
        try:
            async with asyncio.timeout(self.timeout) as deadline:
                if session is not None:
                    session.extend = lambda s: deadline.reschedule((deadline.when() or 0) + s)
                await asyncio.wait({talk})  # never cancels talk: _stop decides how it ends
        except TimeoutError:
            what = await _to_the_end(self._stop(talk, exchange))
            return result(
                None,
                Reason.PARTICIPANT_TIMEOUT,
                f"{self.role} did not finish within {self.timeout:g} s; {what}",
            )
        except asyncio.CancelledError:
            await _to_the_end(self._stop(talk, exchange))
            raise
        try:
            talk.result()
        except BudgetExhausted as exc:
            what = await _to_the_end(self._stop(talk, exchange, search=False))
            return result(None, Reason.BUDGET_EXHAUSTED, f"{self.role}: {exc}; {what}")
        except EvaluationFailure:  # its workspace could not be prepared: the row's error
            await _to_the_end(self._stop(talk, exchange, search=False))
            raise
        except Exception as exc:  # refused, HTTP 5xx, A2A errors, garbage: this row only
            detail = f"{self.role} at {self.url}: {_describe(exc)}"
            if exchange.task_id:  # it failed mid-way: the task may still run there
                detail += f"; {await _to_the_end(self._stop(talk, exchange, search=False))}"
            self._client = None  # reconnect for the next row
            return result(None, Reason.PARTICIPANT_ERROR, detail)
        patch, failure, detail = outcome_of(exchange, self.role)
        return result(patch, failure, detail)

    async def _talk(
        self, data: dict[str, Any], exchange: _Exchange, session: _Session | None
    ) -> None:
        client = await self._connect()
        dialect, chosen_by = choose(self.dialect, card_facts(self._card))
        exchange.conversation.update(dialect=dialect, dialect_chosen_by=chosen_by)
        if dialect == "agentswe":
            await self._agentswe(client, data, exchange, session)
            return
        rendered = render(dialect, data, task_text(data))
        message = user_message(rendered.text, rendered.data, uuid.uuid4().hex, exchange.context_id)
        while True:
            await self._converse(client, message, exchange)
            turn = exchange.turn() if session is not None else None
            request = parse_command(reply_parts(turn)) if turn is not None else None
            if session is None or request is None:
                return
            outcome = await session.run(request)
            message = user_message(
                outcome.message_text(),
                outcome.message_data(),
                uuid.uuid4().hex,
                exchange.context_id,
            )
            if exchange.state == TaskState.TASK_STATE_INPUT_REQUIRED and exchange.task_id:
                message.task_id = exchange.task_id
            exchange.next_turn()

    async def _agentswe(
        self, client: Client, data: dict[str, Any], exchange: _Exchange, session: _Session | None
    ) -> None:
        """The AgentSWE protocol (agentswe.py): a task per turn in one context, ``bash`` and
        ``debug`` commands run in the workbench with their writes thrown away, until a
        ``patch`` (or a turn that asks for nothing) ends it."""
        if session is None:
            raise ProtocolUnavailable(
                f"{self.role} speaks the AgentSWE protocol, whose commands run in the "
                "interactive mode's workbench: it needs isolation = bwrap and interactive = true"
            )
        bench = await session.open()
        cwd = str(bench.workdir)
        facts = {**data, "cwd": cwd, "python_version": session.python_version}
        message = user_message(
            render("agentswe", facts, "").text, None, uuid.uuid4().hex, exchange.context_id
        )
        while True:
            await self._converse(client, message, exchange)
            if exchange.state != TaskState.TASK_STATE_COMPLETED:
                return  # failed, or a plain message: outcome_of says what it was
            named = [
                (exchange.artifact_names.get(key, ""), text_of(parts))
                for key, parts in exchange.artifacts.items()
            ]
            action, content = agentswe.turn(named, text_of(exchange.status_parts))
            exchange.conversation["turns"] = exchange.conversation.get("turns", 0) + 1
            if action not in ("bash", "debug"):
                return  # a patch, or nothing asked: the reply is the answer
            outcome = await session.run(CommandRequest(content), discard=True)
            answer = agentswe.result(
                action, cwd, outcome.output, outcome.exit_code, outcome.steps_left
            )
            message = user_message(json.dumps(answer), None, uuid.uuid4().hex, exchange.context_id)
            exchange.next_task()

    async def _connect(self) -> Client:
        if self._client is None:
            card = await A2ACardResolver(self.http, self.url).get_agent_card()
            streaming = bool(card.capabilities.streaming)
            config = ClientConfig(
                httpx_client=self.http, streaming=streaming, polling=not streaming
            )
            self._card = card
            self._client = ClientFactory(config).create(card)
        return self._client

    async def _converse(self, client: Client, message: Any, exchange: _Exchange) -> None:
        exchange.client = client  # from here on a task may exist remotely
        try:
            stream = client.send_message(SendMessageRequest(message=message))
            async with contextlib.aclosing(stream):
                async for event in stream:
                    exchange.take(event)
                    if exchange.done:
                        return
        except STREAM_DROPPED:
            if not exchange.task_id:
                raise
        while not exchange.done:  # the stream ended (or dropped) before the task did
            if not exchange.task_id:
                raise RuntimeError("the agent answered with neither a message nor a task")
            await self._resume(client, exchange)

    async def _resume(self, client: Client, exchange: _Exchange) -> None:
        if self._card is not None and self._card.capabilities.streaming:
            with contextlib.suppress(*STREAM_DROPPED):
                stream = client.subscribe(SubscribeToTaskRequest(id=exchange.task_id))
                async with contextlib.aclosing(stream):
                    async for event in stream:
                        exchange.take(event)
                        if exchange.done:
                            return
        task = await client.get_task(GetTaskRequest(id=exchange.task_id))
        exchange.take_task(task)
        if not exchange.done:
            await asyncio.sleep(self.poll_interval)

    async def _stop(
        self, talk: asyncio.Task[None], exchange: _Exchange, *, search: bool = True
    ) -> str:
        """End the conversation and cancel the participant's task, whatever point the call
        had reached; says what became of the task. Bounded: at most ``cancel_grace`` for the
        task id, then ``CANCEL_TIMEOUT`` per request. ``search``: look for an unnamed task
        by its context id."""
        client = exchange.client
        if not talk.done() and client is not None and not exchange.named.is_set():
            # The request may be on its way or its task starting: closing the connection
            # now would leave that task running under an id we never learn.
            log.info(WAITING_FOR_TASK, self.role, self.cancel_grace)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.cancel_grace):
                    await exchange.named.wait()
        talk.cancel()
        await asyncio.wait({talk})
        if not talk.cancelled():
            talk.exception()  # moot now; retrieved so it is not reported as lost
        if exchange.message_parts is not None or exchange.state in FINISHED:
            return "its task had ended"
        if client is None:
            return "no request had been sent"
        if exchange.task_id:
            what = await _cancel(client, exchange.task_id)
        elif search:
            what = await self._cancel_by_context(client, exchange)
        else:
            return "it had named no task"
        log.info("%s: %s", self.role, what)
        return what

    async def _cancel_by_context(self, client: Client, exchange: _Exchange) -> str:
        """Cancel the tasks of the message's context: for a participant (or a proxy that
        buffers its stream) that never named its task in time."""
        try:
            async with asyncio.timeout(CANCEL_TIMEOUT):
                found = await client.list_tasks(ListTasksRequest(context_id=exchange.context_id))
        except Exception as exc:
            log.warning("%s: listing tasks failed: %s", self.role, _describe(exc))
            found = None
        ids = [
            t.id
            for t in (found.tasks if found is not None else [])
            if t.context_id == exchange.context_id and t.status.state not in FINISHED
        ]
        if not ids:
            log.warning(
                "%s named no task within %g s and none was found by context id %s: "
                "a task it starts later runs on",
                self.role,
                self.cancel_grace,
                exchange.context_id,
            )
            return f"it named no task within {self.cancel_grace:g} s, so none was cancelled"
        return "; ".join([await _cancel(client, task_id) for task_id in ids])


async def _cancel(client: Client, task_id: str) -> str:
    try:
        async with asyncio.timeout(CANCEL_TIMEOUT):
            task = await client.cancel_task(CancelTaskRequest(id=task_id))
    except Exception as exc:  # already over, unreachable, or refusing
        return f"cancelling its task {task_id} failed: {_describe(exc)}"
    state = TaskState.Name(task.status.state).removeprefix("TASK_STATE_").lower()
    return f"its task {task_id} was cancelled (now {state})"


async def _to_the_end(cleanup: Coroutine[Any, Any, T]) -> T:
    """Run ``cleanup`` to completion even if the caller is cancelled again meanwhile (it is
    bounded); a cancellation that arrived is raised afterwards."""
    task = asyncio.create_task(cleanup)
    interrupted = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            interrupted = True
    if interrupted:
        raise asyncio.CancelledError
    return task.result()


def _where(exchange: _Exchange, patch: str | None) -> str:
    """Which part of the reply held ``patch``: "artifact: ", "message: ", "status message: "."""
    if patch is None:
        return ""
    places = [("artifact", p) for p in exchange.artifacts.values()]
    places += [("message", exchange.message_parts or []), ("status message", exchange.status_parts)]
    for name, parts in places:
        if extract_patch(reply_parts(parts)).patch == patch:
            return f"{name}: "
    return ""


def card_facts(card: AgentCard | None) -> CardFacts | None:
    if card is None:
        return None
    extensions = [
        (ext.uri, MessageToDict(ext.params) if ext.HasField("params") else {})
        for ext in card.capabilities.extensions
    ]
    return CardFacts(extensions, list(card.default_input_modes))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code} from {exc.request.url}"
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text[:400]}"


# What a caller that sends one message and polls can serve (not AgentSWE's turns).
POLLED_DIALECTS = ("standard", "json", "xml")


class PolledParticipant:
    """The participant protocol split in steps, for callers that cannot hold a stream open
    (a Lambda runs for minutes; a participant may take half an hour): send the task and
    return at once, then ask again until it is done, or cancel it at the deadline."""

    def __init__(self, url: str, http: httpx.AsyncClient) -> None:
        self.url = url
        self.http = http

    async def _client(self) -> Client:
        card = await A2ACardResolver(self.http, self.url).get_agent_card()
        config = ClientConfig(httpx_client=self.http, streaming=False, polling=True)
        return ClientFactory(config).create(card)

    async def send(
        self, instance: Instance, url_template: str, dialect: str = AUTO
    ) -> tuple[str | None, _Exchange]:
        """Start the work; returns the remote task id (None if the reply was final) and
        what was said so far."""
        card = await A2ACardResolver(self.http, self.url).get_agent_card()
        config = ClientConfig(httpx_client=self.http, streaming=False, polling=True)
        client = ClientFactory(config).create(card)
        chosen, chosen_by = choose(dialect, card_facts(card), POLLED_DIALECTS)
        data = task_data(instance, url_template)
        rendered = render(chosen, data, task_text(data))
        message = user_message(rendered.text, rendered.data, uuid.uuid4().hex)
        exchange = _Exchange()
        exchange.conversation.update(dialect=chosen, dialect_chosen_by=chosen_by)
        async for event in client.send_message(SendMessageRequest(message=message)):
            exchange.take(event)
        return (None if exchange.done else exchange.task_id), exchange

    async def poll(self, task_id: str) -> _Exchange:
        client = await self._client()
        exchange = _Exchange(task_id=task_id)
        exchange.take_task(await client.get_task(GetTaskRequest(id=task_id)))
        return exchange

    async def cancel(self, task_id: str) -> None:
        client = await self._client()
        with contextlib.suppress(Exception):
            await client.cancel_task(CancelTaskRequest(id=task_id))


def outcome_of(exchange: _Exchange, role: str) -> tuple[str | None, str | None, str]:
    """(patch, failure reason, detail) of a finished exchange, as ``get_patch`` decides them."""
    extraction = extract_patch(reply_parts(exchange.reply()))
    exchange.conversation["reply"] = f"{_where(exchange, extraction.patch)}{extraction.source}"
    if extraction.patch is not None:
        return extraction.patch, None, f"patch from {extraction.source}"
    if exchange.state in FAILED:
        state = TaskState.Name(exchange.state).removeprefix("TASK_STATE_").lower()
        return (
            None,
            Reason.PARTICIPANT_ERROR,
            f"{role}'s task ended {state}: {text_of(exchange.status_parts)[:500]}",
        )
    return None, Reason.NO_PATCH, f"{role}'s reply held no diff"
