"""A built environment as the engine sees it: where its prefix is, its Python and bin
directories, and the files a build leaves in its folder."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

COMPLETE = ".complete"


BUILD_LOG = "build.log"


LOCK_LIST = "lock.txt"


BUILD_TIMEOUT = 3600.0
ENV_INFO = "env.json"


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


# What a build is given to read the repository's files and to check it out
ReadFile = Callable[[str], "str | None"]
Checkout = Callable[[Path], Awaitable[None]]  # materialize the repo at the setup commit
