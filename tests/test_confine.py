"""Landlock isolation (confine.py), on this kernel: what confined code can and cannot reach,
and a whole evaluation in that mode by an engine that is not root and holds no capability,
as a green agent under Amber runs."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from swegreen.sandbox import confine, seccomp
from swegreen.sandbox.isolation import confine_argv, spec_pipe

pytestmark = pytest.mark.skipif(confine.abi() < 1, reason="no Landlock on this kernel")
ABI = confine.abi()
SYSTEM = ["/usr", "/etc", "/bin", "/lib", "/lib64"]
NO_CAPS = (
    ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--"]
    if os.geteuid() == 0 and shutil.which("setpriv")
    else []
)

PROBE = r"""
import os, socket, sys
lent = sys.argv[1]
def attempt(name, fn):
    try:
        fn()
        print(name, "ok")
    except OSError as exc:
        print(name, "refused", exc.errno)
attempt("read-ro", lambda: open(os.path.join(lent, "ro", "f")).read())
attempt("write-ro", lambda: open(os.path.join(lent, "ro", "g"), "w").write("x"))
attempt("write-rw", lambda: open(os.path.join(lent, "rw", "g"), "w").write("x"))
attempt("read-secret", lambda: open(os.path.join(lent, "secret")).read())
attempt("fifo", lambda: open(os.path.join(lent, "fifo"), "w").write("x\n"))
attempt("devnull", lambda: open("/dev/null", "w").write("x"))
attempt("environ", lambda: open(f"/proc/{sys.argv[2]}/environ", "rb").read())
for part in ("environ", "maps"):  # of a dumpable process of the same uid, outside the domain
    attempt(f"{part}-dumpable", lambda: open(f"/proc/{os.environ['DUMPABLE']}/{part}", "rb").read())
