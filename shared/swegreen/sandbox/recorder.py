"""A second witness for the test log: what pytest itself recorded, against what was printed.

The official parsers read the test command's output, and a patch's code runs inside that
process: it can print ``PASSED`` lines for tests that failed and force exit code 0. The
pytest recorder (``data/swegreen_pytest_recorder.py``) writes each test's outcome into a
FIFO that the engine reads from outside the sandbox, so the record cannot be rewritten or
truncated once written. ``contradictions`` compares the two; any contradiction makes the
row an ``error`` with reason ``log_tampering``. Only positive contradictions count (a
test pytest saw fail that the log calls passed; a failing session that exited 0; a
session that never finished yet exited 0): a runner the recorder does not cover, or a
test id the parser truncated, never flags an honest run.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

MODULE = "_swegreen_recorder"
RUNNER_MODULE = "_swegreen_runner"
INSIDE_PATH = "/run/swegreen/record"
# set for the base commit's census (``census_changes``): the recorder ends the session there
CENSUS_VARIABLE = "SWEGREEN_CENSUS"
PLUGIN_DIR_INSIDE = "/run/swegreen/plugins"
# Log parsers whose test command is not pytest but a runner of its own, and what records
# it (data/swegreen_runner_recorder.py): django's runtests.py (unittest underneath) and
# sympy's bin/test.
RUNNERS = {"parse_log_django": "unittest", "parse_log_sympy": "sympy"}
NOT_PYTEST = frozenset(RUNNERS)
FAILED_CALL = frozenset({"failed", "error", "tampered"})
PASSED_IN_LOG = frozenset({"PASSED", "XFAIL"})
FAILING_SESSION = frozenset({1, 2, 3, 4})  # tests failed, interrupted, internal/usage error


def covers(log_parser: str, test_cmd: str) -> bool:
    return log_parser not in NOT_PYTEST and ("pytest" in test_cmd or "tox" in test_cmd)


def runner_kind(log_parser: str) -> str | None:
    """The runner recorder's kind for a recipe's log parser (None: pytest, or nothing)."""
    return RUNNERS.get(log_parser)


def _data(name: str) -> str:
    return (resources.files("swegreen") / "data" / name).read_text()


CHANNEL = "swegreen_record_channel"  # the shared part of both recorders (data/)


@dataclass(frozen=True)
class RecorderFiles:
    """A recorder as written for one run: its module name and its files (name -> text)."""

    module: str
    files: dict[str, str]


def recorder_files(source: str, prefix: str) -> RecorderFiles:
    """The recorder ``source`` (a file of data/) and the record channel it imports, each
    under a module name of the run's own: nothing planted beforehand can shadow either,
    since nothing could know the names."""
    token = secrets.token_hex(8)
    module, channel = f"{prefix}_{token}", f"_swegreen_channel_{token}"
    text = _data(source).replace(f"from {CHANNEL} import", f"from {channel} import", 1)
    return RecorderFiles(module, {f"{module}.py": text, f"{channel}.py": _data(f"{CHANNEL}.py")})


def pytest_recorder() -> RecorderFiles:
    return recorder_files("swegreen_pytest_recorder.py", MODULE)


def pytest_recorder_digest() -> str:
    """What identifies the pytest recorder's code (its census is kept under it)."""
    texts = (_data("swegreen_pytest_recorder.py"), _data(f"{CHANNEL}.py"))
    return hashlib.sha256("\0".join(texts).encode()).hexdigest()[:16]


def _write(directory: Path, files: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)
    for name, text in files.items():
        target = directory / name
        target.write_text(text)
        target.chmod(0o644)


@dataclass(frozen=True)
class RunnerRecorder:
    """The runner recorder as written for one run: its module name (for
    ``SWEGREEN_RUNNER_MODULE``), its spec file's name and every file of the plugin
    directory (name -> text: the recorder, its channel, the spec, the ``sitecustomize``)."""

    module: str
    spec: str
    files: dict[str, str]

    def environ(self, plugin_dir: str) -> dict[str, str]:
        """What the test command's environment gets (``plugin_dir``: the directory as the
        test command sees it, already on its PYTHONPATH)."""
        return {
            "SWEGREEN_RUNNER_MODULE": self.module,
            "SWEGREEN_RUNNER_SPEC": f"{plugin_dir}/{self.spec}",
        }


