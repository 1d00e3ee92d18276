"""Integrity: resources and kernel objects, attacked by a real adversarial A2A participant
through a real green agent started with small limits. Each row ends with its own reason,
never the host's trouble: a disk filled, memory taken by many processes at once, a key
left in the kernel keyring for another row to read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from swegreen.sample import SampleBenchmark
from swegreen.sandbox.isolation import Isolation
from tests.test_integrity import write
from tests.test_integrity_install import green_agent, run_assessment

# Writes 400 files of 1 MB into the checkout (each under the per-file limit), then waits.
FILL_THE_DISK = """
import os as _os, time as _time
for _i in range(400):
    with open("filler-%d.bin" % _i, "wb") as _fh:
        _fh.write(b"0" * (1 << 20))
_time.sleep(30)
"""

# Eight processes of 100 MB each: every one far under the per-process limit, all together
# over the sandbox's.
TAKE_THE_MEMORY = """
import subprocess as _sp, sys as _sys
_hog = "x = bytearray(100 << 20); x[::4096] = b'1' * len(x[::4096]); import time; time.sleep(20)"
_procs = [_sp.Popen([_sys.executable, "-c", _hog]) for _ in range(8)]
for _p in _procs:
    _p.wait()
"""

# A key in the kernel keyring, where a concurrent row's code could read it: refused.
KEYRING = """
def _stash():
    import atexit, ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    key = libc.syscall(248, b"user", b"hidden-tests", b"the tests", 9, -3)
    said = "KEYRING add_key %d %s" % (key, os.strerror(ctypes.get_errno()))
    atexit.register(lambda: print(said, flush=True))

_stash()
"""

ISO = Isolation.probe()


@pytest.fixture(scope="module")
def rows(
    session_cache: Path, sample: SampleBenchmark, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, dict[str, Any]], Path]]:
    out = tmp_path_factory.mktemp("integrity-limits")
    limits = {"SWEGREEN_DISK_MB": "128", "SWEGREEN_MEMORY_MB": "512"}
    with green_agent(session_cache, out, env=limits) as green:
        rows = run_assessment(
            green,
            session_cache,
            out,
            sample,
            "limits",
            {
                "sample__calculator-1": lambda r: write(
                    r / "calculator" / "__init__.py", FILL_THE_DISK, True
                ),
                "sample__calculator-2": lambda r: write(
                    r / "calculator" / "__init__.py", TAKE_THE_MEMORY, True
                ),
                "sample__textkit-1": lambda r: write(r / "textkit" / "__init__.py", KEYRING, True),
            },
            # The limits, not the clock, must end these rows: eight interpreters taking
            # 100 MB each can need more than the sample's 10 s on a loaded machine.
            config={"eval_timeout": 300},
        )
        yield rows, out / "green"


def test_a_filled_disk_ends_the_row_with_its_reason(rows) -> None:
    row = rows[0]["sample__calculator-1"]
    assert (row["status"], row["reason"]) == ("error", "disk_limit_exceeded"), row["detail"]
    assert "128 MB" in row["detail"]


@pytest.mark.skipif(ISO.memory_cgroup is None, reason="no writable memory cgroup here")
def test_memory_taken_by_many_processes_ends_the_row_with_its_reason(rows) -> None:
    row = rows[0]["sample__calculator-2"]
    assert (row["status"], row["reason"]) == ("error", "out_of_memory"), row["detail"]


@pytest.mark.skipif(ISO.seccomp is None, reason="no seccomp filter for this architecture")
def test_nothing_can_be_left_in_the_kernel_keyring(rows) -> None:
    row = rows[0]["sample__textkit-1"]
    assert row["status"] == "no_op" and row["tests_ran"] is True
    (log,) = rows[1].rglob("sample__textkit-1/test_output.txt")
    assert "KEYRING add_key -1 Operation not permitted" in log.read_text()


def test_payloads_compile() -> None:
    for payload in (FILL_THE_DISK, TAKE_THE_MEMORY, KEYRING):
        compile(payload, "payload.py", "exec")
