"""Keeping the host's secrets out of what a run stores and sends.

Test output, instance logs, error details and the green agent's prompts are written by
code that runs next to the host's credentials (an API key for the model, a token for the
hub, AWS keys). A ``Scrubber`` is built once, at a composition root, from the host's
environment: the value of every variable whose name looks secret is replaced by
``[redacted:NAME]`` wherever it appears. Core code gets the scrubber, never the environment.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import quote

# A variable is secret when its name contains one of these (AUTHOR/AUTHORITY excepted:
# GIT_AUTHOR_NAME and XAUTHORITY name people and files, not credentials).
SECRET_NAME_PARTS = (
    "KEY",
    "SECRET",
    "TOKEN",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "SESSION",
)
AWS_CREDENTIALS = frozenset(
    {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"}
)
# Shorter values ("1", "true", "us-east-1") are settings, and would redact ordinary words.
MIN_SECRET_CHARS = 8

Scrub = Callable[[str], str]


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    if upper in AWS_CREDENTIALS:
        return True
    upper = upper.replace("AUTHOR", "")
    return any(part in upper for part in SECRET_NAME_PARTS)


@dataclass(frozen=True)
class Scrubber:
    """Replaces known secret values in text. Callable: ``scrubber(text) -> text``."""

    secrets: Mapping[str, str] = field(default_factory=dict)  # variable name -> value
    _pattern: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _names: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names: dict[str, str] = {}
        for name, value in sorted(self.secrets.items()):
            # Also the forms a value takes inside JSON and URLs (tokens in clone URLs).
            for form in (value, json.dumps(value)[1:-1], quote(value, safe="")):
                if len(form) >= MIN_SECRET_CHARS:
                    names.setdefault(form, name)
        # Longest first, so a secret that contains another is redacted whole.
        alternatives = sorted(names, key=len, reverse=True)
        pattern = re.compile("|".join(map(re.escape, alternatives))) if alternatives else None
        object.__setattr__(self, "_pattern", pattern)
        object.__setattr__(self, "_names", names)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Scrubber:
        """The secrets of a host environment (call at a composition root)."""
        return cls(
            {
                name: value
                for name, value in env.items()
                if is_secret_name(name) and len(value) >= MIN_SECRET_CHARS
            }
        )

    @property
    def names(self) -> list[str]:
        """The variables whose values are redacted (never the values)."""
        return sorted(self.secrets)

    def __call__(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(lambda m: f"[redacted:{self._names[m.group(0)]}]", text)


NO_SCRUBBING = Scrubber()
