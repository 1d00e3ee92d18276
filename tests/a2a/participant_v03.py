"""A mini-swe-agent wrapper's A2A contract, served with a2a-sdk 0.3 (as those wrappers are).

Run with an interpreter that has a2a-sdk[http-server] 0.3.x and uvicorn:
    python participant_v03.py <port> <gold.json>
It reads only the text parts of a message and parses them as one JSON object; without
``instance_id``, ``problem_statement`` or ``docker_image`` (named as SWE-bench names its
images) the task fails with the reason. Otherwise it replies with the raw diff (the
instance's patch in ``gold.json``) as the completed task's status message.
"""

import json
import sys

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.apps import A2AStarletteApplication
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, TextPart
from a2a.utils import new_agent_text_message, new_task

IMAGE = "docker.io/swebench/sweb.eval.x86_64.{}:latest"


class MiniSwe(AgentExecutor):
    def __init__(self, gold):
        self.gold = gold

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task or new_task(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        texts = [p.root.text for p in context.message.parts if isinstance(p.root, TextPart)]
        try:
            payload = json.loads("".join(texts))
            for key in ("instance_id", "problem_statement", "docker_image"):
                if not payload.get(key):
                    raise ValueError(f"missing {key}")
            iid = payload["instance_id"]
            wanted = IMAGE.format(iid.replace("__", "_1776_").lower())
            if payload["docker_image"] != wanted:
                raise ValueError(f"image {payload['docker_image']} is not {wanted}")
            diff = self.gold[iid]
        except (ValueError, KeyError) as exc:
            said = new_agent_text_message(f"bad task: {exc}", task.context_id, task.id)
            await updater.failed(said)
            return
        await updater.complete(new_agent_text_message(diff, task.context_id, task.id))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


def main() -> None:
    port, gold_path = int(sys.argv[1]), sys.argv[2]
    with open(gold_path) as fh:
        gold = json.load(fh)
    url = f"http://127.0.0.1:{port}/"
    card = AgentCard(
        name="mini-swe-agent (double)",
        description="mini-swe-agent wrapped in A2A, as its public wrappers are",
        url=url,
        version="0.1.0",
        default_input_modes=["text"],
        default_output_modes=["text"],
        capabilities=AgentCapabilities(streaming=True),
        skills=[AgentSkill(id="swe", name="swe", description="fixes issues", tags=["swe"])],
    )
    handler = DefaultRequestHandler(agent_executor=MiniSwe(gold), task_store=InMemoryTaskStore())
    app = A2AStarletteApplication(agent_card=card, http_handler=handler).build()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
