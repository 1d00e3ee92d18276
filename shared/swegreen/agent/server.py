"""Serving an A2A agent: the card (for 1.0 and 0.3 clients) and the JSON-RPC endpoint.

AgentBeats' runners speak A2A 0.3; a2a-sdk 1.x serves them only if the routes enable the
v0.3 compatibility layer *and* the card lists an interface with protocol_version 0.3.
Both are always on here. Runners call the URL the card advertises (``--card-url``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable

from a2a.helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    ListTasksRequest,
    ListTasksResponse,
    Task,
)
from starlette.applications import Starlette

from swegreen import __version__

JSONRPC = "JSONRPC"


def agent_card(name: str, description: str, url: str, skills: list[AgentSkill]) -> AgentCard:
    return AgentCard(
        name=name,
        description=description,
        version=__version__,
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding=JSONRPC, protocol_version="1.0"),
            AgentInterface(url=url, protocol_binding=JSONRPC, protocol_version="0.3"),
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=skills,
    )


async def open_task(context: RequestContext, event_queue: EventQueue) -> tuple[Task, TaskUpdater]:
    """The request's task, enqueued first when it is new (the SDK requires that before any
    status update), and an updater for it."""
    task = context.current_task
    if task is None:
        assert context.message is not None
        task = new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
    return task, TaskUpdater(event_queue, task.id, task.context_id)


class DeferredExecutor(AgentExecutor):
    """An executor made in a thread beside the server, so that the card answers at once:
    the engine's imports take seconds, and AgentBeats' gateway gives every card 30 s (the
    aim is under 5). A request that comes first waits for it; a failure to make it fails
    that request's task."""

    def __init__(self, make: Callable[[], AgentExecutor]) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="executor")
        self._made = self._pool.submit(make)
        self._pool.shutdown(wait=False)

    async def _executor(self) -> AgentExecutor:
        return await asyncio.wrap_future(self._made)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        await (await self._executor()).execute(context, event_queue)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await (await self._executor()).cancel(context, event_queue)


class PrivateTasksHandler(DefaultRequestHandler):
    """A2A's handler, with a task listing that shows a caller only the tasks of a context
    it names. The server knows no caller's identity (AgentBeats' gateway sends none), so
    an unfiltered listing would show anyone who reaches the port every assessment's task
    and history: another participant's, or a sandboxed test's (Landlock mode lets loopback
    TCP through). A context id is the random one its caller chose, so naming it proves
    the caller started the task (the green agent's client finds a participant's task that
    way when its stream was held back)."""

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        if not params.context_id:
            return ListTasksResponse(page_size=params.page_size)
        return await super().on_list_tasks(params, context)


def build_app(executor: AgentExecutor, card: AgentCard) -> Starlette:
    handler = PrivateTasksHandler(
        agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(
        handler, rpc_url="/", enable_v0_3_compat=True
    )

    return Starlette(routes=routes)


def green_card(url: str) -> AgentCard:
    return agent_card(
        "SWE-bench Verified green agent",
        "Evaluates coding agents on real GitHub issues from SWE-bench Verified: sends each "
        "participant an issue, applies the diff it returns, runs the instance's tests in a "
        "sandbox and grades them with the official swebench grader.",
        url,
        [
            AgentSkill(
                id="swe-bench-verified",
                name="SWE-bench Verified assessment",
                description='Request: {"participants": {"agent": "<a2a url>"}, "config": '
                '{"max_rows": 3, "max_concurrent_rows": 1, ...}}',
                tags=["swe-bench", "coding", "evaluation", "green-agent"],
            ),
            AgentSkill(
                id="swe-bench-shell",
                name="Interactive mode for participants",
                description="Participants may run shell commands in their own sandboxed copy "
                "of the instance's prepared workspace (repository at the base commit, "
                "environment installed, hidden tests absent) before answering with a patch: "
                'end a turn input-required with a data part {"command": "..."}; each reply '
                'carries {"command_result": {...}}. Offered in the task message (data key '
                '"interactive", protocol swegreen-shell/1) with its budgets; see '
                "docs/interactive.md.",
                tags=["swe-bench", "interactive", "shell"],
            ),
        ],
    )


def serve(app: Starlette, host: str, port: int) -> None:
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=10)
