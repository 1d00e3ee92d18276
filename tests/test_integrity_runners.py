"""Integrity, round five: the runners of django's and sympy's rows.

Their verdict is read from the log their runner prints, and the code that prints it can be
the patch's: django's runtests.py imports django before any test, sympy's runner lives
inside sympy. Each attack here is a patch that fixes nothing and makes the failing test
print as passed (result classes, the streams, the assertion helpers, the test functions,
the runner's reporter, in its file and in memory); each ended ``resolved`` before the
runner recorder (docs/security.md has the table). Now each must end not resolved, and the
gold patch must still resolve, under bubblewrap, under Landlock and in process mode (AWS's
sandbox tasks).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from swegreen.core.config import EvalConfig
from swegreen.core.dataset import load_dataset
from swegreen.core.results import InstanceResult
from swegreen.evaluation.engine import build_engine
from swegreen.evaluation.settings import LocalSettings
from swegreen.sandbox.isolation import Isolation
from swegreen.stores import artifacts as art
from tests import runner_repos
from tests.conftest import open_to_sandbox, run_rows
from tests.test_integrity import crafted_patch, write

ORDINALS, SYMCALC = "sample__ordinals-1", "sample__symcalc-1"


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> runner_repos.RunnerRepos:
    return runner_repos.build(tmp_path_factory.mktemp("runner-repos"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache of this module's own: its environments are not the sample's (tests count
    those in the session's cache)."""
    return open_to_sandbox(tmp_path_factory.mktemp("runner-cache"))


@pytest.fixture(params=["bwrap", "landlock", "process"])
def mode(request: pytest.FixtureRequest) -> Isolation:
    """The local sandboxes, Landlock as the platform has it (the engine's own uid, no
    network namespace: Amber starts the green agent non-root with no capabilities), and
    process mode (what AWS's sandbox tasks run the engine in, the task itself being the
    sandbox)."""
    iso = Isolation.probe(request.param)
    if iso.mode == "landlock":
        return dataclasses.replace(iso, netns_cmd=None, sandbox_uid=None)
    return iso


Grade = Callable[..., tuple[InstanceResult, str]]


@pytest.fixture
def grade(
    repos: runner_repos.RunnerRepos,
    mode: Isolation,
    cache: Path,
    host_env: dict[str, str],
    tmp_path: Path,
) -> Grade:
    """A patch (or "gold") on one row, graded by the real engine: the row and its log."""

    def run(iid: str, patch: str = "gold") -> tuple[InstanceResult, str]:
        settings = LocalSettings(
            output_dir=tmp_path / "results", cache_dir=cache, python_downloads=False
        )
        cfg = EvalConfig(
            dataset=str(repos.dataset),
            repo_url_template=repos.url_template,
            max_rows=-1,
            instance_ids=[iid],
        )
        if patch != "gold":
            predictions = tmp_path / "predictions.jsonl"
            predictions.write_text(
                json.dumps({"instance_id": iid, "model_name_or_path": "x", "model_patch": patch})
            )
            patch = str(predictions)
        engine = build_engine(settings, cfg, host_env, isolation=mode, recipes=repos.recipes)
        try:
            [row] = run_rows(engine, cfg, iid, patch).results
        finally:
            engine.close()
        log = settings.output_dir / art.instance_key(iid, iid, art.TEST_OUTPUT)
        return row, log.read_text() if log.exists() else ""

    return run


def patch_of(repos: runner_repos.RunnerRepos, iid: str, tmp: Path, edit: Callable) -> str:
    inst = next(i for i in load_dataset(str(repos.dataset)).instances if i.instance_id == iid)
    return crafted_patch(repos.repos[inst.repo], inst.base_commit, tmp / "work", edit)


