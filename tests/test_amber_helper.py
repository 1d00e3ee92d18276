"""The stand-in of Amber's helper the platform check runs inside the green's container
(tests/docker_support/amber_helper.py): as an unprivileged user it binds the
framework.docker socket itself, where that user may, and forwards it to the gateway's TCP
port before it starts the program; where it may not, the program never starts. A stand-in
that made the socket where Amber's cannot would hide the bug it is there to show."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

HELPER = Path(__file__).parent / "docker_support" / "amber_helper.py"
NOBODY = 65534


def as_user(argv: list[str]) -> list[str]:
    """``argv`` as a user other than root (root ignores directory modes)."""
    if os.geteuid() != 0:
        return argv
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]


@pytest.fixture
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="swg-helper-", dir="/tmp"))  # short socket paths
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def echo() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that answers each connection with what it read, upper-cased."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(conn.recv(1024).upper())

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def python() -> str:
    """An interpreter the unprivileged user can run (root's own may be under /root)."""
    if os.geteuid() != 0:
        return sys.executable
    found = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if found is None:
        pytest.skip("no system python3 for the unprivileged user")
    return found


def helper(mount: Path, port: int, program: str) -> subprocess.CompletedProcess[str]:
    argv = [python(), str(HELPER), "--docker-mount", str(mount)]
    argv += ["--gateway", f"127.0.0.1:{port}", "--", python(), "-c", program]
    return subprocess.run(as_user(argv), capture_output=True, text=True, timeout=60)


def test_a_directory_the_user_cannot_write_ends_it_before_the_program(
    folder: Path, echo: int
) -> None:
    locked = folder / "run"
    locked.mkdir(mode=0o755)
    if os.geteuid() != 0:
        locked.chmod(0o555)  # as the image's root-owned /var/run is to its user
    marker = folder / "started"
    done = helper(locked / "docker.sock", echo, f"open({str(marker)!r}, 'w')")
    assert done.returncode == 1
    assert "failed to bind docker socket" in done.stderr and "Permission" in done.stderr
    assert not marker.exists()


def test_the_users_own_directory_gets_a_socket_that_reaches_the_gateway(
    folder: Path, echo: int
) -> None:
    mine = folder / "swegreen"  # made by the helper, as create_dir_all does
    folder.chmod(0o777)
    program = (
        "import socket; s = socket.socket(socket.AF_UNIX); "
        f"s.connect({str(mine / 'docker.sock')!r}); s.sendall(b'ping'); print(s.recv(16))"
    )
    done = helper(mine / "docker.sock", echo, program)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "b'PING'"
