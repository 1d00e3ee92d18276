"""Finding the patch in a participant's reply.

A reply is a list of parts (text, data, file bytes) from the final task's artifacts, its
status message, or a plain message. The patch is taken, in order, from data parts
(``patch``, ``model_patch``, ``diff``), diff files, text parts holding the same as JSON,
then text: a fenced ```diff block,
``<patch>...</patch>``, or a bare diff. If nothing looks like a diff the reply has no
patch: the green agent never writes or repairs a patch for a participant.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from swegreen.core.patches import inspect_patch

DATA_KEYS = ("patch", "model_patch", "diff")
# How much of a candidate is parsed to tell a diff from prose (not a limit on the patch).
LOOKS_LIKE_DIFF_WINDOW = 256_000
DIFF_SUFFIXES = (".diff", ".patch")
DIFF_MEDIA_TYPES = ("text/x-diff", "text/x-patch", "text/diff", "application/x-patch")
_FENCE_OPEN = re.compile(r"([^\n`]*)\n")  # ``` and an info string, to the end of the line
DIFF_INFO = ("", "diff", "patch", "udiff")
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
    for part in parts:  # a text part holding JSON: {"patch": "<diff>"} (json.dumps'd replies)
        data = _json_object(part.text)
        if data is not None and data.get("action") == "patch":  # AgentSWE's final turn
            data = {"patch": data.get("content")}
        if data is not None:
            for key in DATA_KEYS:
                value = data.get(key)
                if value == "":
                    return Extraction("", f"JSON text part '{key}'")
                if isinstance(value, str) and _looks_like_diff(value):
                    return Extraction(_with_newline(value), f"JSON text part '{key}'")
    for part in parts:
        if part.text:
            found = diff_in_text(part.text)
            if found is not None:
                return Extraction(found[0], found[1])
    return Extraction(None, "no diff in the reply")


def diff_in_text(text: str) -> tuple[str, str] | None:
    """A diff inside prose: fenced, tagged, or bare. Only text that parses as one counts.

    Linear in the reply's length whatever it holds (fences and tags are paired by scanning
    forward, never searched for again from each opening), so a huge or hostile reply costs
    a pass or two over it; how large a patch may be is the evaluator's decision."""
    for body in _fenced(text):
        if _looks_like_diff(body):
            return _with_newline(body), "fenced diff block"
    for body in _between(text, "<patch>", "</patch>"):
        body = body.lstrip()
        if _looks_like_diff(body):
            return _with_newline(body), "<patch> tag"
    start = _DIFF_START.search(text)
    if start and _looks_like_diff(text[start.start() :]):
        return _with_newline(text[start.start() :]), "bare diff"
    return None


def _fenced(text: str) -> Iterator[str]:
    """Bodies of ``` blocks whose info string is empty or diff/patch/udiff, in order; other
    blocks (```python) are skipped whole, so their closing fence never opens a block."""
    pos = 0
    while (open_at := text.find("```", pos)) >= 0:
        opening = _FENCE_OPEN.match(text, open_at + 3)
        if opening is None:  # ``` inside a line
            pos = open_at + 3
            continue
        close_at = text.find("```", opening.end())
        if close_at < 0:
            return
        if opening.group(1).strip() in DIFF_INFO:
            yield text[opening.end() : close_at]
        pos = close_at + 3


def _between(text: str, opening: str, closing: str) -> Iterator[str]:
    pos = 0
    while (open_at := text.find(opening, pos)) >= 0:
        close_at = text.find(closing, open_at + len(opening))
        if close_at < 0:
            return
        yield text[open_at + len(opening) : close_at]
        pos = close_at + len(closing)


def _looks_like_diff(text: str) -> bool:
    """Whether ``text`` holds a file change, judged on a bounded window from its first
    diff header (a diff's first section says so; the rest is the evaluator's to check)."""
    start = _DIFF_START.search(text)
    if start is None:
        return False
    window = text[start.start() : start.start() + LOOKS_LIKE_DIFF_WINDOW]
    return bool(inspect_patch(window).files)


def _json_object(text: str | None) -> Mapping[str, Any] | None:
    if not text or not text.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, Mapping) else None


def _with_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"
