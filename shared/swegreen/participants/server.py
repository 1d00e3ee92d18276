"""A participant server: an A2A executor around a solver (instance facts -> a reply).

A solver marked ``interactive`` also gets a ``Shell`` (None when the green agent did not
offer the mode): each ``run`` ends the participant's turn in input-required with the
command, and the green agent's next message in the task carries its result
(docs/interactive.md). The solver itself runs on as a background task across those turns.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from a2a.helpers import new_data_part, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import AgentSkill
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from swegreen.agent.server import agent_card, build_app, open_task


@dataclass
class Reply:
    """What a solver answers: a patch (None: no diff at all), prose, optional usage."""

    patch: str | None
    text: str = ""
    usage: dict[str, Any] = field(default_factory=dict)


Solver = Callable[..., Awaitable[Reply]]


class Shell:
    """The participant's end of the interactive mode."""

    def __init__(self, offer: dict[str, Any]) -> None:
        self.offer = offer
        self.outbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def run(self, command: str, timeout: float | None = None) -> dict[str, Any]:
        """The green agent's ``command_result`` for ``command`` (exit_code None: timed out)."""
        await self.outbox.put(("command", {"command": command, "timeout": timeout}))
        result = await self.inbox.get()
        code = result.get("exit_code")
        return {**result, "exit_code": None if code is None else int(code)}


@dataclass
class _Conversation:
    shell: Shell
    worker: asyncio.Task[None] | None = None


def task_facts(context: RequestContext) -> tuple[dict[str, Any], str]:
    """The instance facts (data part, or JSON text) and the prose of the request."""
    data: dict[str, Any] = {}
    texts = []
    message = context.message
    for part in message.parts if message else []:
        kind = part.WhichOneof("content")
        if kind == "data":
            value = MessageToDict(part.data)
            if isinstance(value, dict):
                data.update(value)
        elif kind == "text":
            texts.append(part.text)
    if not data:
        for text in texts:
            try:
                value = json.loads(text)
            except ValueError:
                continue
            if isinstance(value, dict):
                data.update(value)
    return data, "\n".join(texts)


class SolverExecutor(AgentExecutor):
    def __init__(self, solver: Solver) -> None:
        self.solver = solver
        self.conversations: dict[str, _Conversation] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task, updater = await open_task(context, event_queue)
        await updater.start_work(updater.new_agent_message([new_text_part("working on it")]))
        data, text = task_facts(context)
        talk = self.conversations.get(task.id)
        if talk is None:
            offer = data.get("interactive")
            talk = _Conversation(Shell(offer if isinstance(offer, dict) else {}))
            shell = talk.shell if offer and getattr(self.solver, "interactive", False) else None
            talk.worker = asyncio.create_task(self._solve(talk.shell, data, text, shell))
            self.conversations[task.id] = talk
        else:
            result = data.get("command_result")
            talk.shell.inbox.put_nowait(result if isinstance(result, dict) else {"output": text})
        kind, value = await talk.shell.outbox.get()
        if kind == "command":
            said = [new_text_part(f"```bash\n{value['command']}\n```"), new_data_part(value)]
            await updater.requires_input(updater.new_agent_message(said))
            return
        self.conversations.pop(task.id, None)
        if kind == "error":
            raise value
        reply: Reply = value
        parts = [new_text_part(reply.text or "done")]
        if reply.patch is not None:
            parts.append(new_data_part({"patch": reply.patch}))
        metadata = {"usage": reply.usage} if reply.usage else None
        await updater.add_artifact(parts, name="patch", metadata=metadata)
        await updater.complete()

    async def _solve(
        self, channel: Shell, data: dict[str, Any], text: str, shell: Shell | None
    ) -> None:
        """The solver, run across turns; its commands and its end reach ``execute``
        through ``channel``'s outbox (``shell`` is what the solver gets: None when the mode
        was not offered or the solver does not use it)."""
        try:
            if getattr(self.solver, "interactive", False):
                reply = await self.solver(data, text, shell)
            else:
                reply = await self.solver(data, text)
        except Exception as exc:  # the task ends failed, with the reason
            await channel.outbox.put(("error", exc))
        else:
            await channel.outbox.put(("reply", reply))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        talk = self.conversations.pop(context.task_id or "", None)
        if talk is not None and talk.worker is not None:
            talk.worker.cancel()
        if context.task_id and context.context_id:
            updater = TaskUpdater(event_queue, context.task_id, context.context_id)
            await updater.cancel()


def participant_app(name: str, solver: Solver, url: str) -> Starlette:
    card = agent_card(
        name,
        f"{name} participant for SWE-bench Verified",
        url,
        [
            AgentSkill(
                id="fix-issue",
                name="Fix a GitHub issue",
                description="Returns a unified diff that fixes the issue.",
                tags=["swe-bench"],
            )
        ],
    )
    return build_app(SolverExecutor(solver), card)


def failing_app(url: str, status: int = 500) -> Starlette:
    """A participant whose card is fine but whose every call fails with ``status``."""
    card = agent_card("broken", "always fails", url, [])
    from a2a.server.request_handlers.response_helpers import agent_card_to_dict

    async def card_route(_request: Request) -> Response:
        return JSONResponse(agent_card_to_dict(card))

    async def fail(_request: Request) -> Response:
        return Response("internal error", status_code=status)

    return Starlette(
        routes=[
            Route("/.well-known/agent-card.json", card_route),
            Route("/", fail, methods=["POST"]),
        ]
    )
