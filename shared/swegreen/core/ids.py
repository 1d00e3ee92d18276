"""Names that become parts of paths: run ids, instance ids, participant roles.

They name directories (artifacts, workspaces, caches) and S3 keys, so one rule, checked
where they enter (flags, requests, dataset and predictions files), keeps them from ever
leaving their directory: letters, digits, ``.``, ``_`` and ``-``, starting with a letter
or digit, at most 128 characters, no ``..``. Every SWE-bench instance id fits it.
"""

from __future__ import annotations

import re

MAX_ID_CHARS = 128
SAFE_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_ID_CHARS - 1}}}")
ID_RULE = (
    f"1-{MAX_ID_CHARS} letters, digits, '.', '_' or '-', starting with a letter or digit, "
    "without '..'"
)


def id_problem(value: object) -> str | None:
    """Why ``value`` is not a safe id, or None when it is one."""
    if not isinstance(value, str):
        return f"it is a {type(value).__name__}, not a string"
    if SAFE_ID.fullmatch(value) and ".." not in value:
        return None
    if not value:
        return "it is empty"
    if len(value) > MAX_ID_CHARS:
        return f"it is {len(value)} characters long"
    bad = sorted(set(re.sub(r"[A-Za-z0-9._-]", "", value)))
    if bad:
        return "it contains " + ", ".join(repr(c) for c in bad[:5])
    if not value[0].isalnum():
        return f"it starts with {value[0]!r}"
    return "it contains '..'"


def safe_id_suggestion(value: str) -> str:
    """A safe id close to ``value``, for error messages."""
    text = re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9._-]+", "-", value))
    text = text.lstrip("._-")[:MAX_ID_CHARS].rstrip("._-")
    return text or "run-1"


def check_id(value: str, what: str) -> str:
    """``value`` if it is a safe id; else ``ValueError`` naming it, the rule and a fix.

    Callers turn the ``ValueError`` into their own family's error (``ConfigError``,
    ``DatasetError``, ...); pydantic validators may let it through as is.
    """
    problem = id_problem(value)
    if problem is None:
        return value
    hint = safe_id_suggestion(value) if isinstance(value, str) else "run-1"
    raise ValueError(
        f"{what} {value!r} cannot be used: {problem}. It becomes part of file paths, so it "
        f"must be {ID_RULE}; use e.g. {hint!r}"
    )
