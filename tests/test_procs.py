"""Subprocesses from async code: merged output, time limits and cancellation kill the tree."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

from swegreen.processes.procs import ProcResult, run_process


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie waiting for its reaper is as good as dead
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def wait_dead(pid: int, seconds: float = 5) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_stdout_and_stderr_are_merged_in_order() -> None:
    r = asyncio.run(run_process(["bash", "-c", "echo one; echo two >&2; echo three"]))
    assert r.ok and r.output.splitlines() == ["one", "two", "three"]


def test_time_limit_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    script = f"sleep 300 & echo $! > {pidfile}; wait"
    r = asyncio.run(run_process(["bash", "-c", script], timeout=1))
    assert r.timed_out and not r.ok
    assert wait_dead(int(pidfile.read_text()))


def test_cancellation_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"

    async def main() -> None:
        task = asyncio.create_task(
            run_process(["bash", "-c", f"sleep 300 & echo $! > {pidfile}; wait"])
        )
        for _ in range(200):  # the child writes its pid file, then we cancel
            if pidfile.exists() and pidfile.read_text().strip():
                break
            await asyncio.sleep(0.05)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert wait_dead(int(pidfile.read_text()))


def test_leftover_background_processes_die_with_the_run(tmp_path: Path) -> None:
    pidfile = tmp_path / "server.pid"
    r = asyncio.run(run_process(["bash", "-c", f"(sleep 300 &) ; sleep 300 & echo $! > {pidfile}"]))
    assert r.ok
    assert wait_dead(int(pidfile.read_text()))


def test_output_file_mode_streams_to_disk(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    r = asyncio.run(
        run_process(
            ["bash", "-c", "for i in $(seq 1 20000); do echo line $i; done"], output_file=log
        )
    )
    assert r.ok and log.read_text().count("\n") == 20000 and r.output.endswith("line 20000\n")


def test_the_event_loop_keeps_running_while_processes_wait(tmp_path: Path) -> None:
    """Four processes wait for a file that only the event loop creates, after they started:
    they can end well only if the loop runs while they wait (a blocked loop would leave
    them to give up after 120 s and fail)."""
    flag = tmp_path / "flag"
    script = (
        f"i=0; while [ ! -e {flag} ]; do i=$((i+1)); [ $i -gt 12000 ] && exit 3; sleep 0.01; done"
    )

    async def main() -> list[int]:
        async def release() -> None:
            for _ in range(5):
                await asyncio.sleep(0.02)
            flag.touch()

        waiters = [run_process(["sh", "-c", script]) for _ in range(4)]
        *results, _ = await asyncio.gather(*waiters, release())
        return [r.returncode for r in results]

    assert asyncio.run(main()) == [0, 0, 0, 0]


def test_a_failures_tail_keeps_the_first_error_that_pip_buried() -> None:
    """A failed `pip install -e .` ends in 40 lines of pip's own shim; the compiler's
    error that says why is far above them."""
    compile_lines = [f"gcc -Werror=format-security -c sklearn/m{n}.c" for n in range(200)]
    output = "\n".join(
        [
            *compile_lines[:100],
            "sklearn/tree/_tree.c:1234:5: error: 'PyTypeObject' has no member 'tp_print'",
            *compile_lines[100:],
            *[f"    # pip's setup.py shim, line {n}" for n in range(60)],
        ]
    )
    tail = ProcResult(1, output, False, 1.0).tail()
    assert "error: 'PyTypeObject' has no member 'tp_print'" in tail
    assert "lines ...]" in tail and tail.endswith("shim, line 59")
    assert "m0.c" not in tail  # only a few lines around the error, not the whole log
    plain = "\n".join(compile_lines)  # no error line: the last lines only, as before
    assert ProcResult(1, plain, False, 1.0).tail() == "\n".join(compile_lines[-40:])
