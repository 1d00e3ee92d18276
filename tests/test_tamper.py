"""Test infrastructure belongs to the benchmark: which files are protected, on real gold
patches and on a real git checkout, and the recorder's contradiction rules."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from pathlib import Path

import pytest

from swegreen.core.patches import inspect_patch
from swegreen.repositories.repo_cache import git_env
from swegreen.sandbox.recorder import Recorded, contradictions, forced_outcomes
from swegreen.sandbox.tamper import (
    Guard,
    drop_bytecode,
    protected_reason,
    runner_files,
    sections_changed,
)
from tests.helpers import git, make_repo

VERIFIED = Path(__file__).resolve().parents[2] / "shared" / "data" / "swebench_verified.jsonl"


@pytest.mark.skipif(not VERIFIED.exists(), reason="../shared/data is not beside the repo")
def test_no_gold_patch_of_verified_touches_what_is_protected() -> None:
    """SWE-bench built gold patches that never touch tests: putting a participant's test
    changes back can therefore never cost an honest fix its verdict."""
    rows = [json.loads(line) for line in VERIFIED.read_text().splitlines()]
    assert len(rows) == 500
    touched = {
        (row["instance_id"], path): protected_reason(path)
        for row in rows
        for path in inspect_patch(row["patch"]).paths
    }
    assert {k: v for k, v in touched.items() if v} == {}
    # the one gold patch that edits a sectioned config file leaves its test sections alone
    sectioned = [k for k in touched if k[1].rsplit("/", 1)[-1] in ("setup.cfg", "pyproject.toml")]
    assert sectioned == [("pylint-dev__pylint-4661", "setup.cfg")]


@pytest.mark.parametrize(
    ("path", "protected"),
    [
        ("tests/test_x.py", True),
        ("astropy/io/tests/data/t.fits", True),
        ("testing/python/approx.py", True),
        ("sympy/testing/runtests.py", True),
        ("src/conftest.py", True),
        ("pkg/test_thing.py", True),
        ("pkg/thing_test.py", True),
        ("tox.ini", True),
        ("pytest.ini", True),
        ("sitecustomize.py", True),
        ("evil.pth", True),
        ("src/_pytest/python.py", False),
        ("django/test/utils.py", True),
        ("pkg/contest.py", False),
        ("setup.cfg", False),
        ("README.rst", False),
    ],
)
def test_protected_paths(path: str, protected: bool) -> None:
    assert (protected_reason(path) is not None) is protected


def test_the_test_runner_itself_is_protected(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "test").write_text("#!/usr/bin/env python\n")
    files = runner_files("bin/test -C --verbose", tmp_path)
    assert files == frozenset({"bin/test"})
    assert protected_reason("bin/test", files) == "the test command runs it"


def test_sectioned_configs_are_protected_only_where_tests_are_configured() -> None:
    cfg = "[metadata]\nname = x\n[tool:pytest]\naddopts = -rA\n"
    assert not sections_changed("setup.cfg", cfg, cfg.replace("name = x", "name = y"))
    assert sections_changed("setup.cfg", cfg, cfg.replace("-rA", "-p evil"))
    toml = '[project]\nname = "x"\n[tool.pytest.ini_options]\naddopts = "-rA"\n'
    assert not sections_changed("pyproject.toml", toml, toml.replace('"x"', '"y"'))
    assert sections_changed("pyproject.toml", toml, toml.replace("-rA", "-p evil"))
    assert sections_changed("pyproject.toml", None, '[tool.pytest.ini_options]\naddopts="-p e"\n')


@pytest.mark.parametrize("brk", ["\x0c", "\x0b", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\r"])
def test_a_setup_cfg_is_read_as_pytest_reads_it(brk: str) -> None:
    """A pytest section hidden from configparser behind a line break only
    ``str.splitlines`` (pytest's iniconfig) honours is still pytest's: the file is put back."""
    hidden = f"[flake8]\nmax-line-length = 99{brk}[tool:pytest]{brk}addopts = -p evil\n"
    assert sections_changed("setup.cfg", None, hidden)
    assert sections_changed("setup.cfg", "[flake8]\nmax-line-length = 99\n", hidden)
    assert not sections_changed("setup.cfg", None, "[flake8]\nmax-line-length = 99\n")


def test_a_setup_cfg_pytest_cannot_read_counts_as_changed() -> None:
    cfg = "[metadata]\nname = x\n"
    broken = cfg + "[metadata]\nname = y\n"  # iniconfig refuses a duplicate section
    assert sections_changed("setup.cfg", cfg, broken)


def test_the_guard_puts_back_what_participant_code_changed(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(
        repo,
        {
            "pkg/mod.py": "x = 1\n",
            "tests/test_mod.py": "def test(): pass\n",
            "setup.cfg": "[metadata]\nname = x\n[tool:pytest]\naddopts = -rA\n",
            ".gitignore": "build/\n*.pth\n",
        },
    )
    guard = Guard(repo, git_env(tmp_path / "home"), frozenset())

    async def scenario() -> tuple[list[str], list[str]]:
        await guard.snapshot()
        (repo / "pkg" / "mod.py").write_text("x = 2\n")  # honest: kept
        (repo / "tests" / "test_mod.py").write_text("def test(): assert True\n")
        (repo / "setup.cfg").write_text("[metadata]\nname = x\n[tool:pytest]\naddopts = -p evil\n")
        (repo / "tests" / "conftest.py").write_text("# hook\n")
        (repo / "hook.pth").write_text("import evil\n")  # ignored by .gitignore, still seen
        (repo / "build").mkdir()
        (repo / "build" / "conftest.py").write_text("# a build copy: not loaded\n")
        # configuration pytest would meet on its way up from the tests, and a helper
        (repo / "tests" / "setup.cfg").write_text("[tool:pytest]\naddopts = -p evil\n")
        (repo / "pkg" / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts="-p e"\n')
        (repo / "pytest.toml").write_text('[pytest]\naddopts = ["-p", "evil"]\n')
        (repo / "tests" / "helpers.py").write_text("import evil\n")
        (repo / "tests" / "__pycache__").mkdir()
        (repo / "tests" / "__pycache__" / "x.pyc").write_bytes(b"")  # dropped apart, unlisted
        after_run = await guard.revert_after_run()
        patch_paths = ["pkg/mod.py", "tests/new_test.py"]
        (repo / "tests" / "new_test.py").write_text("x\n")
        return after_run, await guard.revert(patch_paths)

    after_run, after_patch = asyncio.run(scenario())
    assert sorted(after_run) == [
        "hook.pth",
        "pkg/pyproject.toml",
        "pytest.toml",
        "setup.cfg",
        "tests/conftest.py",
        "tests/helpers.py",
        "tests/setup.cfg",
        "tests/test_mod.py",
    ]
    assert after_patch == ["tests/new_test.py"]
    assert (repo / "pkg" / "mod.py").read_text() == "x = 2\n"
    assert (repo / "tests" / "test_mod.py").read_text() == "def test(): pass\n"
    assert "-rA" in (repo / "setup.cfg").read_text()
    assert not (repo / "tests" / "conftest.py").exists() and not (repo / "hook.pth").exists()
    assert (repo / "build" / "conftest.py").exists()
    assert not (repo / "tests" / "new_test.py").exists()
    # what is left for git to see is the honest change alone
    assert (
        git(repo, "status", "--porcelain").stdout.strip() == "M pkg/mod.py\n?? tests/__pycache__/"
    )


KEY = b"k" * 32


def signed(event: dict[str, object], seq: int, key: bytes = KEY) -> str:
    body = json.dumps({**event, "seq": seq}, sort_keys=True)
    return json.dumps({"e": body, "mac": hmac.new(key, body.encode(), hashlib.sha256).hexdigest()})


def rec(*events: dict[str, object]) -> Recorded:
    """A record as the recorder writes it: every line signed with the run's key."""
    return Recorded.parse("\n".join(signed(e, n) for n, e in enumerate(events, 1)), KEY)


START = {"event": "start", "pid": 7, "session": 1}


def call(nodeid: str, outcome: str, when: str = "call") -> dict[str, object]:
    return {"event": "test", "pid": 7, "nodeid": nodeid, "when": when, "outcome": outcome}


def finish(status: int, session: int = 1) -> dict[str, object]:
    return {"event": "finish", "pid": 7, "status": status, "session": session}


def test_bytecode_is_dropped_everywhere_or_where_the_upper_layer_says(tmp_path: Path) -> None:
    """Every ``__pycache__`` of a checkout goes (``.git``'s and a symlink's target stay);
    given the upper layer of a copy-on-write checkout, only what it holds is looked at:
    its names, removed through the checkout."""
    repo, upper = tmp_path / "repo", tmp_path / "upper"
    for root in (repo, upper):
        for d in ("pkg/__pycache__", ".git/__pycache__"):
            (root / d).mkdir(parents=True)
            (root / d / "m.cpython-311.pyc").write_bytes(b"forged")
    (repo / "lower" / "__pycache__").mkdir(parents=True)  # not in the upper layer
    assert drop_bytecode(repo, upper) == 1
    assert not (repo / "pkg" / "__pycache__").exists()
    assert (upper / "pkg" / "__pycache__").exists()  # the layer is read, not written
    assert (repo / "lower" / "__pycache__").exists() and (repo / ".git" / "__pycache__").exists()
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / "link" / "__pycache__").parent.mkdir()
    (repo / "link" / "__pycache__").symlink_to(outside)
    assert drop_bytecode(repo) == 2  # lower/ and the link: the link goes, not its target
    assert outside.is_dir() and not (repo / "link" / "__pycache__").is_symlink()
    assert (repo / ".git" / "__pycache__").exists()