attempt("signal", lambda: os.kill(int(sys.argv[2]), 0))
for port in sys.argv[3:]:
    def connect(port=int(port)):
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    attempt(f"connect-{port}", connect)
# what any process of the host can read of its supervisor (/proc shows every command line)
with open(f"/proc/{os.getppid()}/cmdline", "rb") as fh:
    print("supervisor", fh.read().replace(b"\0", b" ").decode())
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
denied = libc.syscall(KEYCTL, 0, -3, 0) == -1 and ctypes.get_errno() == 1
print("keyctl", "refused" if denied else "ok")
"""
KEYCTL = {"x86_64": 250, "aarch64": 219}.get(platform.machine(), 250)


@contextlib.contextmanager
def listening(port: int) -> Iterator[int]:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen()
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                srv.accept()[0].close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        srv.close()


ENGINE = """
import sys, time
from swegreen.sandbox.isolation import shield_engine
assert shield_engine()
print("ready", flush=True)
time.sleep(600)
"""


def test_confined_code_reaches_only_what_it_is_lent(tmp_path: Path) -> None:
    """Files: only what is lent; the engine (a non-dumpable stand-in holding a secret in
    its environment, as engine.py makes itself when its tests share its uid): neither
    its environment nor a signal reaches it; TCP: no port below 1024."""
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "f").write_text("lent")
    (tmp_path / "rw").mkdir()
    (tmp_path / "secret").write_text("hidden tests")
    os.mkfifo(tmp_path / "fifo")
    reader = os.open(tmp_path / "fifo", os.O_RDONLY | os.O_NONBLOCK)
    python = Path(sys.base_prefix)  # the interpreter's own tree, read-only
    spec: dict[str, object] = {
        "ro": [*SYSTEM, str(python), str(tmp_path / "ro")],
        "rw": [str(tmp_path / "rw")],
        "fifo": [str(tmp_path / "fifo")],
        "dev": ["/dev/null", "/proc"],
        "seccomp": seccomp.keyring_filter().hex() if seccomp.supported() else None,
    }
    tcp = confine.tcp_ruleset()
    spec["tcp_fd"] = tcp
    spec_fd = spec_pipe(spec)
    low = 1000 + os.getpid() % 23  # below 1024: the internet's services' ports
    ports = [low] if os.geteuid() == 0 else []
    engine = subprocess.Popen(
        [sys.executable, "-c", ENGINE],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "SWEGREEN_SECRET": "CANARY"},
    )
    dumpable = subprocess.Popen(["sleep", "600"], env={"SWEGREEN_SECRET": "CANARY"})
    try:
        assert engine.stdout is not None and engine.stdout.readline() == "ready\n"
        with contextlib.ExitStack() as stack:
            opened = [stack.enter_context(listening(p)) for p in [*ports, 0]]
            out = subprocess.run(
                [
                    *NO_CAPS,  # as the engine's own uid runs its tests (no CAP_SYS_PTRACE)
                    *confine_argv(spec_fd),
                    os.path.realpath(sys.executable),  # not the virtualenv's: not lent
                    "-I",
                    "-c",
                    PROBE.replace("KEYCTL", str(KEYCTL)),
                    str(tmp_path),
                    str(engine.pid),
                    *map(str, opened),
                ],
                capture_output=True,
                text=True,
                timeout=120,
                env={"PATH": "/usr/bin:/bin", "CANARY": "x", "DUMPABLE": str(dumpable.pid)},
                pass_fds=(spec_fd, tcp) if tcp is not None else (spec_fd,),
            )
    finally:
        engine.kill()
        engine.wait()
        dumpable.kill()
        dumpable.wait()
        os.close(spec_fd)
        if tcp is not None:
            os.close(tcp)
    fifo = os.read(reader, 100)
    os.close(reader)
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert out.returncode == 0, out.stdout + out.stderr
    assert lines["read-ro"] == "ok" and lines["write-rw"] == "ok", lines
    assert lines["write-ro"].startswith("refused") and lines["read-secret"].startswith("refused")
    assert lines["fifo"] == "ok" and fifo == b"x\n"
    assert lines["devnull"] == "ok"
    assert lines["environ"].startswith("refused")
    # Landlock's own rule (a domain cannot ptrace-read out of itself) refuses it too, on
    # the kernels measured (6.18): the non-dumpable engine is the second lock
    assert lines["environ-dumpable"].startswith("refused"), lines
    assert lines["maps-dumpable"].startswith("refused"), lines
    if ABI >= 6:
        assert lines["signal"].startswith("refused")
    if ABI >= 4:
        assert lines[f"connect-{opened[-1]}"] == "ok"  # a test's own server, a high port
        for port in ports:
            assert lines[f"connect-{port}"].startswith("refused"), lines
    if seccomp.supported():
        assert lines["keyctl"] == "refused"
    assert not (tmp_path / "ro" / "g").exists()
    # the spec (every lent path) came through a pipe, not the supervisor's command line
    assert "confine.py --spec-fd=" in lines["supervisor"], lines["supervisor"]
    assert str(tmp_path) not in lines["supervisor"] and "seccomp" not in lines["supervisor"]


def test_a_command_that_cannot_be_confined_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    spec_fd = spec_pipe({"ro": SYSTEM, "seccomp": "00"})  # not a program: the kernel refuses it
    try:
        out = subprocess.run(
            [*confine_argv(spec_fd), "/bin/sh", "-c", f"touch {marker}"],
            capture_output=True,
            text=True,
            timeout=60,
            pass_fds=(spec_fd,),
        )
    finally:
        os.close(spec_fd)
    assert out.returncode == 126 and "swegreen confine:" in out.stderr
    assert not marker.exists()


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) drops caps")
def test_an_engine_without_privileges_grades_in_landlock_mode(tmp_path: Path, sample) -> None:
    """As under Amber: an engine with no capability and no new privileges (here its uid
    stays, so that it can still reach this checkout's interpreter; Amber keeps the image's
    user) grades the gold rows of two repositories, and the rows say which isolation
    graded them."""
    work = tmp_path
    ids = "sample__calculator-1,sample__textkit-1"
    out = subprocess.run(
        [
            "setpriv", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
            sys.executable, "-m", "swegreen", "run", "--dataset", "swegreen:sample",
            "--patches", "gold", "--instance-ids", ids, "--isolation", "landlock",
            "--cache-dir", str(work / "cache"), "--output-dir", str(work / "out"),
            "--run-id", "landlock", "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HOME": str(work)},
        cwd=work,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = [
        json.loads(line)
        for line in (work / "out" / "landlock" / "instances.jsonl").read_text().splitlines()
    ]
    statuses = {r["instance_id"]: r["status"] for r in rows}
    assert statuses == dict.fromkeys(ids.split(","), "resolved")
    assert {r.get("isolation") for r in rows} == {"landlock"}


def test_without_landlock_the_mode_refuses_to_start_and_says_what_to_grant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from swegreen.core.errors import SandboxUnavailable
    from swegreen.sandbox.isolation import Isolation

    monkeypatch.setattr(confine, "abi", lambda libc=None: 0)  # a kernel before 5.13
    with pytest.raises(SandboxUnavailable, match=r"Linux 5\.13 or later.*lsm="):
        Isolation.probe("landlock")
