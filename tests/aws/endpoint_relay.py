"""The VPC endpoints of an emulated task in isolated subnets (emulator.py).

The task runs in a network namespace of its own (bubblewrap's ``--unshare-net``): only
its loopback exists, so nothing on the host or beyond is reachable. This relay is what
its subnets' endpoints are: inside the namespace it listens on ``127.0.0.1:<port>`` (the
emulated AWS's port, so pre-signed URLs work unchanged) and carries each connection over
a Unix socket (a file, which the namespace shares with the host) to the emulator, which
passes it to the emulated AWS. Then it runs the task's command and exits with its status.

    python endpoint_relay.py SOCKET PORT -- COMMAND...
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
from collections.abc import Callable


def pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy until ``source`` ends, then end ``sink``'s writing side."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def splice(a: socket.socket, b: socket.socket) -> None:
    """Both directions of one connection, each in a thread; closes both at the end."""
    other = threading.Thread(target=pipe, args=(b, a), daemon=True)
    other.start()
    pipe(a, b)
    other.join()
    a.close()
    b.close()


def serve(listener: socket.socket, connect: Callable[[], socket.socket]) -> None:
    """Accept forever; each connection spliced to a fresh one from ``connect()``."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        try:
            upstream = connect()
        except OSError:
            client.close()
            continue
        threading.Thread(target=splice, args=(client, upstream), daemon=True).start()


def unix_to_tcp(path: str, port: int) -> socket.socket:
    """The host side: a Unix socket at ``path`` whose connections reach 127.0.0.1:port.
    Returns the listener (close it to stop)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    threading.Thread(
        target=serve,
        args=(listener, lambda: socket.create_connection(("127.0.0.1", port))),
        daemon=True,
    ).start()
    return listener


def main(argv: list[str]) -> int:
    path, port, dash, *command = argv
    assert dash == "--" and command, __doc__
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(port)))  # listening before the command starts
    listener.listen(64)

    def connect() -> socket.socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        return conn

    threading.Thread(target=serve, args=(listener, connect), daemon=True).start()
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