def test_an_honest_run_has_no_contradiction() -> None:
    honest = rec(START, call("t.py::a", "passed"), call("t.py::b", "failed"), finish(1))
    assert contradictions(honest, {"t.py::a": "PASSED", "t.py::b": "FAILED"}, 1) == []


def test_truncated_ids_and_teardown_errors_never_count() -> None:
    """The parser truncates parametrized ids at spaces; a teardown error follows a passed
    call. Neither is a contradiction, whatever the log shows for the truncated id."""
    run = rec(
        START,
        call("t.py::p[a b]", "failed"),
        call("t.py::c", "passed"),
        call("t.py::c", "failed", when="teardown"),
        finish(1),
    )
    assert contradictions(run, {"t.py::p[a": "PASSED", "t.py::c": "PASSED"}, 1) == []


def test_forged_lines_and_exit_codes_are_contradictions() -> None:
    forged = rec(START, call("t.py::a", "failed"), finish(1))
    found = contradictions(forged, {"t.py::a": "PASSED"}, 0)
    assert len(found) == 2
    unfinished = rec(START)  # killed itself mid-session after printing its own results
    assert contradictions(unfinished, {"t.py::a": "PASSED"}, 0)
    assert contradictions(unfinished, {"t.py::a": "PASSED"}, 1) == []  # a crash, honestly
    setup_error = rec(START, call("t.py::a", "failed", when="setup"), finish(1))
    assert contradictions(setup_error, {"t.py::a": "PASSED"}, 1)


