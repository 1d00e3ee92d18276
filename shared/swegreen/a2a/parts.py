"""Converting between a2a-sdk's protobuf parts and the engine's plain data."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from a2a.helpers import new_data_part, new_text_part
from a2a.types import Message, Part, Role
from google.protobuf.json_format import MessageToDict

from swegreen.core.patch_extraction import ReplyPart


def reply_parts(parts: Iterable[Part]) -> list[ReplyPart]:
    out = []
    for part in parts:
        kind = part.WhichOneof("content")
        meta = {"filename": part.filename, "media_type": part.media_type}
        if kind == "text":
            out.append(ReplyPart(text=part.text, **meta))
        elif kind == "data":
            out.append(ReplyPart(data=MessageToDict(part.data), **meta))
        elif kind == "raw":
            out.append(ReplyPart(raw=part.raw, **meta))
    return out


def text_of(parts: Iterable[Part]) -> str:
    return "\n".join(p.text for p in parts if p.WhichOneof("content") == "text")


def data_of(parts: Iterable[Part]) -> list[Any]:
    return [MessageToDict(p.data) for p in parts if p.WhichOneof("content") == "data"]


def user_message(
    text: str, data: dict[str, Any] | None, message_id: str, context_id: str = ""
) -> Message:
    parts = [new_text_part(text)]
    if data is not None:
        parts.append(new_data_part(data))
    return Message(role=Role.ROLE_USER, message_id=message_id, context_id=context_id, parts=parts)