def runner_recorder(kind: str, repo: str) -> RunnerRecorder:
    """The runner recorder under a module name of this run's own, its spec (the runner's
    kind, the repository as the tests see it) and the ``sitecustomize`` that imports it.
    Which files are the benchmark's the recorder decides by the rule tamper.py puts them
    back by."""
    written = recorder_files("swegreen_runner_recorder.py", RUNNER_MODULE)
    spec_name = f"runner-spec-{written.module}.json"
    spec = {"kind": kind, "repo": repo}
    files = {
        **written.files,
        "sitecustomize.py": _data("swegreen_sitecustomize.py"),
        spec_name: json.dumps(spec),
    }
    return RunnerRecorder(written.module, spec_name, files)


def install_runner_recorder(directory: Path, kind: str, repo: str) -> RunnerRecorder:
    """``runner_recorder``, written into ``directory`` (the engine's, read-only to the
    sandbox)."""
    recorder = runner_recorder(kind, repo)
    _write(directory, recorder.files)
    return recorder


def hash_seed() -> str:
    """A PYTHONHASHSEED for sympy's test command: with one set, ``sympy.test()`` runs the
    tests in bin/test's own process (which the recorder watches) instead of a child it
    starts with a seed of its own; drawn as sympy draws it, so the tests see a random one."""
    return str(secrets.randbelow(2**32))


KEY_FD_VARIABLE = "SWEGREEN_RECORD_KEY_FD"
KEY_FD_MIN = 10


def new_key() -> str:
    """A signing key for one test run's record (hex; see ``key_pipe``)."""
    return secrets.token_hex(32)


def key_pipe(key: str) -> int:
    """The read end of a pipe that holds ``key`` and nothing more (its write end closed),
    for the test phase to inherit: the recorder reads it once, when pytest imports it,
    before any conftest or project module runs. Whoever reads the descriptor after that
    (the parent shell's copy, through /proc) finds it empty; the key is in no
    environment. The caller closes the returned descriptor once the run has started."""
    read, write = os.pipe()
    try:
        os.write(write, key.encode("ascii") + b"\n")
    finally:
        os.close(write)
    # At 10 or above: the launch's own redirections use low numbers (the seccomp filter
    # is read from descriptor 9), and one of them would silently take the key's place.
    high = fcntl.fcntl(read, fcntl.F_DUPFD, KEY_FD_MIN)
    os.close(read)
    os.set_inheritable(high, True)
    return high


def install_plugin(directory: Path) -> str:
    """Write the plugin into ``directory`` (the engine's, shown read-only to the sandbox and
    put on PYTHONPATH) under a module name of this run's own, and return that name.
    Nothing the participant's code planted beforehand can shadow it: it could not know
    the name, and could not write where the module is."""
    written = pytest_recorder()
    _write(directory, written.files)
    return written.module


def pytest_addopts(existing: str | None, module: str) -> str:
    return " ".join(filter(None, [existing, f"-p {module}"]))


def python_path(existing: str | None, directory: str) -> str:
    """``directory`` after every entry already there: the sys.path order the tests see is
    upstream's, with one more place at the end."""
    return ":".join(filter(None, [existing, directory]))


MARK_VARIABLE = "SWEGREEN_RECORD_MARK"


def new_mark() -> str:
    """What each record line starts with on a container test command's stderr: of this
    run's own, so that no honest output is taken for a record line."""
    return f"@@swegreen-record-{secrets.token_hex(8)}@@"