def test_a_runner_the_recorder_does_not_cover_is_not_judged() -> None:
    assert contradictions(Recorded(), {"t.py::a": "PASSED"}, 0) == []
    no_collection = rec(START, finish(5))  # exit 5 (nothing collected) may be mapped to 0
    assert contradictions(no_collection, {}, 0) == []


def test_lines_the_recorder_did_not_sign_are_forgeries() -> None:
    """Code in the test process can write into the channel; without the run's key (taken
    out of the environment before any project code ran) its lines are named."""
    honest = [signed(START, 1), signed(call("t.py::a", "failed"), 2), signed(finish(1), 3)]
    unsigned = json.dumps({**call("t.py::a", "passed"), "seq": 9})
    wrong_key = signed(finish(0), 10, key=b"x" * 32)
    replayed = signed(call("t.py::a", "failed"), 2)
    record = Recorded.parse("\n".join([*honest, unsigned, wrong_key, replayed]), KEY)
    assert len(record.forged) == 3
    assert record.outcomes == {"t.py::a": "failed"} and record.sessions == {(7, 1): 1}
    found = contradictions(record, {"t.py::a": "FAILED"}, 1)
    assert found == [
        f"3 line(s) in pytest's record were not written by the recorder (first: {unsigned[:120]})"
    ]
    # what is stored keeps the finding: a regrade from it finds the same
    stored = Recorded.parse(record.text)
    assert len(stored.forged) == 3 and contradictions(stored, {"t.py::a": "FAILED"}, 1) == found


