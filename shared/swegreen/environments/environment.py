"""A built environment as the engine sees it: where its prefix is, its Python and bin
directories, and the files a build leaves in its folder."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

COMPLETE = ".complete"


BUILD_LOG = "build.log"


LOCK_LIST = "lock.txt"


BUILD_TIMEOUT = 3600.0
ENV_INFO = "env.json"

# A build step that failed for one of these may succeed later: it is retried and not
# remembered as the recipe's failure.
_TRANSIENT = re.compile(
    r"Temporary failure in name resolution|Name or service not known|Connection refused|"
    r"Connection reset|Network is unreachable|Max retries exceeded|ReadTimeoutError|"
    r"Could not fetch URL|error sending request|Failed to fetch|No space left on device|"
    r"HTTP status server error|503 Service Unavailable|502 Bad Gateway",
    re.IGNORECASE,
)


def transient_failure(output: str) -> bool:
    """A failed build step's output blames the moment (network, disk), not the recipe."""
    return _TRANSIENT.search(output) is not None


@dataclass(frozen=True)
class Environment:
    key: str
    root: Path  # <cache>/envs/<key>
    prefix: Path  # the interpreter tree to run: <root>/py, or an evaluation's view of it
    runtime_env: dict[str, str] = field(default_factory=dict)
    extra_bin: tuple[Path, ...] = ()
    build_seconds: float = 0.0
    reused: bool = True

    @property
    def python(self) -> Path:
        return self.prefix / "bin" / "python"

    @property
    def bin_dirs(self) -> list[Path]:
        return [self.prefix / "bin", *self.extra_bin]


def interpreter_source(root: Path) -> dict[str, object] | None:
    """Where the environment at ``root`` got its interpreter (InterpreterSearch.source_of),
    as its build recorded it; None for one built before builds recorded it."""
    try:
        source = json.loads((root / ENV_INFO).read_text()).get("interpreter_source")
    except (OSError, ValueError):
        return None
    return source if isinstance(source, dict) else None


# What a build is given to read the repository's files and to check it out
ReadFile = Callable[[str], "str | None"]
Checkout = Callable[[Path], Awaitable[None]]  # materialize the repo at the setup commit
