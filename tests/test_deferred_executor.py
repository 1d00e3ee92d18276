"""The green agent's card answers before its engine is loaded: AgentBeats' gateway gives
every card 30 s, and the engine's imports take seconds (swegreen serve measured 16.8 s to
its card on a loaded 2-core machine before, under 3 s after: docs/agentbeats.md)."""

from __future__ import annotations

import asyncio
import threading

import httpx
from a2a.helpers import new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue

from swegreen.agent.server import DeferredExecutor, build_app, green_card, open_task
from tests.helpers import serving
from tests.test_agent import assess


class Echo(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        _task, updater = await open_task(context, event_queue)
        await updater.complete(updater.new_agent_message([new_text_part("made and running")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


def test_the_card_answers_while_the_executor_is_still_being_made() -> None:
    release = threading.Event()
    made: list[str] = []

    def make() -> AgentExecutor:
        assert release.wait(timeout=120), "never released"
        made.append(threading.current_thread().name)
        return Echo()

    async def scenario() -> tuple[int, str]:
        async with serving(lambda url: build_app(DeferredExecutor(make), green_card(url))) as url:
            async with httpx.AsyncClient() as http:
                card = await http.get(f"{url}.well-known/agent-card.json")
            assert not made  # the card did not wait for the executor
            # a request that comes first waits for it, then runs
            request = asyncio.create_task(assess(url, "{}"))
            await asyncio.sleep(0)
            release.set()
            outcome = await request
            return card.status_code, outcome.statuses[-1]

    status, said = asyncio.run(scenario())
    assert status == 200
    assert said == "made and running" and made and made[0].startswith("executor")


def test_an_executor_that_cannot_be_made_fails_the_request_not_the_card() -> None:
    def make() -> AgentExecutor:
        raise RuntimeError("the engine could not be imported")

    async def scenario() -> tuple[int, str]:
        async with serving(lambda url: build_app(DeferredExecutor(make), green_card(url))) as url:
            async with httpx.AsyncClient() as http:
                card = await http.get(f"{url}.well-known/agent-card.json")
            try:
                outcome = await assess(url, "{}")
                return card.status_code, outcome.state
            except Exception as exc:  # the SDK may surface it as an error response
                return card.status_code, f"error: {exc}"

    status, state = asyncio.run(scenario())
    assert status == 200
    # the SDK answers the request with the error (no task was made): it says what failed
    assert state == "error: the engine could not be imported", state
