"""Running subprocesses from async code without blocking the event loop.

Every process gets its own process group, so a time limit or a cancellation kills the
whole tree it started (test runners fork). Output is stdout and stderr merged in order,
which the official log markers need (they arrive on stderr through ``set -x``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import re
import resource
import signal
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

_PR_SET_PDEATHSIG = 1
PIPE_GRACE = 10.0  # seconds a piped copy may run on after its command exited
TERM_GRACE = 5.0  # seconds a cancelled run has to end its own processes before KILL


@dataclass(frozen=True)
class ProcResult:
    returncode: int
    output: str
    timed_out: bool
    duration: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def tail(self, lines: int = 40) -> str:
        """The output's last ``lines``, and, when the first error came before them, a few
        lines around it: pip ends a failed build with its own boilerplate, so the
        compiler's error or the traceback that says why is often far above the end."""
        every = self.output.splitlines()
        before, last = every[:-lines], every[-lines:]
        first = next((i for i, line in enumerate(before) if _FIRST_ERROR.search(line)), None)
        if first is None:
            return "\n".join(last)
        around = before[max(0, first - 3) : first + 12]
        skipped = len(before) - min(len(before), first + 12)
        return "\n".join([*around, f"[... {skipped} lines ...]", *last])


# The first line that says what went wrong: a compiler's or a tool's error, a traceback,
# a killed compiler ("-Werror=..." flags do not match: no blank before them).
_FIRST_ERROR = re.compile(
    r"(^|\s)(error|Error|ERROR)(:| \[)|fatal error|^Traceback \(most recent call last\)|"
    r"\bKilled\b"
)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None


def _child_setup(
    rlimits: Mapping[int, tuple[int, int]], libc: ctypes.CDLL | None, death_signal: int
) -> None:
    # Runs in the child between fork and exec: only async-signal-safe work.
    if libc is not None:
        libc.prctl(_PR_SET_PDEATHSIG, death_signal)  # do not outlive a killed engine
    for which, (soft, hard) in rlimits.items():
        resource.setrlimit(which, (soft, hard))


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    stdin_data: bytes | None = None,
    output_file: Path | None = None,
    max_output: int = 2_000_000,
    rlimits: Mapping[int, tuple[int, int]] | None = None,
    death_signal: int = signal.SIGKILL,
    through_pipe: bool = False,
    append: bool = False,
    pass_fds: tuple[int, ...] = (),
) -> ProcResult:
    """Run ``argv`` to completion (or its time limit) and return its merged output.

    With ``output_file`` the output lands in that file (appended to with ``append``) and
    ``output`` is what this run added; otherwise the output goes to an anonymous temporary
    file and ``output`` is its last ``max_output`` bytes. ``death_signal`` reaches the child
    if the engine dies (SIGTERM lets a supervising ``timeout`` take its whole tree down).
    Must be awaited on the event loop's thread: the parent-death signal is tied to the
    thread that forked.

    By default the child writes to the file itself. ``through_pipe`` gives it a pipe that
    this process copies into the file instead, so that the child can neither truncate nor
    rewrite what it printed before (the log that grades a sandboxed run); use it only for
    commands whose every descendant dies with them (a PID namespace), since a background
    grandchild holding the pipe would keep the copy going until ``PIPE_GRACE`` runs out.
    """
    libc = _libc()
    limits = dict(rlimits or {})
    # Output goes to a file, not a pipe, unless asked: a background grandchild that keeps a
    # pipe open would otherwise hold up Python 3.11's proc.wait() until it exits.
    mode = "a+b" if append else "w+b"
    sink = open(output_file, mode) if output_file else tempfile.TemporaryFile()  # noqa: SIM115
    offset = sink.seek(0, os.SEEK_END)
    start = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=str(cwd) if cwd else None,
            env=dict(env) if env is not None else None,
            stdin=asyncio.subprocess.PIPE if stdin_data is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE if through_pipe else sink,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=functools.partial(_child_setup, limits, libc, death_signal),
            pass_fds=pass_fds,
        )
    except BaseException:
        sink.close()
        raise
    copier = (
        asyncio.create_task(_copy(proc.stdout, sink))
        if through_pipe and proc.stdout is not None
        else None
    )
    timed_out = False
    try:
        if stdin_data is not None and proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(stdin_data)
                await proc.stdin.drain()
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            timed_out = True
    except BaseException:
        # TERM first: a supervising launcher (sandbox/confine.py) ends every process of the
        # run, those that left its group too, before it goes; then KILL what is left
        kill_group(proc.pid, signal.SIGTERM)
        with contextlib.suppress(Exception):
            await asyncio.shield(asyncio.wait_for(proc.wait(), TERM_GRACE))
        kill_group(proc.pid)
        with contextlib.suppress(Exception):
            await asyncio.shield(proc.wait())
        if copier is not None:
            copier.cancel()
        sink.close()
        raise
    # Leftovers (servers a test started, a timed-out tree) die with the evaluation, as
    # they would with its container.
    kill_group(proc.pid)
    await proc.wait()
    if copier is not None:
        # A writer that outlived the command: what it printed so far is kept.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(copier, PIPE_GRACE)
    duration = time.monotonic() - start
    output = _tail(sink, None if output_file else max_output, offset)
    sink.close()
    return ProcResult(
        returncode=proc.returncode if proc.returncode is not None else -1,
        output=output,
        timed_out=timed_out,
        duration=duration,
    )


def _tail(sink: BinaryIO, limit: int | None, offset: int = 0) -> str:
    size = sink.seek(0, os.SEEK_END)
    sink.seek(offset if limit is None else max(offset, size - limit))
    return sink.read().decode("utf-8", "replace")


async def _copy(stream: asyncio.StreamReader, sink: BinaryIO) -> None:
    while chunk := await stream.read(65536):
        sink.write(chunk)
    sink.flush()


async def run_checked(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = 600,
    stdin_data: bytes | None = None,
) -> ProcResult:
    """``run_process`` for quick helper commands (git plumbing) whose failure is an exception."""
    result = await run_process(argv, cwd=cwd, env=env, timeout=timeout, stdin_data=stdin_data)
    if not result.ok:
        raise CommandFailed(argv, result)
    return result


class CommandFailed(Exception):
    def __init__(self, argv: Sequence[str], result: ProcResult) -> None:
        what = "timed out" if result.timed_out else f"exited {result.returncode}"
        super().__init__(f"`{' '.join(argv)}` {what}: {result.tail(15)}")
        self.result = result
