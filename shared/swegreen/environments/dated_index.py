"""The package index as it was on a recipe's date, as the engine sees it: the process
that serves it (dated_index_server.py, whose docstring says why it exists), started on
first use and stopped with the engine, and the URL every pip of a build gets from it.

Apart from the server so that the engine, which needs it only when it builds, does not
import an HTTP server and client on every command's start.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

DEFAULT_UPSTREAM = "https://pypi.org/simple"
NO_EXEMPTIONS = "-"
# The day of a recipe without one: every file counts (a recording index still needs a day).
NO_CUTOFF = "9999-12-31"


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class DatedIndex:
    """The index process, started on first use; ``url(day)`` is what PIP_INDEX_URL gets.
    A plain ``Popen``: the index outlives any one event loop (an engine serves many runs)."""

    def __init__(
        self,
        upstream: str = DEFAULT_UPSTREAM,
        env: dict[str, str] | None = None,
        record: Path | None = None,
    ):
        self.upstream = upstream
        self.env = env
        self.record = record  # a recording index (see the module's docstring)
        self._proc: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._lock = threading.Lock()

    async def url(self, day: str, exempt: tuple[str, ...] = ()) -> str:
        port = await asyncio.to_thread(self._ensure_started)
        token = ",".join(sorted(normalize(n) for n in exempt)) or NO_EXEMPTIONS
        return f"http://127.0.0.1:{port}/{day}/{token}/"

    def _ensure_started(self) -> int:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None and self._port:
                return self._port
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "swegreen.environments.dated_index_server",
                    "--upstream",
                    self.upstream,
                    "--parent-pipe",
                    *(["--record", str(self.record)] if self.record is not None else []),
                ],
                stdout=subprocess.PIPE,
                stdin=subprocess.PIPE,  # its end tells the index that we are gone
                env=self.env,
                start_new_session=True,
            )
            assert proc.stdout is not None
            line = proc.stdout.readline()  # readiness: the port, once it listens
            if not line.strip().isdigit():
                proc.kill()
                proc.wait()
                raise RuntimeError(f"the dated package index did not start: {line!r}")
            self._proc, self._port = proc, int(line)
            return self._port

    def close(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
        if proc is not None:
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()


def index_env(host_env: Mapping[str, str]) -> dict[str, str]:
    """What the index process needs of the host: reaching the upstream index, no more."""
    keep = ("PATH", "HOME", "LANG", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE")
    proxies = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy")
    env = {k: host_env[k] for k in (*keep, *proxies) if k in host_env}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # find swegreen itself
    return env