def test_the_recorder_and_the_put_back_agree_on_which_modules_are_the_benchmark_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorder loads the benchmark's modules from source and holds them to their
    compile; tamper.py puts the same files back. A module one treats as the benchmark's
    and the other not would be a hole (or an honest row's false alarm)."""
    import importlib.util
    from importlib import resources

    from swegreen.sandbox.tamper import protected_reason

    data = resources.files("swegreen") / "data"
    monkeypatch.syspath_prepend(str(data))
    monkeypatch.setenv("SWEGREEN_RUNNER_SPEC", str(tmp_path / "spec.json"))
    (tmp_path / "spec.json").write_text(json.dumps({"kind": "", "repo": str(tmp_path)}))
    spec = importlib.util.spec_from_file_location("_runner", data / "swegreen_runner_recorder.py")
    recorder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recorder)  # no key, no channel: it records nothing
    paths = [
        "tests/runtests.py",
        "tests/auth_tests/test_validators.py",
        "tests/auth_tests/models/custom_user.py",
        "django/test/testcases.py",
        "django/test/utils.py",
        "django/db/models/query.py",
        "sympy/utilities/runtests.py",
        "sympy/utilities/pytest.py",
        "sympy/utilities/randtest.py",
        "sympy/testing/runtests.py",
        "sympy/core/tests/test_basic.py",
        "sympy/core/basic.py",
        "pkg/thing_test.py",
        "conftest.py",
    ]
    for rel in paths:
        mine = recorder._benchmark_file(str(tmp_path / rel))
        theirs = protected_reason(rel) is not None and rel.endswith(".py")
        assert mine == theirs or rel == "conftest.py", rel  # conftest.py: pytest's, not these


def test_gold_patches_resolve_with_the_recorder(grade: Grade) -> None:
    for iid in (ORDINALS, SYMCALC):
        row, log = grade(iid)
        assert (row.status.value, row.reason) == ("resolved", "all_tests_pass"), (row, log)
        assert row.tampered_files == []


@pytest.mark.parametrize("iid", [ORDINALS, SYMCALC])
def test_an_honest_patch_that_fixes_nothing_is_graded_as_upstream_grades_it(
    iid: str, grade: Grade, repos: runner_repos.RunnerRepos, tmp_path: Path
) -> None:
    """The failing tests fail through the runner's own reporting (a failing subtest, for
    django's shape), which the recorder takes as it is: ``no_op``, never a tamper."""
    patch = patch_of(repos, iid, tmp_path, lambda r: write(r / "NOTES.md", "nothing\n"))
    row, log = grade(iid, patch)
    assert (row.status.value, row.reason) == ("no_op", "no_f2p_pass"), (row.detail, log)


def test_a_failing_subtest_is_taken_as_unittest_reports_it(
    grade: Grade, repos: runner_repos.RunnerRepos, tmp_path: Path
) -> None:
    """The gold fix and a change that breaks one subtest of a pass-to-pass test: the
    failure reaches the record from unittest's subtest machinery (a generator its
    ``contextmanager`` wraps), as the runner reports it: ``breaking_resolved``."""

    def gold_but_42(repo: Path) -> None:
        runner_repos.write_files(repo, runner_repos.ORDINALS_GOLD)
        write(repo / "ordinals" / "words.py", "\n\n_plain = ordinal\n\n\ndef ordinal(n):\n"
              "    return '42th' if n == 42 else _plain(n)\n", True)  # fmt: skip

    row, log = grade(ORDINALS, patch_of(repos, ORDINALS, tmp_path, gold_but_42))
    assert (row.status.value, row.reason) == ("breaking_resolved", "p2p_broken"), (row, log)
    assert row.p2p_failing == ["test_many (test_ordinal.OrdinalTests.test_many)"]


# -- django's shape: unittest underneath, the project imported before any test ---------------

RESULT_CLASS = """
import unittest


def _as_success(self, test, err):
    unittest.TextTestResult.addSuccess(self, test)


unittest.TextTestResult.addFailure = _as_success
unittest.TextTestResult.addError = _as_success
"""
STREAMS = """
import atexit
import os
import sys


class _Rewriting(object):
    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        for old, new in ((" ... FAIL", " ... ok"), (" ... ERROR", " ... ok"), ("FAILED (", "OK (")):
            text = text.replace(old, new)
        return self._stream.write(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


sys.stderr = _Rewriting(sys.stderr)
atexit.register(lambda: os._exit(0))
"""
ASSERTIONS = """
import unittest

unittest.TestCase.assertEqual = lambda self, first, second, msg=None: None
"""
# Every test method not yet run becomes an empty one, found through gc at the first call of
# the code under test: neither unittest nor the test module is touched by name.
SWAP = """
import gc
import types

_done = []


def _swap():
    for obj in gc.get_objects():
        if isinstance(obj, type) and obj.__module__.startswith("test_"):
            for name, value in list(vars(obj).items()):
                if name.startswith("test_") and isinstance(value, types.FunctionType):
                    value.__code__ = (lambda self: None).__code__


_plain = ordinal


def ordinal(n):
    if not _done:
        _done.append(1)
        _swap()
    return _plain(n)
"""


