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
        cap_add: Sequence[str] = (),
    ) -> RowContainer:
        """``cap_add``: capabilities kept for the container's root (a workbench's set-up
        gives its checkout to a user without any)."""
        host_config = client.api.create_host_config(
            network_mode=limits.network_mode if limits.network else "none",
            cap_drop=["ALL"],
            cap_add=list(cap_add) or None,
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
        environment: dict[str, str] | None = None,
        user: str = "",
    ) -> ExecResult:
        """Run ``argv``; stdout and stderr together, in order, as the harness reads them.
        Past ``timeout`` the container is stopped (the gateway allows stop, not kill)."""
        t0 = time.monotonic()
        exec_id = self.client.api.exec_create(
            self.id,
            list(argv),
            workdir=workdir,
            stdout=True,
            stderr=True,
            environment=environment,
            user=user,
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

    def put_files(
        self,
        files: dict[str, tuple[bytes, int]],
        dirs: dict[str, int] | None = None,
    ) -> None:
        """Files at absolute paths (path -> (content, mode)), and new directories for them
        (path -> mode), in one archive call: each call is a round trip to the daemon."""
        buffer = io.BytesIO()
        now = int(time.time())
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for path, dir_mode in (dirs or {}).items():
                info = tarfile.TarInfo(path.lstrip("/"))
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, dir_mode, now
                tar.addfile(info)
            for path, (data, file_mode) in files.items():
                info = tarfile.TarInfo(path.lstrip("/"))
                info.size, info.mode, info.mtime = len(data), file_mode, now
                tar.addfile(info, io.BytesIO(data))
        if not self.client.api.put_archive(self.id, "/", buffer.getvalue()):
            raise SandboxCrashed(f"copying {', '.join(files)} into the container was refused")

    def changes(self) -> list[dict[str, object]]:
        """What differs from the image, as the daemon records it (no program of the
        container's takes part): ``[{"Path": ..., "Kind": 0 changed, 1 added, 2 deleted}]``."""
        return self.client.api.diff(self.id) or []

    def read_files(self, paths: Sequence[str]) -> dict[str, str | None]:
        """The text of each file (None: absent or not a regular file), by archive calls."""
        return read_files(self.client, self.id, paths)

    def stop_processes(self) -> None:
        """Stops every process in the container (what a phase left running in the
        background), then starts its idle command again; the files stay as they are."""
        self.client.api.stop(self.id, timeout=0)
        self.client.api.start(self.id)

    def shell(
        self,
        script: str,
        timeout: float | None = None,
        environment: dict[str, str] | None = None,
        user: str = "",
    ) -> ExecResult:
        return self.exec(["/bin/bash", "-c", script], timeout, environment=environment, user=user)

    def remove(self) -> None:
        remove_container(self.client, self.id)


def read_files(
    client: docker.DockerClient, container: str, paths: Sequence[str]
) -> dict[str, str | None]:
    """Files of a container (started or not), read by the daemon."""
    found: dict[str, str | None] = {}
    for path in paths:
        found[path] = None
        try:
            stream, _ = client.api.get_archive(container, path)
        except NotFound:
            continue
        data = b"".join(stream)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = next(iter(tar.getmembers()), None)
            if member is not None and member.isfile():
                extracted = tar.extractfile(member)
                if extracted is not None:
                    found[path] = extracted.read().decode("utf-8", errors="replace")
    return found


def make_pristine(client: docker.DockerClient, image: str, name: str) -> str:
    """A container of ``image`` that is never started: its files are the image's, which
    nothing of a row's has touched (read with ``read_files``; removed with
    ``remove_container``)."""
    return client.api.create_container(image, command=["true"], name=name, network_disabled=True)[
        "Id"
    ]


def remove_container(client: docker.DockerClient, container: str) -> None:
    with contextlib.suppress(NotFound):
        client.api.remove_container(container, force=True)
