"""The interpreter with a2a-sdk 0.3 (client and server) that AgentBeats' gateway and many
public participants use: made once in .venv-a2a03, for the tests (conftest.py) and
scripts/platform_check.py alike. A lock keeps two test workers from making it at once."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

A2A03_VENV = Path(__file__).resolve().parents[2] / ".venv-a2a03"
A2A03_VERSION = "0.3.26"
A2A03_PROBE = (
    "import importlib.metadata as m, uvicorn, a2a.server.apps; print(m.version('a2a-sdk'))"
)


def a2a03_python() -> Path:
    python = A2A03_VENV / "bin" / "python"
    A2A03_VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(A2A03_VENV.parent / ".venv-a2a03.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = python.exists() and (
            subprocess.run(
                [str(python), "-c", A2A03_PROBE], capture_output=True, text=True
            ).stdout.strip()
            == A2A03_VERSION
        )
        if not ready:
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(A2A03_VENV)], check=True)
            subprocess.run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    f"a2a-sdk[http-server]=={A2A03_VERSION}",
                    "httpx",
                    "uvicorn",
                ],
                check=True,
            )
    return python
