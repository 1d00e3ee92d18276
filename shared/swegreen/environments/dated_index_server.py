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

It runs as its own process (``python -m swegreen.environments.dated_index_server``), so a
build that hangs on it never blocks the engine's event loop; ``DatedIndex``
(dated_index.py) starts it on first use and stops it with the engine.

**Recording** (``--record DIR``, for ``offline_installs``): the pages then link every file
through the index itself (``/files/<sha256>/<filename>``), which fetches it from upstream,
checks its hash and keeps it in DIR, a flat wheelhouse. An install made through a
recording index leaves in DIR every file it (and its build isolation) downloaded, so the
same install later runs with ``PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR`` and no network at all.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import html
import json
import os
import re
import shutil
import sys
import threading
import urllib.error
import urllib.request
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

from swegreen.environments.dated_index import DEFAULT_UPSTREAM, normalize

JSON_API = "application/vnd.pypi.simple.v1+json"
_PATH = re.compile(r"^/(\d{4}-\d{2}-\d{2})/([^/]+)/([A-Za-z0-9._-]+)/?$")
_FILE = re.compile(r"^/files/([0-9a-f]{64})/([A-Za-z0-9._+!-]+)$")


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
