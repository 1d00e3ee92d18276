"""Asking a participant agent for a patch over A2A: a ``PatchSource``.

One message per instance (the issue as text plus the same facts as data), streamed with a
per-instance deadline. If the stream drops before the task ends, the client re-subscribes
(or polls when the agent does not stream); at the deadline it cancels the remote task.
Whatever goes wrong (connection refused, HTTP error, A2A error, timeout, a reply with no
diff) becomes that row's reason; it never stops other rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.client.errors import A2AClientTimeoutError
from a2a.types import (
    AgentCard,
    Artifact,
    CancelTaskRequest,
    GetTaskRequest,
    Part,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

from swegreen.agent.parts import reply_parts, text_of, user_message
from swegreen.classify import Reason
from swegreen.dataset import Instance
from swegreen.patch_extraction import extract_patch
from swegreen.ports import PatchResult
from swegreen.task_message import task_data, task_text

TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
    TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_AUTH_REQUIRED,
}
FAILED = {TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED}
POLL_INTERVAL = 5.0
# A stream that dies mid-way: the task goes on remotely, so re-attach instead of failing.
STREAM_DROPPED = (httpx.ReadTimeout, httpx.RemoteProtocolError, A2AClientTimeoutError)


@dataclass
class _Exchange:
    """What the participant has said so far about one instance."""

    task_id: str = ""
    state: int = TaskState.TASK_STATE_UNSPECIFIED
    artifacts: dict[str, list[Part]] = field(default_factory=dict)
    status_parts: list[Part] = field(default_factory=list)
    message_parts: list[Part] | None = None
    usage: dict[str, Any] | None = None

    @property
    def done(self) -> bool:
        return self.message_parts is not None or self.state in TERMINAL

    def take_task(self, task: Task) -> None:
        self.task_id = task.id or self.task_id
        self.state = task.status.state
        if task.status.HasField("message"):
            self.status_parts = list(task.status.message.parts)
        for artifact in task.artifacts:
            self.take_artifact(artifact, append=False)
        self._usage(task.metadata)

    def take_artifact(self, artifact: Artifact, append: bool) -> None:
        key = artifact.artifact_id or str(len(self.artifacts))
        parts = self.artifacts.setdefault(key, []) if append else []
        parts.extend(artifact.parts)
        self.artifacts[key] = parts
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
            self.state = update.status.state
            if update.status.HasField("message"):
                self.status_parts = list(update.status.message.parts)
        elif kind == "artifact_update":
            self.take_artifact(event.artifact_update.artifact, event.artifact_update.append)

    def reply(self) -> list[Part]:
        parts = [p for chunk in self.artifacts.values() for p in chunk]
        return parts + (self.message_parts or []) + self.status_parts

    def _usage(self, metadata: Any) -> None:
        if metadata is not None and "usage" in metadata:
            self.usage = MessageToDict(metadata).get("usage")


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
    ) -> None:
        self.role = role
        self.url = url
        self.timeout = timeout
        self.url_template = url_template
        self.http = http
        self.poll_interval = poll_interval
        self.name = f"a2a:{role}"
        self._client: Client | None = None
        self._card: AgentCard | None = None

    async def get_patch(self, instance: Instance) -> PatchResult:
        start = time.monotonic()
        data = task_data(instance, self.url_template)
        message = user_message(task_text(data), data, uuid.uuid4().hex)
        exchange = _Exchange()

        def result(patch: str | None, failure: str | None = None, detail: str = "") -> PatchResult:
            return PatchResult(
                patch,
                self.role,
                failure=failure,
                detail=detail,
                duration=time.monotonic() - start,
                usage=exchange.usage,
            )

        try:
            async with asyncio.timeout(self.timeout):
                client = await self._connect()
                await self._converse(client, message, exchange)
        except TimeoutError:
            await self._cancel_remote(exchange)
            return result(
                None,
                Reason.PARTICIPANT_TIMEOUT,
                f"{self.role} did not finish within {self.timeout:g} s; its task was cancelled",
            )
        except asyncio.CancelledError:
            await self._cancel_remote(exchange)
            raise
        except Exception as exc:  # refused, HTTP 5xx, A2A errors, garbage: this row only
            self._client = None  # reconnect for the next row
            return result(
                None, Reason.PARTICIPANT_ERROR, f"{self.role} at {self.url}: {_describe(exc)}"
            )
        patch, failure, detail = outcome_of(exchange, self.role)
        return result(patch, failure, detail)

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
        try:
            async for event in client.send_message(SendMessageRequest(message=message)):
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
                async for event in client.subscribe(SubscribeToTaskRequest(id=exchange.task_id)):
                    exchange.take(event)
                    if exchange.done:
                        return
        task = await client.get_task(GetTaskRequest(id=exchange.task_id))
        exchange.take_task(task)
        if not exchange.done:
            await asyncio.sleep(self.poll_interval)

    async def _cancel_remote(self, exchange: _Exchange) -> None:
        if not exchange.task_id or self._client is None or exchange.done:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(10):
                await asyncio.shield(
                    self._client.cancel_task(CancelTaskRequest(id=exchange.task_id))
                )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code} from {exc.request.url}"
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text[:400]}"


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

    async def send(self, instance: Instance, url_template: str) -> tuple[str | None, _Exchange]:
        """Start the work; returns the remote task id (None if the reply was final) and
        what was said so far."""
        data = task_data(instance, url_template)
        message = user_message(task_text(data), data, uuid.uuid4().hex)
        client = await self._client()
        exchange = _Exchange()
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
