"""A package index as it was on a date: every pip that builds or installs an environment
(build isolation included) sees only files uploaded before the recipe's date.

``uv pip compile --exclude-newer`` freezes what a recipe installs, but pip builds sdists
and the project itself in isolated environments whose build requirements (setuptools_scm,
extension-helpers, packaging, wheel) it resolves on its own, from today's index: an old
astropy then builds against 2026's helpers. pip has no date option, but every pip it
starts inherits ``PIP_INDEX_URL``. This module is that index: a small HTTP server on the
loopback that answers the simple API (PEP 503 HTML, which every pip reads) from the
upstream index's JSON API (PEP 691), keeping the files whose PEP 700 ``upload-time`` is
before the date in the URL (``http://127.0.0.1:PORT/<YYYY-MM-DD>/<exempt>/<project>/``;
``<exempt>`` lists the recipe's packages resolved past the date, or ``-``).

It runs as its own process (``python -m swegreen.environments.dated_index``), so a build
that hangs on it never blocks the engine's event loop, and ``DatedIndex`` starts it on first use and
stops it with the engine.

**Recording** (``--record DIR``, for ``offline_installs``): the pages then link every file
through the index itself (``/files/<sha256>/<filename>``), which fetches it from upstream,
checks its hash and keeps it in DIR, a flat wheelhouse. An install made through a
recording index leaves in DIR every file it (and its build isolation) downloaded, so the
same install later runs with ``PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR`` and no network at all.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

DEFAULT_UPSTREAM = "https://pypi.org/simple"
JSON_API = "application/vnd.pypi.simple.v1+json"
_PATH = re.compile(r"^/(\d{4}-\d{2}-\d{2})/([^/]+)/([A-Za-z0-9._-]+)/?$")
_FILE = re.compile(r"^/files/([0-9a-f]{64})/([A-Za-z0-9._+!-]+)$")
NO_EXEMPTIONS = "-"
# The day of a recipe without one: every file counts (a recording index still needs a day).
NO_CUTOFF = "9999-12-31"


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def cutoff_of(day: str) -> datetime:
    """The first instant after ``day`` (files uploaded on the day itself count, as with
    uv's ``--exclude-newer YYYY-MM-DD``)."""
    return datetime.fromisoformat(day).replace(tzinfo=UTC).replace(hour=23, minute=59, second=59)


def uploaded_before(file: dict, cutoff: datetime) -> bool:
    stamp = file.get("upload-time")
    if not isinstance(stamp, str):
        return False  # an index without PEP 700 times cannot prove a file is old enough
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) <= cutoff


def render(project: str, files: list[dict]) -> str:
    """PEP 503 HTML for ``files`` (PEP 691 entries), with what pip reads of each: hash,
    Requires-Python and yanked."""
    links = []
    for f in files:
        url = f["url"]
        hashes = f.get("hashes") or {}
        if "sha256" in hashes and "#" not in url:
            url += f"#sha256={hashes['sha256']}"
        attrs = [f'href="{html.escape(url)}"']
        if f.get("requires-python"):
            attrs.append(f'data-requires-python="{html.escape(f["requires-python"])}"')
        yanked = f.get("yanked")
        if yanked:
            reason = yanked if isinstance(yanked, str) else ""
            attrs.append(f'data-yanked="{html.escape(reason)}"')
        links.append(f"<a {' '.join(attrs)}>{html.escape(f['filename'])}</a><br/>")
    body = "\n".join(links)
    return (
        f"<!DOCTYPE html>\n<html><head><title>Links for {html.escape(project)}</title></head>"
        f"<body><h1>Links for {html.escape(project)}</h1>\n{body}\n</body></html>\n"
    )


