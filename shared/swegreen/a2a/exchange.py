"""One exchange with a participant: the task, its turns and artifacts as they arrive,
and what it comes to (the patch and where it was found, or the participant's failure)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from a2a.client.client import Client
from a2a.types import (
    AgentCard,
    Artifact,
    Part,
    StreamResponse,
    Task,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

from swegreen.a2a.parts import reply_parts, text_of
from swegreen.core import reply_words
from swegreen.core.classify import Reason
from swegreen.core.patch_extraction import extract_patch
from swegreen.core.task_dialects import CardFacts, Skill

TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
    TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_AUTH_REQUIRED,
}


FAILED = {TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED}


# States after which the participant's task is over (input-required is over only for us).
FINISHED = FAILED | {TaskState.TASK_STATE_COMPLETED}


T = TypeVar("T")


@dataclass
class _Exchange:
    """One call for one instance: what the participant has said so far, and what it takes
    to cancel the call."""

    task_id: str = ""
    context_id: str = ""
    client: Client | None = None  # set once the request may have reached the participant
    # Set once the task id is known, the reply is complete, or the conversation is over.
    named: asyncio.Event = field(default_factory=asyncio.Event)
    state: int = TaskState.TASK_STATE_UNSPECIFIED
    artifacts: dict[str, list[Part]] = field(default_factory=dict)
    artifact_names: dict[str, str] = field(default_factory=dict)
    status_parts: list[Part] = field(default_factory=list)
    message_parts: list[Part] | None = None
    usage: dict[str, Any] | None = None
    # The task dialect and what chose it; where the patch was found (outcome_of).
    conversation: dict[str, Any] = field(default_factory=dict)
    # Input requests already answered (by their message id): a poll that still shows one
    # means the participant has not taken up our answer yet, not that it asks again.
    answered: set[str] = field(default_factory=set)
    _status_id: str = ""

    @property
    def done(self) -> bool:
        return self.message_parts is not None or self.state in TERMINAL

    def take_task(self, task: Task) -> None:
        self.task_id = task.id or self.task_id
        self._status(task.status)
        for artifact in task.artifacts:
            self.take_artifact(artifact, append=False)
        self._usage(task.metadata)
        self._check_named()

    def take_artifact(self, artifact: Artifact, append: bool) -> None:
        key = artifact.artifact_id or str(len(self.artifacts))
        parts = self.artifacts.setdefault(key, []) if append else []
        parts.extend(artifact.parts)
        self.artifacts[key] = parts
        self.artifact_names[key] = artifact.name or self.artifact_names.get(key, "")
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
            self._status(update.status)
        elif kind == "artifact_update":
            self.take_artifact(event.artifact_update.artifact, event.artifact_update.append)
        self._check_named()

    def _status(self, status: Any) -> None:
        message = status.message if status.HasField("message") else None
        if (
            status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            and message is not None
            and message.message_id in self.answered
        ):
            self.state = TaskState.TASK_STATE_WORKING
            return
        self.state = status.state
        if message is not None:
            self.status_parts = list(message.parts)
            self._status_id = message.message_id

    def turn(self) -> list[Part] | None:
        """What the participant said in a turn that waits for us (input-required, or a plain
        message without a patch): where the interactive mode looks for a command."""
        if self.message_parts is not None:
            if extract_patch(reply_parts(self.reply())).patch is not None:
                return None  # a final answer, whatever else it says
            return self.message_parts
        if self.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            return self.status_parts
        return None

    def next_turn(self) -> None:
        if self.state == TaskState.TASK_STATE_INPUT_REQUIRED and self._status_id:
            self.answered.add(self._status_id)
        self.state = TaskState.TASK_STATE_UNSPECIFIED
        self.status_parts = []
        self.message_parts = None

    def next_task(self) -> None:
        """The participant's task is over and the conversation goes on in a new task of
        the same context (the AgentSWE protocol): nothing of this one is kept."""
        self.next_turn()
        self.task_id = ""
        self.artifacts.clear()
        self.artifact_names.clear()

    def reply(self) -> list[Part]:
        parts = [p for chunk in self.artifacts.values() for p in chunk]
        return parts + (self.message_parts or []) + self.status_parts

    def _usage(self, metadata: Any) -> None:
        if metadata is not None and "usage" in metadata:
            self.usage = MessageToDict(metadata).get("usage")

    def _check_named(self) -> None:
        if self.task_id or self.done:
            self.named.set()


def _where(exchange: _Exchange, patch: str | None) -> str:
    """Which part of the reply held ``patch``: "artifact: ", "message: ", "status message: "."""
    if patch is None:
        return ""
    places = [("artifact", p) for p in exchange.artifacts.values()]
    places += [("message", exchange.message_parts or []), ("status message", exchange.status_parts)]
    for name, parts in places:
        if extract_patch(reply_parts(parts)).patch == patch:
            return f"{name}: "
    return ""


def _describe(exc: BaseException) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code} from {exc.request.url}"
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text[:400]}"


def outcome_of(exchange: _Exchange, role: str) -> tuple[str | None, str | None, str]:
    """(patch, failure reason, detail) of a finished exchange, as ``get_patch`` decides them.
    Without a patch, the detail holds the participant's own words; words saying it could
    not read the task make it ``participant_protocol``."""
    extraction = extract_patch(reply_parts(exchange.reply()))
    exchange.conversation["reply"] = f"{_where(exchange, extraction.patch)}{extraction.source}"
    if extraction.patch is not None:
        return extraction.patch, None, f"patch from {extraction.source}"
    artifacts = {key: text_of(parts) for key, parts in exchange.artifacts.items()}
    said = reply_words.words(
        *(
            f"{exchange.artifact_names.get(key) or 'artifact'}: {text}"
            for key, text in artifacts.items()
            if text.strip()
        ),
        text_of(exchange.message_parts or []),
        text_of(exchange.status_parts),
    )
    if reply_words.could_not_read_task(said):
        return None, Reason.PARTICIPANT_PROTOCOL, f"{role} could not read the task: {said}"
    if exchange.state in FAILED:
        state = TaskState.Name(exchange.state).removeprefix("TASK_STATE_").lower()
        return None, Reason.PARTICIPANT_ERROR, f"{role}'s task ended {state}: {said}"
    return None, Reason.NO_PATCH, f"{role}'s reply held no diff" + (f": {said}" if said else "")


def card_facts(card: AgentCard | None) -> CardFacts | None:
    if card is None:
        return None
    extensions = [
        (ext.uri, MessageToDict(ext.params) if ext.HasField("params") else {})
        for ext in card.capabilities.extensions
    ]
    skills = [Skill(list(s.tags), list(s.input_modes)) for s in card.skills]
    return CardFacts(extensions, list(card.default_input_modes), skills)
