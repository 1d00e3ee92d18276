"""Participants people already run, served with a2a-sdk 0.3 (as their public wrappers are).

Run with an interpreter that has a2a-sdk[http-server] 0.3.x and uvicorn:
    python participant_v03.py <port> <contract> <gold.json> <workdir>
``contract`` is one of contracts.py's (mini, purple, tagged, agentswe, pro, and
agentswe_waiting, whose command turns end input-required): the same
contracts the a2a-sdk 1.x doubles speak. The card is text in, text out, and says nothing
of dialects, as the public ones do; ``--skill-tag task-dialect:xml`` adds a dialect tag to
its skill (docs/agentbeats.md).
"""

import asyncio
import json
import sys
from pathlib import Path

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.apps import A2AStarletteApplication
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, Part, TaskState, TextPart
from a2a.utils import new_agent_text_message, new_task

sys.path.insert(0, str(Path(__file__).resolve().parent))
from contracts import CONTRACTS_V03, Contract


class Served(AgentExecutor):
    def __init__(self, contract: Contract) -> None:
        self.contract = contract

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task or new_task(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        texts = [p.root.text for p in context.message.parts if isinstance(p.root, TextPart)]
        reply = await asyncio.to_thread(self.contract.answer, task.context_id, texts)
        if reply.how == "input_required":
            await updater.update_status(TaskState.input_required)
            await updater.add_artifact([Part(root=TextPart(text=reply.text))], name=reply.name)
            return
        if reply.how != "artifact":
            message = new_agent_text_message(reply.text, task.context_id, task.id)
            if reply.how == "failed":
                print(f"bad task: {reply.text}", file=sys.stderr, flush=True)
                await updater.failed(message)
            else:
                await updater.complete(message)
            return
        await updater.add_artifact([Part(root=TextPart(text=reply.text))], name=reply.name)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


def main() -> None:
    port, name, gold_path, workdir = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    tags = sys.argv[6:] if sys.argv[5:6] == ["--skill-tag"] else []
    with open(gold_path) as fh:
        gold = json.load(fh)
    contract = CONTRACTS_V03[name](gold, Path(workdir))
    url = f"http://127.0.0.1:{port}/"
    skill = AgentSkill(
        id="swe",
        name="swe",
        description="fixes issues",
        tags=["swe-bench", *tags],
    )
    card = AgentCard(
        name=f"{name} (double, a2a-sdk 0.3)",
        description="a participant written elsewhere, as its public wrappers serve it",
        url=url,
        version="0.1.0",
        default_input_modes=["text"],
        default_output_modes=["text"],
        capabilities=AgentCapabilities(streaming=True),
        skills=[skill],
    )
    handler = DefaultRequestHandler(agent_executor=Served(contract), task_store=InMemoryTaskStore())
    app = A2AStarletteApplication(agent_card=card, http_handler=handler).build()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