class _Handler(BaseHTTPRequestHandler):
    upstream = DEFAULT_UPSTREAM
    cache: ClassVar[dict[str, list[dict]]] = {}
    lock = threading.Lock()
    record: Path | None = None  # the wheelhouse a recording index fills
    origins: ClassVar[dict[str, str]] = {}  # sha256 -> upstream URL, of files it listed

    def log_message(self, format: str, *args: object) -> None:
        pass  # pip's own log says what it fetched

    def do_GET(self) -> None:
        if self.record is not None and (f := _FILE.match(self.path.split("?", 1)[0])):
            self._recorded_file(*f.groups())
            return
        m = _PATH.match(self.path.split("?", 1)[0])
        if not m:
            self._answer(404, "text/plain", "ask /<YYYY-MM-DD>/<exempt or ->/<project>/\n")
            return
        day, exempt, project = m.groups()
        try:
            cutoff = cutoff_of(day)
            files = self._files(normalize(project))
        except urllib.error.HTTPError as exc:
            self._answer(exc.code, "text/plain", f"upstream: {exc}\n")
            return
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self._answer(502, "text/plain", f"upstream index unreachable: {exc}\n")
            return
        if normalize(project) in {normalize(n) for n in exempt.split(",")}:
            kept = files
        else:
            kept = [f for f in files if uploaded_before(f, cutoff)]
        if self.path.endswith("?files"):  # the engine's own question (source_builds.py)
            body = {"meta": {"api-version": "1.0"}, "name": project, "files": kept}
            self._answer(200, JSON_API, json.dumps(body))
            return
        if self.record is not None:
            kept = [self._through_here(f) for f in kept]
        self._answer(200, "text/html; charset=utf-8", render(project, kept))

    def _through_here(self, file: dict) -> dict:
        """``file`` linked through this index, which records it (a file without a sha256
        cannot be checked, so it is linked where it is, and not recorded)."""
        digest = (file.get("hashes") or {}).get("sha256")
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            return file
        with self.lock:
            self.origins[digest] = file["url"]
        return {**file, "url": f"/files/{digest}/{file['filename']}"}

    def _recorded_file(self, digest: str, filename: str) -> None:
        assert self.record is not None
        target = self.record / filename
        with self.lock:
            origin = self.origins.get(digest)
        if origin is None:
            self._answer(404, "text/plain", "no page of this index listed that file\n")
            return
        try:
            if not (target.is_file() and _sha256(target) == digest):
                _download(origin, target, digest)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self._answer(502, "text/plain", f"upstream file: {exc}\n")
            return
        size = target.stat().st_size
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        with target.open("rb") as fh:
            shutil.copyfileobj(fh, self.wfile)

    def _files(self, project: str) -> list[dict]:
        with self.lock:
            if project in self.cache:
                return self.cache[project]
        request = urllib.request.Request(
            f"{self.upstream.rstrip('/')}/{project}/", headers={"Accept": JSON_API}
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            if JSON_API not in answer.headers.get("Content-Type", ""):
                raise ValueError(
                    f"{self.upstream} does not answer the JSON simple API (PEP 691), so "
                    "files cannot be told apart by date; point PIP_INDEX_URL at one that does"
                )
            files = json.load(answer).get("files", [])
        with self.lock:
            self.cache[project] = files
        return files

    def _answer(self, status: int, kind: str, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _download(url: str, target: Path, digest: str) -> None:
    """``url`` to ``target``, kept only if its sha256 is ``digest``."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        with urllib.request.urlopen(url, timeout=300) as answer, partial.open("wb") as out:
            shutil.copyfileobj(answer, out)
        if _sha256(partial) != digest:
            raise ValueError(f"{url} does not have the sha256 its index gave ({digest})")
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


def serve(upstream: str, port: int = 0, record: Path | None = None) -> ThreadingHTTPServer:
    attrs = {"upstream": upstream, "cache": {}, "record": record, "origins": {}}
    handler = type("Handler", (_Handler,), attrs)
    return ThreadingHTTPServer(("127.0.0.1", port), handler)


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
                    "swegreen.environments.dated_index",
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


def _exit_on_eof() -> None:
    sys.stdin.buffer.read()
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", default=DEFAULT_UPSTREAM)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", type=Path)
    parser.add_argument("--parent-pipe", action="store_true", help="exit when stdin closes")
    parser.add_argument("--record", type=Path, help="keep every file installed in this folder")
    args = parser.parse_args(argv)
    if args.record is not None:
        args.record.mkdir(parents=True, exist_ok=True)
    server = serve(args.upstream, args.port, args.record)
    port = server.server_address[1]
    print(port, flush=True)  # readiness: the parent reads this line
    if args.port_file:
        args.port_file.write_text(str(port))
    if args.parent_pipe:  # the parent holds our stdin: when it dies, so do we
        threading.Thread(target=_exit_on_eof, daemon=True).start()
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
