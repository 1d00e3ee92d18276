"""What a reply without a patch says: the participant's own words, kept on the row, and
whether they say it could not read the task.

A participant that could not read the task was never evaluated: its row is
``error/participant_protocol`` (and counts against the assessment's own failures), never a
``no_op`` that scores it as if it had tried. The phrases are those public participants
use when a task's shape is not theirs ("Invalid instance payload", "could not parse
problem payload", "missing required fields", "No input provided", ...).
"""

from __future__ import annotations

import re

MAX_WORDS = 500  # characters of the participant's words kept on the row

_UNREAD = re.compile(
    r"\b(?:invalid|malformed|unparsable|unparseable|unreadable|unsupported)\b[^.\n]{0,40}?"
    r"\b(?:payload|task|input|request|message|instance|json|format)\b"
    r"|\b(?:could ?n[o']t|cannot|can't|unable to|failed to)\s+(?:parse|read|decode|understand)\b"
    r"|\bmissing (?:required|mandatory)\b"
    r"|\bexpected (?:a )?json\b"
    r"|\bnot (?:a )?valid json\b"
    r"|\bno input provided\b",
    re.IGNORECASE,
)


def words(*texts: str) -> str:
    """The participant's words, one line each text, cut to ``MAX_WORDS`` characters."""
    said = " | ".join(" ".join(t.split()) for t in texts if t and t.strip())
    return said if len(said) <= MAX_WORDS else said[: MAX_WORDS - 1] + "…"


def could_not_read_task(text: str) -> bool:
    """The words say the task itself could not be read (not that the work failed)."""
    return _UNREAD.search(text) is not None
