"""A participant reached by polling (the AWS pipeline's Dispatch and Watch): the task sent,
then asked after until it ends; no connection held between polls."""

from __future__ import annotations

import contextlib
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    SendMessageRequest,
)

from swegreen.a2a.exchange import _Exchange, card_facts
from swegreen.a2a.parts import user_message
from swegreen.core.dataset import Instance
from swegreen.core.task_dialects import AUTO, choose, render
from swegreen.core.task_message import task_data, task_text

# What a caller that sends one message and polls can serve (not AgentSWE's turns).
POLLED_DIALECTS = ("universal", "standard", "json", "xml")


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