def split_marked(output: str, mark: str) -> tuple[str, str]:
    """(the output without the record lines, the record): a record line is ``mark``, a
    JSON object and a newline, wherever it starts (a test's partial line may precede it
    on the same stream; what follows it continues that line)."""
    found: list[str] = []

    def take(match: re.Match[str]) -> str:
        found.append(match.group(1))
        return ""

    log = re.sub(re.escape(mark) + r"([^\n]*)\n", take, output)
    return log, "".join(line + "\n" for line in found)


@dataclass
class Recorded:
    """What the recorder saw: sessions ((pid, number) -> exit status, None while
    unfinished; in the order they started), the final call-phase outcome of each test
    ("error" for a failed setup), changes to pytest's machinery it noticed, and lines that
    were not its own (no valid signature: written by something else in the process)."""

    sessions: dict[tuple[int, int], int | None] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)
    # a skip or xfail raised while the test ran: {"kind", "marked", "files"}
    raised: dict[str, dict[str, object]] = field(default_factory=dict)
    tampered: list[str] = field(default_factory=list)
    forged: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    # a runner recorder's record (django's, sympy's): its kind, and whether it saw the end
    runner: str | None = None
    runner_finished: bool = False
    # what configured the first pytest session: its plugins, configuration file and values
    census: dict[str, object] | None = None

    @classmethod
    def parse(cls, text: str, key: bytes | None = None) -> Recorded:
        """``key``: the run's signing key; every line must carry a valid signature and a
        new counter. Without it (a stored record, checked when it was made) lines are
        taken as they are, and the forgeries noted then are read back."""
        rec = cls()
        seen: set[tuple[int, int]] = set()
        for line in text.splitlines():
            if not line.strip():
                continue
            event = _verified(line, key)
            if event is None or not isinstance(event, dict):
                rec.forged.append(line[:200])
                rec.lines.append(json.dumps({"forged": line[:200]}))
                continue
            if "forged" in event and key is None:
                rec.forged.append(str(event["forged"]))
                rec.lines.append(line)
                continue
            pid, seq = event.get("pid"), event.get("seq")
            if not isinstance(pid, int) or not isinstance(seq, int) or (pid, seq) in seen:
                rec.forged.append(line[:200])  # a replayed line
                rec.lines.append(json.dumps({"forged": line[:200]}))
                continue
            seen.add((pid, seq))
            rec.lines.append(line)
            rec._take(event, pid)
        return rec

    def _take(self, event: dict[str, object], pid: int) -> None:
        kind, number = event.get("event"), event.get("session")
        if kind == "census" and self.census is None:
            self.census = {k: v for k, v in event.items() if k not in ("pid", "seq", "event")}
        elif kind == "runner-start" and self.runner is None:
            self.runner = str(event.get("runner"))
        elif kind == "runner-finish":
            self.runner_finished = True
        elif kind == "test" and isinstance(event.get("names"), list):
            names = event["names"]
            for name in names if all(isinstance(n, str) for n in names) else ():
                self.outcomes[name] = str(event.get("outcome"))
        elif kind == "start" and isinstance(number, int):
            self.sessions.setdefault((pid, number), None)
        elif kind == "finish" and isinstance(number, int) and (pid, number) in self.sessions:
            status = event.get("status")
            self.sessions[(pid, number)] = status if isinstance(status, int) else -1
        elif kind == "tamper" and isinstance(event.get("said"), str):
            self.tampered.append(str(event["said"]))  # the runner recorder's own sentence
        elif kind == "tamper":
            self.tampered.append(
                f"{event.get('what')} was changed while the tests ran "
                f"(noticed after {event.get('when')})"
            )
        elif kind == "test" and isinstance(event.get("nodeid"), str):
            nodeid = str(event["nodeid"])
            when, outcome = event.get("when"), event.get("outcome")
            raised = event.get("raised")
            if isinstance(raised, dict):
                self.raised[nodeid] = raised
            if when == "call":
                self.outcomes[nodeid] = str(outcome)
            elif when == "setup" and outcome == "failed":
                self.outcomes[nodeid] = "error"

    @property
    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)


