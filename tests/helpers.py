"""Small builders the tests share (fixtures live in conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import http.server
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.types import ASGIApp

GIT_ID = ["-c", "user.name=t", "-c", "user.email=t@t"]


def raw_row(i: int, repo: str = "o/r", **extra: object) -> dict[str, object]:
    """A minimal SWE-bench row, in the hub's format."""
    row: dict[str, object] = {
        "instance_id": f"{repo.replace('/', '__')}-{i}",
        "repo": repo,
        "base_commit": "c" * 40,
        "patch": "diff",
        "test_patch": "diff",
        "problem_statement": "p",
        "version": "1.0",
        "FAIL_TO_PASS": json.dumps([f"t{i}"]),
        "PASS_TO_PASS": "[]",
    }
    row.update(extra)
    return row


def git(path: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(path), *GIT_ID, *args], check=check, capture_output=True, text=True
    )


def make_repo(path: Path, files: dict[str, str]) -> str:
    """A real git repository with one commit of ``files``; returns the commit id."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    commit(path, files, "init")
    return git(path, "rev-parse", "HEAD").stdout.strip()


def commit(path: Path, files: dict[str, str], message: str) -> str:
    """Commit ``files``, dated one day after the previous commit (dates decide tag pruning)."""
    for name, text in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git(path, "add", "-A")
    previous = git(path, "log", "-1", "--format=%ct", check=False).stdout.strip()
    when = f"@{int(previous) + 86400 if previous else 1700000000} +0000"
    subprocess.run(
        ["git", "-C", str(path), *GIT_ID, "commit", "-q", "-m", message],
        check=True,
        env={**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when},
    )
    return git(path, "rev-parse", "HEAD").stdout.strip()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path


def start(
    args: list[str],
    cache: Path,
    out: Path,
    name: str,
    env: dict[str, str] | None = None,
    advertise: str | None = None,
) -> Server:
    """A ``swegreen`` server on a free port of 127.0.0.1, once its card answers; with
    ``advertise``, its card names that host instead (tests/private_network.py)."""
    port = free_port()
    if advertise is not None:
        args = [*args, "--card-url", f"http://{advertise}:{port}/"]
    log = out / f"{name}.log"
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "swegreen",
            *args,
            "--port",
            str(port),
            "--cache-dir",
            str(cache),
            "--output-dir",
            str(out / name),
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    url = f"http://127.0.0.1:{port}/"
    wait_for_card(url, proc, log)
    return Server(url, proc, log)


def wait_for_card(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until the server at ``url`` serves its agent card (readiness, not a fixed sleep);
    a server that exits first, or never answers in a minute, fails with its log."""
    for _ in range(600):
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + ".well-known/agent-card.json", timeout=1).status_code == 200:
                return
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{url} did not start:\n{log.read_text()[-3000:]}")


def stop(servers: Iterable[Server]) -> None:
    """Terminate servers started with ``start`` and wait (bounded) for each to exit."""
    servers = list(servers)
    for server in servers:
        server.proc.terminate()
    for server in servers:
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.proc.wait(timeout=10)


def wheel_bytes(
    name: str, version: str, files: dict[str, str], requires: tuple[str, ...] = ()
) -> bytes:
    """A pure-Python wheel holding ``files`` (path -> text) that requires ``requires``."""
    data = io.BytesIO()
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(data, "w") as z:
        for arcname, text in files.items():
            z.writestr(arcname, text)
        metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
        z.writestr(f"{info}/METADATA", metadata)
        z.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr(f"{info}/RECORD", "")
    return data.getvalue()


@contextlib.contextmanager
def json_index(projects: dict[str, list[tuple[str, str, bytes]]]) -> Iterator[str]:
    """A package index on 127.0.0.1 that speaks only the JSON simple API (PEP 691, with
    PEP 700 upload times), serving ``projects`` (name -> [(filename, upload time, bytes)]);
    yields its ``/simple`` URL."""
    blobs = {f: b for files in projects.values() for f, _, b in files}

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            port = self.server.server_address[1]
            parts = self.path.strip("/").split("/")
            if len(parts) == 2 and parts[0] == "simple" and parts[1] in projects:
                files = [
                    {
                        "filename": f,
                        "url": f"http://127.0.0.1:{port}/files/{f}",
                        "hashes": {"sha256": hashlib.sha256(b).hexdigest()},
                        "upload-time": when,
                    }
                    for f, when, b in projects[parts[1]]
                ]
                meta = {"api-version": "1.1"}
                body = json.dumps({"meta": meta, "name": parts[1], "files": files}).encode()
                kind = "application/vnd.pypi.simple.v1+json"
            elif len(parts) == 2 and parts[0] == "files" and parts[1] in blobs:
                body, kind = blobs[parts[1]], "application/octet-stream"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with http_server(Handler) as url:
        yield f"{url}/simple"


@contextlib.contextmanager
def http_server(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on 127.0.0.1 (bound before this yields: ready to accept); yields
    its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@contextlib.contextmanager
def serve_directory(root: Path) -> Iterator[str]:
    """The files under ``root`` over HTTP on 127.0.0.1 (a conda channel, a mirror)."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args: object) -> None:
            pass

    with http_server(Quiet) as url:
        yield url


@contextlib.asynccontextmanager
async def serving(build: Callable[[str], ASGIApp]) -> AsyncIterator[str]:
    """An ASGI app served by uvicorn on 127.0.0.1 inside this event loop; yields its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    config = uvicorn.Config(
        build(url), log_level="warning", lifespan="off", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield url
    finally:
        server.should_exit = True
        await task
        sock.close()
