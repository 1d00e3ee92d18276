"""The green agent's A2A executor: request in, progress out, one artifact, ``completed``.

Rows are evaluated here (``Assessment``) or by the AWS pipeline (``RemoteAssessment``, the
``aws`` backend); the A2A side is the same.

The task is enqueued before anything else (the SDK requires it), a bad request is
``rejected`` with a message saying what to fix, progress is a ``working`` update at every
row start and verdict and at least every ``heartbeat`` seconds (AgentBeats' clients and
proxies time out after 300 s of silence), and the task always ends ``completed`` with one
artifact: a text summary and a data part per participant holding the result row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from a2a.helpers import new_data_part, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Task, TaskState

from swegreen.agent.assessment import AgentSettings, Assessment, AssessmentFailed
from swegreen.agent.remote import RemoteAssessment
from swegreen.agent.request import RequestError, parse_request
from swegreen.agent.server import open_task

log = logging.getLogger("swegreen.agent")


class GreenAgentExecutor(AgentExecutor):
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task, updater = await open_task(context, event_queue)

        async def say(text: str, state: int = TaskState.TASK_STATE_WORKING) -> None:
            await updater.update_status(state, updater.new_agent_message([new_text_part(text)]))

        try:
            request, config = parse_request(context.get_user_input(), self.settings.defaults)
            assessment: Assessment | RemoteAssessment
            if self.settings.front_door is not None:
                assessment = RemoteAssessment(self.settings, request, say, config)
            else:
                assessment = Assessment(self.settings, request, config, _run_prefix(task), say)
            await say(await assessment.prepare())
        except RequestError as exc:
            await say(f"rejected: {exc}", TaskState.TASK_STATE_REJECTED)
            return

        heartbeat = asyncio.create_task(self._heartbeat(assessment, say))
        try:
            outcome = await assessment.run()
        except AssessmentFailed as exc:
            await say(f"failed: {exc}", TaskState.TASK_STATE_FAILED)
            return
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
        parts = [new_text_part(outcome.summary)] + [new_data_part(row) for row in outcome.rows]
        await updater.add_artifact(parts, name="swe-bench-verified-results")
        await updater.complete(updater.new_agent_message([new_text_part(outcome.summary)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        # execute() has been cancelled by now: its rows' sandboxes and participant calls
        # were cancelled with it. Record the end.
        if context.task_id and context.context_id:
            updater = TaskUpdater(event_queue, context.task_id, context.context_id)
            with contextlib.suppress(RuntimeError):
                await updater.cancel()

    async def _heartbeat(self, assessment: Assessment | RemoteAssessment, say) -> None:  # type: ignore[no-untyped-def]
        while True:
            await asyncio.sleep(self.settings.heartbeat)
            await say(f"still working: {assessment.status_line()}")


def _run_prefix(task: Task) -> str:
    """Run ids are named by the A2A task, so assessments never share rows."""
    return f"a2a-{task.id}"
