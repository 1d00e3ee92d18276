"""A stand-in of Amber's helper for a ``framework.docker`` mount (RDI-Foundation/amber
runtime/helper, ``start_docker_mount_proxies``), run inside the component's container as
the image's own user, the way Amber runs it: it makes the mount's directory
(``create_dir_all``), removes a file already at the path, binds the socket there itself,
forwards every connection to the Docker gateway over TCP, and only then starts the program.
Any of those failing ends it before the program starts, with Amber's words ("failed to bind
docker socket ..."): no agent card is ever served, as on the platform.

    python amber_helper.py --docker-mount /run/swegreen/docker.sock \
        --gateway 127.0.0.1:PORT -- PROGRAM [ARGS...]

Standalone (stdlib only): scripts/platform_check.py mounts it read-only into the green's
container and runs it with the image's interpreter.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


def _forward(sock: socket.socket, host: str, port: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        for w in (writer, up_writer):
            with contextlib.suppress(OSError):
                w.close()

    async def serve() -> None:
        server = await asyncio.start_unix_server(handle, sock=sock)
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docker-mount", required=True, help="the mount's path")
    parser.add_argument("--gateway", required=True, help="host:port of the Docker gateway")
    parser.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    path = args.docker_mount
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.lexists(path):
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        sock.listen(128)
    except OSError as exc:
        print(f"amber-helper: failed to bind docker socket {path}: {exc!r}", file=sys.stderr)
        return 1
    host, _, port = args.gateway.rpartition(":")
    threading.Thread(target=_forward, args=(sock, host, int(port)), daemon=True).start()
    child = subprocess.Popen(program)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
