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
names nothing in time is looked up by the context id the client chose for the message."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Coroutine
from typing import Any

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.client.errors import A2AClientTimeoutError
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)

from swegreen.a2a.exchange import (
    FINISHED,
    T,
    _describe,
    _Exchange,
    card_facts,
    outcome_of,
)
from swegreen.a2a.parts import reply_parts, text_of, user_message
from swegreen.a2a.session import (
    _Session,
)
from swegreen.core import agentswe
from swegreen.core.classify import Reason
from swegreen.core.dataset import Instance
from swegreen.core.errors import EvaluationFailure, ProtocolUnavailable
from swegreen.core.interaction import (
    Budget,
    BudgetExhausted,
    CommandRequest,
    Meter,
    parse_command,
)
from swegreen.core.ports import PatchResult, Workbenches
from swegreen.core.task_dialects import AUTO, choose, docker_image, render
from swegreen.core.task_message import task_data, task_text

POLL_INTERVAL = 5.0


# Turn ends after which AgentSWE's agents wait for the command's output.
WAITING = {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_INPUT_REQUIRED}


CANCEL_GRACE = 10.0  # seconds a cancelled call still waits for the participant to name its task


CANCEL_TIMEOUT = 10.0  # seconds for the cancel request itself


# Logged when a cancelled call waits for the task id (tests wait on it).
WAITING_FOR_TASK = "%s: cancelled before its task was named; waiting up to %g s for it"


# A stream that dies mid-way: the task goes on remotely, so re-attach instead of failing.
STREAM_DROPPED = (httpx.ReadTimeout, httpx.RemoteProtocolError, A2AClientTimeoutError)


log = logging.getLogger("swegreen.agent.participant")


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
        image_source: str = "official",
    ) -> None:
        """With ``workbenches`` and ``budget`` the interactive mode is offered (where the
        workbenches can isolate commands). ``dialect``: the task message's shape, or
        ``auto`` for what the participant's card declares (task_dialects.py).
        ``image_source``: where the instance image the message names comes from (the
        Docker backend's ``docker_images``, so that participant and grader share it)."""
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
        self.image_source = image_source
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
                    session.deadline = deadline
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
            if session is None:
                raise self._no_workbench()
            await self._agentswe(client, data, exchange, session)
            return
        if dialect == "universal" and session is not None:
            # The message names the AgentSWE workbench for whoever speaks that protocol.
            bench = await session.open()
            data = {**data, "cwd": str(bench.workdir), "python_version": bench.python_version}
        image = docker_image(data["instance_id"], self.image_source)
        rendered = render(dialect, data, task_text(data), image)
        message = user_message(rendered.text, rendered.data, uuid.uuid4().hex, exchange.context_id)
        while True:
            await self._converse(client, message, exchange)
            if dialect == "universal" and _agentswe_action(exchange)[0] in ("bash", "debug"):
                # it answered the task in the AgentSWE protocol: its turns from here on
                if session is None:
                    raise self._no_workbench()
                exchange.conversation["protocol"] = "agentswe"
                await self._agentswe_turns(client, exchange, session, data["cwd"])
                return
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

    def _no_workbench(self) -> ProtocolUnavailable:
        return ProtocolUnavailable(
            f"{self.role} speaks the AgentSWE protocol, whose commands run in the "
            "interactive mode's workbench: it needs interactive = true and isolation = bwrap, "
            "which cannot start where every capability is dropped (on AgentBeats: "
            "docs/agentbeats-platform.md, 'Isolation under Amber')"
        )

    async def _agentswe(
        self, client: Client, data: dict[str, Any], exchange: _Exchange, session: _Session
    ) -> None:
        """The AgentSWE protocol (agentswe.py): a task per turn in one context, ``bash`` and
        ``debug`` commands run in the workbench with their writes thrown away, until a
        ``patch`` (or a turn that asks for nothing) ends it."""
        bench = await session.open()
        cwd = str(bench.workdir)
        facts = {**data, "cwd": cwd, "python_version": session.python_version}
        message = user_message(
            render("agentswe", facts, "").text, None, uuid.uuid4().hex, exchange.context_id
        )
        await self._converse(client, message, exchange)
        await self._agentswe_turns(client, exchange, session, cwd)

    async def _agentswe_turns(
        self, client: Client, exchange: _Exchange, session: _Session, cwd: str
    ) -> None:
        """Answers the turn just read, and the next, while they ask for commands. A turn
        ends completed (AgentSWE's own agents) or input-required (some public ones); each
        answer starts a new task of the same context, as the protocol has it."""
        while True:
            if exchange.state not in WAITING:
                return  # failed, or a plain message: outcome_of says what it was
            action, content = _agentswe_action(exchange)
            exchange.conversation["turns"] = exchange.conversation.get("turns", 0) + 1
            if action not in ("bash", "debug"):
                return  # a patch, or nothing asked: the reply is the answer
            outcome = await session.run(CommandRequest(content), discard=True)
            answer = agentswe.result(
                action, cwd, outcome.output, outcome.exit_code, outcome.steps_left
            )
            message = user_message(json.dumps(answer), None, uuid.uuid4().hex, exchange.context_id)
            exchange.next_task()
            await self._converse(client, message, exchange)

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
                    if exchange.done and exchange.state != TaskState.TASK_STATE_INPUT_REQUIRED:
                        return
                    # input-required ends the turn, but what it asks may follow it (an
                    # artifact after the status): read on until the stream ends
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


def _agentswe_action(exchange: _Exchange) -> tuple[str | None, str]:
    """What a finished turn asks for, read as AgentSWE reads it (agentswe.turn)."""
    if exchange.state not in WAITING:
        return None, ""
    named = [
        (exchange.artifact_names.get(key, ""), text_of(parts))
        for key, parts in exchange.artifacts.items()
    ]
    return agentswe.turn(named, text_of(exchange.status_parts))


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
