"""An instance's interactive mode: its budget meter and its workbench, opened at the
first command."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from swegreen.core.dataset import Instance
from swegreen.core.interaction import (
    CommandOutcome,
    CommandRequest,
    Meter,
)
from swegreen.core.ports import Workbench, Workbenches

WORKBENCH_SCOPE = "workbench"  # under the engine's work root, apart from graded testbeds


@dataclass
class _Session:
    """One instance's interactive mode: its meter, and its workbench, opened at the first
    command, or before the first message where that message names it (the universal
    dialect's AgentSWE ``cwd``). The time spent opening it (copying the prepared workspace,
    or building it first) is not the participant's: its ``deadline`` is held meanwhile and
    pushed back by as much."""

    workbenches: Workbenches
    instance: Instance
    meter: Meter
    deadline: asyncio.Timeout | None = None  # the participant's, held while the bench opens
    stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    bench: Workbench | None = None

    async def open(self) -> Workbench:
        if self.bench is None:
            t0 = time.monotonic()
            held = self.deadline.when() if self.deadline is not None else None
            if self.deadline is not None:
                self.deadline.reschedule(None)  # building it may take longer than the limit
            try:
                self.bench = await self.stack.enter_async_context(
                    self.workbenches.open(WORKBENCH_SCOPE, self.instance)
                )
            finally:
                self.meter.usage.setup_seconds = time.monotonic() - t0
                if self.deadline is not None and held is not None:
                    self.deadline.reschedule(held + self.meter.usage.setup_seconds)
        return self.bench

    async def run(self, request: CommandRequest, *, discard: bool = False) -> CommandOutcome:
        """One command in the workbench; ``discard``: nothing it writes stays."""
        timeout = self.meter.admit(request)
        bench = await self.open()
        if discard:
            ran = await bench.run_discarded(request.command, timeout)
        else:
            ran = await bench.run(request.command, timeout)
        return self.meter.charge(request, ran.exit_code, ran.output, ran.duration)

    @property
    def python_version(self) -> str:
        """The workbench environment's Python (major.minor)."""
        assert self.bench is not None, "open() first"
        return self.bench.python_version

    @property
    def used(self) -> dict[str, Any] | None:
        usage = self.meter.usage
        return usage.as_row() if usage.steps or usage.ended else None
