"""A participant only the green agent can reach, as on AgentBeats, where the participants
live in the runner's network and the green agent reaches them through the platform's
proxy: the participant is named by a host that resolves nowhere (``.invalid``, RFC 6761)
and served through an HTTP forward proxy that only the green agent's environment names
(``HTTP_PROXY``). Any other process (the emulated pipeline's Lambdas) that is given the
URL cannot even resolve it."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

PRIVATE_HOST = "purple.invalid"


@dataclass
class ForwardProxy:
    """Forwards requests for ``PRIVATE_HOST:port`` to ``127.0.0.1:port``; refuses others.
    Each request gets its own upstream connection (``Connection: close``), so bytes are
    piped as they come (a streamed A2A answer included)."""

    url: str
    forwarded: list[str] = field(default_factory=list)  # "METHOD host:port/path"

    def env(self) -> dict[str, str]:
        """What the green agent is started with: the proxy for participants, not for the
        API on 127.0.0.1."""
        return {
            "HTTP_PROXY": self.url,
            "http_proxy": self.url,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }


@contextmanager
def forward_proxy() -> Iterator[ForwardProxy]:
    record: list[str] = []

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = self.request.recv(65536)
                if not chunk:
                    return
                head += chunk
            head, _, rest = head.partition(b"\r\n\r\n")
            line, *headers = head.decode("latin-1").split("\r\n")
            method, target, version = line.split(" ", 2)
            parts = urlsplit(target)
            if parts.hostname != PRIVATE_HOST or parts.port is None:
                self.request.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                return
            record.append(f"{method} {parts.hostname}:{parts.port}{parts.path}")
            kept = [
                h
                for h in headers
                if h.split(":", 1)[0].strip().lower()
                not in ("connection", "proxy-connection", "keep-alive")
            ]
            path = parts.path or "/"
            if parts.query:
                path += "?" + parts.query
            upstream = socket.create_connection(("127.0.0.1", parts.port))
            with upstream:
                request = "\r\n".join([f"{method} {path} {version}", *kept, "Connection: close"])
                upstream.sendall(request.encode("latin-1") + b"\r\n\r\n" + rest)
                done = threading.Event()

                def upload() -> None:  # the rest of the body, as the client sends it
                    try:
                        while not done.is_set():
                            data = self.request.recv(65536)
                            if not data:
                                break
                            upstream.sendall(data)
                    except OSError:
                        pass

                threading.Thread(target=upload, daemon=True).start()
                while data := upstream.recv(65536):
                    self.request.sendall(data)
                done.set()

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    server = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield ForwardProxy(f"http://127.0.0.1:{server.server_address[1]}", record)
    finally:
        server.shutdown()
        server.server_close()