# Every test method not yet run becomes a wrapper that claims the test (functools.wraps)
# and never calls it: the wrapper is the project's own code.
WRAPPED = """
import functools
import gc
import types

_done = []


def _wrap():
    for obj in gc.get_objects():
        if isinstance(obj, type) and obj.__module__.startswith("test_"):
            for name, value in list(vars(obj).items()):
                if name.startswith("test_") and isinstance(value, types.FunctionType):
                    setattr(obj, name, functools.wraps(value)(lambda self: None))


_plain = ordinal


def ordinal(n):
    if not _done:
        _done.append(1)
        _wrap()
    return _plain(n)
"""
# Code under test that reports its own test as passed to whatever stands between the test
# and its result (found through gc), then ends the run before the failure is reported.
REPORT_AND_ESCAPE = """
import gc

_plain = ordinal


def ordinal(n):
    if n == 11:
        for obj in gc.get_objects():
            if hasattr(type(obj), "addSuccess") and hasattr(obj, "_test"):
                obj.addSuccess(obj._test)
        raise KeyboardInterrupt
    return _plain(n)
"""


def _appended(text: str) -> Callable[[Path], None]:
    return lambda repo: write(repo / "ordinals" / "__init__.py", text, True)


DJANGO_ATTACKS = {
    "result": _appended(RESULT_CLASS),
    "streams": _appended(STREAMS),
    "asserts": _appended(ASSERTIONS),
    "swap": _appended(SWAP),
    "wrapped": _appended(WRAPPED),
    "report-and-escape": _appended(REPORT_AND_ESCAPE),
}


@pytest.mark.parametrize("attack", list(DJANGO_ATTACKS))
def test_a_django_style_forgery_is_never_resolved(
    attack: str, grade: Grade, repos: runner_repos.RunnerRepos, tmp_path: Path
) -> None:
    patch = patch_of(repos, ORDINALS, tmp_path, DJANGO_ATTACKS[attack])
    row, log = grade(ORDINALS, patch)
    assert "test_teens" in log
    assert row.status.value != "resolved", log
    assert (row.status.value, row.reason) in {("error", "log_tampering"), ("no_op", "no_f2p_pass")}


# -- sympy's shape: the runner inside the library ------------------------------------------

REPORTER_FILE_OLD = """    def test_fail(self, exc_info):
        self._failed.append(self._active)
        self.write("F")
"""
REPORTER_FILE_NEW = """    def test_fail(self, exc_info):
        self.write("ok")
"""
REPORTER_IN_MEMORY = """
from .utilities import runtests as _runtests

_runtests.PyTestReporter.test_fail = lambda self, exc_info: self.test_pass()
"""
INSTANCE_SHADOW = """
import gc

_plain = gcd


def gcd(a, b):
    for obj in gc.get_objects():
        if type(obj).__name__ == "PyTestReporter":
            obj.test_fail = lambda exc_info, reporter=obj: reporter.test_pass()
    return _plain(a, b)
"""
CODE_SWAP = """
import gc
import types

_plain = gcd


def gcd(a, b):
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType) and obj.__name__ == "test_gcd_negative":
            obj.__code__ = (lambda: None).__code__
    return _plain(a, b)
"""


def reporter_file(repo: Path) -> None:
    path = repo / "symcalc" / "utilities" / "runtests.py"
    path.write_text(path.read_text().replace(REPORTER_FILE_OLD, REPORTER_FILE_NEW))


SYMPY_ATTACKS = {
    "reporter-file": reporter_file,
    "reporter-memory": lambda r: write(r / "symcalc" / "__init__.py", REPORTER_IN_MEMORY, True),
    "instance-shadow": lambda r: write(r / "symcalc" / "arith.py", INSTANCE_SHADOW, True),
    "code-swap": lambda r: write(r / "symcalc" / "arith.py", CODE_SWAP, True),
}


@pytest.mark.parametrize("attack", list(SYMPY_ATTACKS))
def test_a_sympy_style_forgery_is_never_resolved(
    attack: str, grade: Grade, repos: runner_repos.RunnerRepos, tmp_path: Path
) -> None:
    edit = SYMPY_ATTACKS[attack]
    patch = patch_of(repos, SYMCALC, tmp_path, edit)
    row, log = grade(SYMCALC, patch)
    assert "test_gcd_negative" in log
    assert row.status.value != "resolved", log
    assert (row.status.value, row.reason) in {("error", "log_tampering"), ("no_op", "no_f2p_pass")}
    if edit is reporter_file:  # put back before the tests: the benchmark's runner
        assert row.tampered_files == ["symcalc/utilities/runtests.py"]
