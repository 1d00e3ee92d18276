"""Finding the patch in a participant's reply.

A reply is a list of parts (text, data, file bytes) from the final task's artifacts, its
status message, or a plain message. The patch is taken, in order, from data parts
(``patch``, ``model_patch``, ``diff``), diff files, then text: a fenced ```diff block,
``<patch>...</patch>``, or a bare diff. If nothing looks like a diff the reply has no
patch: the green agent never writes or repairs a patch for a participant.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from swegreen.patches import inspect_patch

DATA_KEYS = ("patch", "model_patch", "diff")
DIFF_SUFFIXES = (".diff", ".patch")
DIFF_MEDIA_TYPES = ("text/x-diff", "text/x-patch", "text/diff", "application/x-patch")
_FENCE = re.compile(r"```[ \t]*(?:diff|patch|udiff)?[ \t]*\n(.*?)```", re.S)
_PATCH_TAG = re.compile(r"<patch>\s*\n?(.*?)</patch>", re.S)
_DIFF_START = re.compile(r"^(diff --git |--- (?:a/|/dev/null))", re.M)


@dataclass(frozen=True)
class ReplyPart:
    """A transport-neutral part: exactly one of ``text``, ``data``, ``raw`` is set."""

    text: str | None = None
    data: Any = None
    raw: bytes | None = None
    filename: str = ""
    media_type: str = ""


@dataclass(frozen=True)
class Extraction:
    patch: str | None
    source: str  # where it came from, for the row's detail


def extract_patch(parts: Iterable[ReplyPart]) -> Extraction:
    parts = list(parts)
    for part in parts:
        if isinstance(part.data, Mapping):
            for key in DATA_KEYS:
                value = part.data.get(key)
                if isinstance(value, str):
                    return Extraction(value, f"data part '{key}'")
    for part in parts:
        if part.raw is not None and (
            part.filename.endswith(DIFF_SUFFIXES) or part.media_type in DIFF_MEDIA_TYPES
        ):
            return Extraction(
                part.raw.decode("utf-8", "surrogateescape"), f"file {part.filename or '(diff)'}"
            )
        if part.text is not None and (
            part.filename.endswith(DIFF_SUFFIXES) or part.media_type in DIFF_MEDIA_TYPES
        ):
            return Extraction(part.text, f"file {part.filename or '(diff)'}")
    for part in parts:
        if part.text:
            found = diff_in_text(part.text)
            if found is not None:
                return Extraction(found[0], found[1])
    return Extraction(None, "no diff in the reply")


def diff_in_text(text: str) -> tuple[str, str] | None:
    """A diff inside prose: fenced, tagged, or bare. Only text that parses as one counts."""
    for match in _FENCE.finditer(text):
        body = match.group(1)
        if _looks_like_diff(body):
            return _with_newline(body), "fenced diff block"
    for match in _PATCH_TAG.finditer(text):
        if _looks_like_diff(match.group(1)):
            return _with_newline(match.group(1)), "<patch> tag"
    start = _DIFF_START.search(text)
    if start and _looks_like_diff(text[start.start() :]):
        return _with_newline(text[start.start() :]), "bare diff"
    return None


def _looks_like_diff(text: str) -> bool:
    return bool(_DIFF_START.search(text)) and bool(inspect_patch(text).files)


def _with_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"