def _verified(line: str, key: bytes | None) -> dict[str, object] | None:
    try:
        outer = json.loads(line)
    except ValueError:
        return None
    if not isinstance(outer, dict):
        return None
    if key is None and "forged" in outer:
        return outer
    body, mac = outer.get("e"), outer.get("mac")
    if not isinstance(body, str) or not isinstance(mac, str):
        return None
    if key is not None:
        expected = hmac.new(key, body.encode("utf-8"), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, mac):
            return None
    try:
        event = json.loads(body)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def census_changes(base: Mapping[str, object], now: Mapping[str, object]) -> list[str]:
    """What configures the graded pytest session that does not configure the base
    commit's, run the same way (the engine's census, before any patch): a plugin loaded,
    or its code, changed, one missing, another configuration file or other values. The
    patch's files are put back before the tests, so any of these reached the session
    through something the patch made (empty: nothing)."""
    found = []
    had, has = Counter(_strings(base.get("plugins"))), Counter(_strings(now.get("plugins")))
    found += [f"plugin {p} is loaded, which the base commit does not load" for p in has - had]
    found += [f"plugin {p}, which the base commit loads, is not" for p in had - has]
    for key, what in (("inifile", "configuration file"), ("rootdir", "rootdir")):
        if base.get(key) != now.get(key):
            found.append(f"{what} is {now.get(key)}, the base commit's is {base.get(key)}")
    old, new = base.get("ini"), now.get("ini")
    if isinstance(old, dict) and isinstance(new, dict) and old != new:
        keys = sorted(k for k in {*old, *new} if old.get(k) != new.get(k))
        found.append("configuration values differ from the base commit's: " + ", ".join(keys))
    return [f"the session's {what}" for what in found]


