"""An assessment driven the way AgentBeats' v1 runner does it, with a2a-sdk 0.3.

Run with an interpreter that has a2a-sdk 0.3.x (not this project's 1.x):
    python client_v03.py <green agent url> '<request json>'
Prints one JSON object: the final state, every status text, and the results the runner
would write (data parts, and text parts that parse as JSON, of the completed task's artifacts).
"""

import asyncio
import contextlib
import json
import sys
from uuid import uuid4

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    DataPart,
    Message,
    Part,
    Role,
    TaskStatusUpdateEvent,
    TextPart,
)


def results_of(parts):
    out = []
    for part in parts:
        if isinstance(part.root, TextPart):
            with contextlib.suppress(ValueError):
                out.append(json.loads(part.root.text))
        elif isinstance(part.root, DataPart):
            out.append(part.root.data)
    return out


async def main(url: str, request: str) -> None:
    statuses, artifacts, final = [], [], None
    async with httpx.AsyncClient(timeout=300) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
        message = Message(
            kind="message",
            role=Role.user,
            message_id=uuid4().hex,
            parts=[Part(TextPart(kind="text", text=request))],
        )
        async for event in client.send_message(message):
            if isinstance(event, Message):
                statuses.append(
                    " ".join(p.root.text for p in event.parts if isinstance(p.root, TextPart))
                )
                continue
            task, update = event
            if isinstance(update, TaskStatusUpdateEvent) and update.status.message:
                statuses.append(
                    " ".join(
                        p.root.text
                        for p in update.status.message.parts
                        if isinstance(p.root, TextPart)
                    )
                )
            final = task.status.state.value
            if final == "completed":
                artifacts = task.artifacts or []
    results = [r for a in artifacts for r in results_of(a.parts)]
    print(json.dumps({"state": final, "statuses": statuses, "results": results}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
