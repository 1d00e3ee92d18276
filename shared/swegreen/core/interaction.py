"""The interactive mode's protocol and bookkeeping: plain data, no transport.

A participant that wants to work in the green agent's prepared environment asks, in the
same A2A task, for one shell command at a time (``parse_command``); the green agent runs
it in the participant's own copy of the instance workspace and answers with the output,
the exit code and the time it took (``CommandOutcome.message_data``). The conversation
ends with a patch, as for any participant. ``Budget`` caps what one instance may use;
``Usage`` is what it did use, recorded on its row. The protocol is documented in
docs/interactive.md; ``PROTOCOL`` is its version.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from swegreen.core.patch_extraction import ReplyPart

PROTOCOL = "swegreen-shell/1"
COMMAND_KEY = "command"
RESULT_KEY = "command_result"
# Text fallback: one fenced block marked as shell, in a turn that asks for input.
_SHELL_FENCE = re.compile(r"```(?:bash|sh|shell|console)[ \t]*\n(.*?)\n?```", re.S)
ELIDED = "\n[... {n} bytes elided ...]\n"
TRANSCRIPT_CHARS = 4000  # of each command and its output, kept in the run's transcript


@dataclass(frozen=True)
class Budget:
    """What one instance may use in interactive mode (the whole conversation's wall time
    is ``participant_timeout``)."""

    max_steps: int
    command_timeout: float
    command_output_bytes: int  # per command: output beyond it is cut (head and tail kept)
    max_output_bytes: int  # per instance: output sent back over all commands

    def offer(self) -> dict[str, Any]:
        """The mode as the task message announces it."""
        return {
            "protocol": PROTOCOL,
            "request": {COMMAND_KEY: "<shell command>", "timeout": "<seconds, optional>"},
            "reply": RESULT_KEY,
            "cwd": "the repository's root",
            "max_steps": self.max_steps,
            "command_timeout": self.command_timeout,
            "command_output_bytes": self.command_output_bytes,
            "max_output_bytes": self.max_output_bytes,
        }


@dataclass(frozen=True)
class CommandRequest:
    command: str
    timeout: float | None = None  # at most the budget's command_timeout


@dataclass(frozen=True)
class CommandOutcome:
    """One command's result as sent back."""

    exit_code: int | None  # None: it ran past its time limit
    output: str
    truncated: bool
    duration: float
    timed_out: bool = False
    steps_left: int = 0
    output_bytes_left: int = 0

    def message_data(self) -> dict[str, Any]:
        return {RESULT_KEY: asdict(self)}

    def message_text(self) -> str:
        """The same, for participants that read text only."""
        status = "timed out" if self.timed_out else f"exit code {self.exit_code}"
        note = " (output truncated)" if self.truncated else ""
        return (
            f"{status}, {self.duration:.1f} s{note}; {self.steps_left} step(s) left\n"
            f"```\n{self.output}\n```"
        )


@dataclass
class Usage:
    """What a participant used in interactive mode: recorded on its row."""

    steps: int = 0
    command_seconds: float = 0.0
    output_bytes: int = 0
    setup_seconds: float = 0.0  # preparing its workspace (not charged to its time limit)
    # The transcript: command, exit code, time, output (each cut at TRANSCRIPT_CHARS).
    commands: list[dict[str, Any]] = field(default_factory=list)
    ended: str | None = None  # why the instance ended early (a budget), else None

    def as_row(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "command_seconds": round(self.command_seconds, 3),
            "output_bytes": self.output_bytes,
            "setup_seconds": round(self.setup_seconds, 3),
            "ended": self.ended,
        }


class BudgetExhausted(Exception):
    """The participant asked for more than its budget allows: its instance ends here."""


def parse_command(parts: Iterable[ReplyPart]) -> CommandRequest | None:
    """The command a turn asks for, or None. A data part ``{"command": "..."}`` first;
    else a text that is such a JSON object, or holds exactly one ```bash block."""
    parts = list(parts)
    for part in parts:
        if isinstance(part.data, Mapping) and COMMAND_KEY in part.data:
            return _request(part.data)
    blocks: list[str] = []
    for part in parts:
        text = (part.text or "").strip()
        if not text:
            continue
        if text.startswith("{"):
            try:
                value = json.loads(text)
            except ValueError:
                value = None
            if isinstance(value, Mapping) and COMMAND_KEY in value:
                return _request(value)
        blocks += _SHELL_FENCE.findall(text)
    if len(blocks) == 1 and blocks[0].strip():
        return CommandRequest(blocks[0])
    return None


def _request(value: Mapping[str, Any]) -> CommandRequest | None:
    command = value.get(COMMAND_KEY)
    if not isinstance(command, str) or not command.strip():
        return None
    timeout = value.get("timeout")
    ok = isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0
    return CommandRequest(command, float(timeout) if ok else None)


def truncate(output: str, limit: int) -> tuple[str, bool]:
    """At most ``limit`` bytes (UTF-8) of ``output``: its head and its tail, where an agent
    finds what a command started with and how it ended (a test run's summary)."""
    data = output.encode("utf-8", "replace")
    if len(data) <= limit:
        return output, False
    marker = ELIDED.format(n=len(data) - limit)
    room = limit - len(marker.encode())
    if room <= 0:  # too little left even for the marker (the instance's last bytes)
        return data[: max(0, limit)].decode("utf-8", "ignore"), True
    head, tail = data[: room // 2], data[len(data) - (room - room // 2) :]
    text = head.decode("utf-8", "ignore") + marker + tail.decode("utf-8", "ignore")
    return text, True


@dataclass
class Meter:
    """Charges one instance's commands against its budget."""

    budget: Budget
    usage: Usage = field(default_factory=Usage)

    def admit(self, request: CommandRequest) -> float:
        """The time limit the command runs under; raises ``BudgetExhausted`` when no step
        or output is left."""
        if self.usage.steps >= self.budget.max_steps:
            self.usage.ended = f"step budget exhausted ({self.budget.max_steps} commands)"
            raise BudgetExhausted(self.usage.ended)
        if self.usage.output_bytes >= self.budget.max_output_bytes:
            self.usage.ended = (
                f"output budget exhausted ({self.budget.max_output_bytes} bytes sent back)"
            )
            raise BudgetExhausted(self.usage.ended)
        limit = self.budget.command_timeout
        return min(request.timeout, limit) if request.timeout else limit

    def charge(
        self, request: CommandRequest, exit_code: int | None, output: str, duration: float
    ) -> CommandOutcome:
        """Account for a command that ran and shape what is sent back."""
        left = self.budget.max_output_bytes - self.usage.output_bytes
        text, cut = truncate(output, min(self.budget.command_output_bytes, left))
        self.usage.steps += 1
        self.usage.command_seconds += duration
        self.usage.output_bytes += len(text.encode("utf-8", "replace"))
        self.usage.commands.append(
            {
                "command": request.command[:TRANSCRIPT_CHARS],
                "exit_code": exit_code,
                "seconds": round(duration, 3),
                "output": text[:TRANSCRIPT_CHARS],
                "truncated": cut,
            }
        )
        return CommandOutcome(
            exit_code=exit_code,
            output=text,
            truncated=cut,
            duration=round(duration, 3),
            timed_out=exit_code is None,
            steps_left=self.budget.max_steps - self.usage.steps,
            output_bytes_left=max(0, self.budget.max_output_bytes - self.usage.output_bytes),
        )