def test_a_decoy_session_does_not_stand_in_for_the_first() -> None:
    decoy = rec(START, {"event": "start", "pid": 7, "session": 2}, finish(0, session=2))
    found = contradictions(decoy, {"t.py::a": "PASSED"}, 0)
    assert found == ["pytest never finished its session, yet the test command exited 0"]


def test_changes_to_pytest_machinery_are_contradictions() -> None:
    event = {"event": "tamper", "pid": 7, "what": "hook pytest_runtest_makereport (from x)"}
    found = contradictions(rec(START, {**event, "when": "t.py::a"}, finish(0)), {}, 0)
    assert found == [
        "pytest's hook pytest_runtest_makereport (from x) was changed while the tests ran "
        "(noticed after t.py::a)"
    ]


def raised(nodeid: str, kind: str, files: list[str], marked: bool = False) -> dict[str, object]:
    outcome = "skipped"
    return {
        **call(nodeid, outcome),
        "raised": {"kind": kind, "marked": marked, "files": files},
    }


def test_an_xfail_or_skip_the_code_under_test_raised_is_not_a_pass() -> None:
    """forced_outcomes: only outcomes the patch's code (or, for a fail-to-pass test, code
    outside the tests) produced count as failing; markers, the tests' own calls and
    unchanged code keep the official meaning. The record survives storage."""
    f2p = ["tests/test_a.py::t1", "tests/test_a.py::t2", "tests/test_a.py::t3", "t.py::t4"]
    p2p = ["tests/test_a.py::p1", "tests/test_a.py::p2", "tests/test_a.py::p3"]
    record = rec(
        START,
        raised(f2p[0], "xfail", ["tests/test_a.py", "pkg/core.py"]),  # the patch's code
        raised(f2p[1], "xfail", ["tests/test_a.py"]),  # the test's own pytest.xfail()
        raised(f2p[2], "xfail", [], marked=True),  # a marker (raised in _pytest)
        raised(f2p[3], "xfail", ["t.py", "pkg/util.py"]),  # unchanged code, outside tests
        raised(p2p[0], "xfail", ["tests/test_a.py", "pkg/core.py", "pkg/util.py"]),
        raised(p2p[1], "skip", ["tests/test_a.py", "pkg/util.py"]),  # unchanged: as on base
        raised(p2p[2], "skip", ["tests/test_a.py", "pkg/core.py"]),
    )
    statuses = {n: "XFAIL" for n in [*f2p, p2p[0]]} | {p2p[1]: "SKIPPED", p2p[2]: "SKIPPED"}
    changed = frozenset({"pkg/core.py"})

    def protected(path: str) -> bool:
        return protected_reason(path) is not None

    for record_now in (record, Recorded.parse(record.text)):
        forced = forced_outcomes(record_now, statuses, f2p, p2p, changed, protected)
        assert sorted(forced) == sorted([f2p[0], f2p[3], p2p[0], p2p[2]])
        assert "raised in pkg/core.py" in forced[f2p[0]]
        assert "raised in pkg/util.py" in forced[f2p[3]]
    # a status the official grader already counts failing is not this rule's business
    assert forced_outcomes(record, {f2p[0]: "FAILED"}, f2p, p2p, changed, protected) == {}