def _strings(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def contradictions(
    rec: Recorded, status_map: dict[str, str], code: int | None, runner: str | None = None
) -> list[str]:
    """Where the test log says something pytest did not see, or the record shows the test
    process tampering with what it reports (empty: nothing). ``code`` is the test
    command's exit code as the engine saw it: the test phase's own exit status (its script
    ends with ``exit $SWEBENCH_TEST_EXIT_CODE``), which nothing the test prints can
    change. The session checks apply to the first session the test command started: a
    second one (a decoy that passes) changes nothing. ``runner``: the runner recorder
    that was started (``runner_kind``), whose record must exist wherever the log shows a
    test passed."""
    found = []
    who = f"the {runner} runner" if runner else "pytest"
    if rec.forged:
        found.append(
            f"{len(rec.forged)} line(s) in {who}'s record were not written by the recorder "
            f"(first: {rec.forged[0][:120]})"
        )
    found += [f"{who}: {what}" if runner else f"{who}'s {what}" for what in rec.tampered]
    for nodeid, outcome in sorted(rec.outcomes.items()):
        logged = status_map.get(nodeid)
        if outcome in FAILED_CALL and logged in PASSED_IN_LOG:
            found.append(f"{nodeid}: {who} recorded {outcome}, the log says {logged}")
    passing = any(s in PASSED_IN_LOG for s in status_map.values())
    if runner and passing and rec.runner is None:
        found.append(f"{who}'s recorder never started, yet the log says tests passed")
    elif runner and passing and code == 0 and not rec.runner_finished:
        found.append(f"{who} never finished, yet the test command exited 0")
    if rec.sessions and code == 0:
        status = next(iter(rec.sessions.values()))
        if status in FAILING_SESSION:
            found.append(f"pytest ended with exit status {status}, the test command with 0")
        elif status is None and any(s in PASSED_IN_LOG for s in status_map.values()):
            found.append("pytest never finished its session, yet the test command exited 0")
    return found


def unrecorded_passes(
    rec: Recorded, status_map: dict[str, str], graded: list[str]
) -> dict[str, str]:
    """Graded tests the log shows passing that a runner recorder's record does not show
    as passed (it never saw them run, or saw them end otherwise): name -> why. The
    engine counts them as failing. Empty for pytest's record, which only contradicts."""
    if rec.runner is None:
        return {}
    return {
        name: (
            f"integrity: the log says {status_map[name]}, the {rec.runner} runner's record "
            f"{'says ' + rec.outcomes[name] if name in rec.outcomes else 'never saw it run'}: "
            "counted as failing"
        )
        for name in graded
        if status_map.get(name) in PASSED_IN_LOG and rec.outcomes.get(name) != "passed"
    }


# Statuses the official grader counts as passing: XFAIL always, SKIPPED for a
# pass-to-pass test (it is "not failed").
_PASSING_IF_FORCED = {"XFAIL": "xfail", "SKIPPED": "skip"}


def forced_outcomes(
    rec: Recorded,
    status_map: dict[str, str],
    fail_to_pass: list[str],
    pass_to_pass: list[str],
    changed: frozenset[str],
    protected: Callable[[str], bool],
) -> dict[str, str]:
    """Graded tests whose passing status (XFAIL; SKIPPED for a pass-to-pass test) the
    code under test produced rather than the tests: ``pytest.xfail()``/``skip()`` (or
    ``SkipTest``) raised while the test ran, the test carrying no marker for it, and
    either a file the patch changed (``changed``) on the way, or, for a fail-to-pass
    test, the call made outside the tests (``protected``: a test file or conftest).
    Returns name -> why; the engine counts them as failing."""
    forced: dict[str, str] = {}
    for name in [*fail_to_pass, *pass_to_pass]:
        kind = _PASSING_IF_FORCED.get(status_map.get(name, ""))
        info = rec.raised.get(name)
        if kind is None or info is None or info.get("kind") != kind or info.get("marked"):
            continue
        if kind == "skip" and name not in pass_to_pass:
            continue  # a skipped fail-to-pass test fails for the official grader already
        files = [f for f in info.get("files") or [] if isinstance(f, str)]
        through = [f for f in files if f in changed]
        caller = files[-1] if files else None
        if through or (name in fail_to_pass and caller is not None and not protected(caller)):
            where = through[-1] if through else caller
            forced[name] = (
                f"integrity: {status_map[name]} came from a {kind} raised in {where} "
                "(code under test), not from the test's own marker: counted as failing"
            )
    return forced


class RecordChannel:
    """The FIFO the recorder writes to, read from outside the sandbox while tests run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._read_fd: int | None = None
        self._keep_fd: int | None = None
        self._reader: asyncio.Task[bytes] | None = None
        self._result: Recorded | None = None

    async def __aenter__(self) -> RecordChannel:
        await self.open()
        return self

    async def open(self) -> None:
        """Make the FIFO and start reading it (before the sandbox that writes to it)."""
        self.path.unlink(missing_ok=True)
        os.mkfifo(self.path, 0o622)
        self.path.chmod(0o622)  # writable by the sandbox's uid, readable only here
        self._read_fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self._keep_fd = os.open(self.path, os.O_WRONLY)  # no EOF until we close it
        flags = fcntl.fcntl(self._read_fd, fcntl.F_GETFL)
        fcntl.fcntl(self._read_fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        self._reader = asyncio.create_task(asyncio.to_thread(_read_all, self._read_fd))

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, key: bytes | None = None, grace: float = 10.0) -> Recorded:
        """Stop reading (every writer is gone once the sandbox has exited); ``key``
        checks every line's signature."""
        if self._result is not None:
            return self._result
        if self._keep_fd is not None:
            os.close(self._keep_fd)
            self._keep_fd = None
        data = b""
        if self._reader is not None:
            with contextlib.suppress(TimeoutError):
                data = await asyncio.wait_for(asyncio.shield(self._reader), grace)
        if self._read_fd is not None and (self._reader is None or self._reader.done()):
            os.close(self._read_fd)
            self._read_fd = None
        self.path.unlink(missing_ok=True)
        self._result = Recorded.parse(data.decode("utf-8", "replace"), key)
        return self._result


def _read_all(fd: int, limit: int = 64 * 1024 * 1024) -> bytes:
    chunks, size = [], 0
    while chunk := os.read(fd, 65536):
        if size < limit:
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks)
