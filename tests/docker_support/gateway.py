"""A stand-in of Amber's Docker gateway (runtime/docker-gateway in RDI-Foundation/amber):
a unix-socket proxy in front of a Docker engine that lets through only what the platform's
gateway lets a green agent do, so a call the platform refuses fails here too.

Allowed: ping, version, info; image pull (``POST /images/create?fromImage=``, never
``fromSrc``) and image inspect; container create (an owner label added); any call on a
container made through this gateway and on the execs of those containers (exec, start,
stop, wait, logs, archive, remove, ...); container listing filtered to its own.
Refused (403, as the gateway answers): build, image list, load, import, remove, prune,
another's containers, network connect/disconnect, everything else.

Run it by hand: ``python -m tests.docker_support.gateway /tmp/gw.sock`` (upstream: the default
socket), then ``DOCKER_HOST=unix:///tmp/gw.sock``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

OWNER_LABEL = "swegreen.gateway.owner"
_VERSION = re.compile(r"^/v\d+(\.\d+)?(?=/)")


@dataclass
class Gateway:
    upstream: str
    listen: str
    owner: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    containers: set[str] = field(default_factory=set)
    execs: set[str] = field(default_factory=set)
    refused: list[str] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)

    # -- policy ----------------------------------------------------------------------
    def _own(self, ref: str) -> bool:
        return any(ref == c or (len(ref) >= 12 and c.startswith(ref)) for c in self.containers)

    def decide(self, method: str, path: str, query: str) -> str | None:
        """None: allowed; else why refused."""
        segs = [s for s in _VERSION.sub("", path).split("/") if s]
        params = dict(parse_qsl(query))
        if segs in (["_ping"], ["version"], ["info"]) and method in ("GET", "HEAD"):
            return None
        if method == "GET" and len(segs) >= 3 and segs[0] == "images" and segs[-1] == "json":
            return None
        if method == "POST" and segs == ["images", "create"]:
            if "fromImage" in params and "fromSrc" not in params:
                return None
            return "only image pull (fromImage) is allowed; build/import is blocked"
        if segs == ["containers", "json"] and method == "GET":
            return None  # filtered to own containers in ``rewrite``
        if segs == ["containers", "create"] and method == "POST":
            return None
        if len(segs) >= 2 and segs[0] == "containers" and segs[1] not in ("json", "prune"):
            return None if self._own(segs[1]) else f"container {segs[1]} is not this caller's"
        if len(segs) >= 2 and segs[0] == "exec":
            return None if segs[1] in self.execs else f"exec {segs[1]} is not this caller's"
        return f"endpoint {method} {path} is not allowed by gateway policy"

    def rewrite_query(self, path: str, query: str) -> str:
        segs = [s for s in _VERSION.sub("", path).split("/") if s]
        if segs != ["containers", "json"]:
            return query
        params = dict(parse_qsl(query))
        filters = json.loads(params.get("filters") or "{}")
        filters.setdefault("label", []).append(f"{OWNER_LABEL}={self.owner}")
        params["filters"] = json.dumps(filters)
        return urlencode(params)

    def rewrite_create(self, body: bytes) -> bytes | str:
        data = json.loads(body or b"{}")
        host = data.get("HostConfig") or {}
        mode = str(host.get("NetworkMode") or "")
        if mode.startswith("container:") and not self._own(mode.split(":", 1)[1]):
            return "network_mode refers to another caller's container"
        for ref in host.get("VolumesFrom") or []:
            if not self._own(ref.split(":", 1)[0]):
                return "volumes_from refers to another caller's container"
        data.setdefault("Labels", {})
        data["Labels"] = {**(data["Labels"] or {}), OWNER_LABEL: self.owner}
        return json.dumps(data).encode()

    # -- the proxy -------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # a client gone, or the gateway stopping: the connection ends quietly
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ", 2)
        headers = [tuple(h.split(":", 1)) for h in lines[1:] if h]
        names = {k.strip().lower(): v.strip() for k, v in headers}
        body = await _read_body(reader, names)
        url = urlsplit(target)
        why = self.decide(method, url.path, url.query)
        call = f"{method} {_VERSION.sub('', url.path)}"
        segs = [s for s in _VERSION.sub("", url.path).split("/") if s]
        if why is None and segs == ["containers", "create"]:
            rewritten = self.rewrite_create(body)
            if isinstance(rewritten, str):
                why = rewritten
            else:
                body = rewritten
        if why is not None:
            self.refused.append(call)
            message = json.dumps({"message": why}).encode()
            writer.write(
                b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(message)}\r\nConnection: close\r\n\r\n".encode()
                + message
            )
            await writer.drain()
            return False
        self.allowed.append(call)
        query = self.rewrite_query(url.path, url.query)
        upgrade = "upgrade" in names.get("connection", "").lower()
        keep = [
            (k, v)
            for k, v in headers
            if k.strip().lower() not in ("content-length", "transfer-encoding", "connection")
        ]
        keep.append(("Content-Length", f" {len(body)}"))
        keep.append(("Connection", " Upgrade" if upgrade else " close"))
        start = f"{method} {url.path}{'?' + query if query else ''} {version}\r\n"
        up_reader, up_writer = await asyncio.open_unix_connection(self.upstream)
        up_writer.write(
            start.encode() + "".join(f"{k}:{v}\r\n" for k, v in keep).encode() + b"\r\n" + body
        )
        await up_writer.drain()
        records = segs == ["containers", "create"] or (
            len(segs) == 3 and segs[0] == "containers" and segs[2] == "exec"
        )
        if records:
            response = await up_reader.read()
            self._record(segs, response)
            writer.write(response)
            await writer.drain()
        elif upgrade:
            await asyncio.gather(_pipe(up_reader, writer), _pipe(reader, up_writer))
        else:
            await _pipe(up_reader, writer)
        up_writer.close()
        return False  # the response said Connection: close

    def _record(self, segs: list[str], response: bytes) -> None:
        head, _, payload = response.partition(b"\r\n\r\n")
        if b"chunked" in head.lower():
            payload = _unchunk(payload)
        with contextlib.suppress(ValueError):
            ident = json.loads(payload).get("Id")
            if ident and segs[0] == "containers" and segs[1] == "create":
                self.containers.add(ident)
            elif ident:
                self.execs.add(ident)


async def _read_body(reader: asyncio.StreamReader, names: dict[str, str]) -> bytes:
    if "content-length" in names:
        return await reader.readexactly(int(names["content-length"]))
    if "chunked" in names.get("transfer-encoding", "").lower():
        out = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                return out
            out += chunk[:-2]
    return b""


def _unchunk(payload: bytes) -> bytes:
    out, rest = b"", payload
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out, rest = out + rest[:size], rest[size + 2 :]
    return out


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    with contextlib.suppress(OSError, RuntimeError):
        if writer.can_write_eof():
            writer.write_eof()


@contextlib.contextmanager
def running(upstream: str, listen: str) -> Iterator[Gateway]:
    """The gateway on ``listen`` in a thread of its own, until the block ends: a socket
    path, or ``tcp://127.0.0.1:<port>`` as Amber's gateway listens for the helper of each
    component (port 0: any free one; ``gateway.listen`` then says which)."""
    gateway = Gateway(upstream.removeprefix("unix://"), listen)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    server: list[asyncio.base_events.Server] = []

    async def serve() -> None:
        if listen.startswith("tcp://"):
            host, _, port = listen.removeprefix("tcp://").rpartition(":")
            server.append(await asyncio.start_server(gateway._handle, host, int(port)))
            bound = server[0].sockets[0].getsockname()
            gateway.listen = f"tcp://{bound[0]}:{bound[1]}"
        else:
            Path(listen).unlink(missing_ok=True)
            server.append(await asyncio.start_unix_server(gateway._handle, path=listen))
        ready.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(serve(), loop).result(timeout=30)
    ready.wait()
    try:
        yield gateway
    finally:

        async def stop() -> None:
            server[0].close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
        if not listen.startswith("tcp://"):
            Path(listen).unlink(missing_ok=True)


if __name__ == "__main__":
    listen = sys.argv[1] if len(sys.argv) > 1 else "/tmp/swegreen-docker-gateway.sock"
    upstream = sys.argv[2] if len(sys.argv) > 2 else "/var/run/docker.sock"
    with running(upstream, listen) as gw:
        print(f"DOCKER_HOST=unix://{listen}  (upstream {upstream}; Ctrl-C stops)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
