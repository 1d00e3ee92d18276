"""One row's container: created from its instance image, files copied in with archive
calls, commands run with exec under a time limit, removed at the end.

Only the calls AgentBeats' Docker gateway allows are made (create, start, stop, exec,
archive, remove of the container made here): no kill, no bind mount, no network change.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

import docker
from docker.errors import APIError, NotFound

from swegreen.core.errors import SandboxCrashed

WORKDIR = "/testbed"
MAX_OUTPUT_BYTES = 64 * 1024 * 1024  # a log beyond this keeps its head and is marked cut


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = 8 * 1024**3
    pids: int = 4096
    network: bool = False  # off unless the row's tests need it (network_instances)
    network_mode: str = "bridge"  # the mode of a row that keeps the network


@dataclass(frozen=True)
class ExecResult:
    exit_code: int | None  # None: stopped at its time limit
    output: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class RowContainer:
    """A container of ``image`` that idles until commands are exec'd into it."""

    def __init__(self, client: docker.DockerClient, container_id: str) -> None:
        self.client = client
        self.id = container_id

    @classmethod
    def create(
        cls,
        client: docker.DockerClient,
        image: str,
        name: str,
        limits: Limits,
        labels: dict[str, str],
    ) -> RowContainer:
        host_config = client.api.create_host_config(
            network_mode=limits.network_mode if limits.network else "none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mem_limit=limits.memory_bytes,
            memswap_limit=limits.memory_bytes,  # no swap beyond the limit
            pids_limit=limits.pids,
            init=True,  # reaps what the tests leave behind; stop ends at once
        )
        created = client.api.create_container(
            image,
            command=["tail", "-f", "/dev/null"],
            name=name,
            working_dir=WORKDIR,
            labels=labels,
            host_config=host_config,
            network_disabled=not limits.network,
        )
        container = cls(client, created["Id"])
        try:
            client.api.start(container.id)
        except APIError:
            container.remove()
            raise
        return container

    def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        target = PurePosixPath(path)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo(target.name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
        if not self.client.api.put_archive(self.id, str(target.parent), buffer.getvalue()):
            raise SandboxCrashed(f"copying {path} into the container was refused")

    def exec(
        self,
        argv: Sequence[str],
        timeout: float | None = None,
        workdir: str = WORKDIR,
    ) -> ExecResult:
        """Run ``argv``; stdout and stderr together, in order, as the harness reads them.
        Past ``timeout`` the container is stopped (the gateway allows stop, not kill)."""
        t0 = time.monotonic()
        exec_id = self.client.api.exec_create(
            self.id, list(argv), workdir=workdir, stdout=True, stderr=True
        )["Id"]
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            with contextlib.suppress(APIError):
                self.client.api.stop(self.id, timeout=1)

        timer = threading.Timer(timeout, expire) if timeout else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        chunks: list[bytes] = []
        size = 0
        try:
            for chunk in self.client.api.exec_start(exec_id, stream=True, demux=False):
                if size < MAX_OUTPUT_BYTES:
                    chunks.append(chunk[: MAX_OUTPUT_BYTES - size])
                size += len(chunk)
        finally:
            if timer is not None:
                timer.cancel()
        output = b"".join(chunks).decode("utf-8", errors="replace")
        if size > MAX_OUTPUT_BYTES:
            output += f"\n[swegreen: output cut at {MAX_OUTPUT_BYTES} of {size} bytes]\n"
        if expired.is_set():
            return ExecResult(None, output, time.monotonic() - t0)
        code = self.client.api.exec_inspect(exec_id).get("ExitCode")
        return ExecResult(code if code is not None else -1, output, time.monotonic() - t0)

    def shell(self, script: str, timeout: float | None = None) -> ExecResult:
        return self.exec(["/bin/bash", "-c", script], timeout)

    def remove(self) -> None:
        with contextlib.suppress(NotFound):
            self.client.api.remove_container(self.id, force=True)
