"""Integrity, round three: what the patch's build step and its code under test can forge.

Each class is planted by a crafted patch on the sample row whose recipe installs the
project at evaluation time, and graded by the real engine in the real sandbox: the test
runner replaced by a launcher the project's RECORD claims, setuptools' editable finder
(code at every interpreter start) written by the build, pytest options from
configuration the build leaves, the recorder's key looked for where it used to be, code
objects and test items swapped in pytest's process, and XFAIL or skipped outcomes raised
by the code under test. Every one must end non-resolved with a reason, and no planted
code may run where it was aimed.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from swegreen.core.dataset import load_dataset
from swegreen.core.results import InstanceResult
from swegreen.evaluation.settings import LocalSettings
from swegreen.sample import SampleBenchmark
from tests.conftest import RunSample
from tests.test_integrity import REWRITE_REPORTS, write
from tests.test_integrity_tools import evaluate_crafted

INSTANCE = "sample__ledger-1"  # its recipe installs the project at evaluation time
MARK = "SWEGREEN-PLANTED"
# How planted code spells MARK and the key probe's verdicts: the eval script shows the
# patch's diff in the log, so the literal strings must appear only when the code runs.
SAID = '"SWEGREEN" + "-PLANTED"'
TESTS = (
    "tests/test_money.py::test_add_mismatched_currency_raises",
    "tests/test_money.py::test_equality_considers_currency",
    "tests/test_money.py::test_add_same_currency",
    "tests/test_money.py::test_rounds_to_cents",
    "tests/test_money.py::test_str",
)
FAKE_PASS = f"""
import sys


def main():
    sys.stderr.write({SAID} + " runner\\n")
    for test in {TESTS!r}:
        print("PASSED " + test)
    return 0
"""

# -- the test runner replaced -------------------------------------------------------------


def runner_console_script(repo: Path) -> None:
    """``pytest`` as the project's console script: pip writes it over the runner's."""
    write(repo / "ledger" / "planted.py", FAKE_PASS)
    write(repo / "pyproject.toml", '\n[project.scripts]\npytest = "ledger.planted:main"\n', True)


def runner_data_script(repo: Path) -> None:
    """``pytest`` as a setup.py script: copied into bin/ as it is."""
    lines = "".join(f'echo "PASSED {t}"\n' for t in TESTS)
    shell = '#!/bin/sh\necho "SWEGREEN""-PLANTED runner" >&2\n'
    write(repo / "bin" / "pytest", f"{shell}{lines}exit 0\n")
    (repo / "bin" / "pytest").chmod(0o755)
    write(repo / "setup.py", "from setuptools import setup\nsetup(scripts=['bin/pytest'])\n")


# -- the editable finder ------------------------------------------------------------------

FINDER_APPENDED = f"""
from setuptools import setup
from setuptools.command import editable_wheel as ew

ew._FINDER_TEMPLATE += '''
import sys as _s
_s.stderr.write({SAID} + " finder uid=%d\\\\n" % __import__("os").getuid())
'''
setup()
"""

FINDER_REPLACED = f"""
from setuptools import setup
from setuptools.command import editable_wheel as ew


def _finder(name, mapping, namespaces):
    root = list(mapping.values())[0].rsplit("/", 1)[0]
    return '''
import sys
MAPPING = %r


def install():
    sys.stderr.write({SAID} + " finder\\\\n")
    sys.path.append(%r)
''' % (dict(mapping), root)


ew._finder_template = _finder
setup()
"""


def finder_appended(repo: Path) -> None:
    write(repo / "setup.py", FINDER_APPENDED)


def finder_replaced(repo: Path) -> None:
    write(repo / "setup.py", FINDER_REPLACED)


# -- pytest options from configuration the build step leaves ---------------------------------

FORCE_PASS_PLUGIN = (
    f"""
import sys

sys.stderr.write({SAID} + " plugin\\n")
"""
    + REWRITE_REPORTS
)


def config_left_by_build(where: str, text: str) -> Callable[[Path], None]:
    def plant(repo: Path) -> None:
        write(repo / "ledger" / "forcepass.py", FORCE_PASS_PLUGIN)
        write(
            repo / "setup.py",
            f"from setuptools import setup\nopen({where!r}, 'w').write({text!r})\nsetup()\n",
        )

    plant.__name__ = f"config_in_{where.replace('/', '_').replace('.', '_')}"
    return plant


# -- in pytest's own process ------------------------------------------------------------------

KEY_FROM_ENVIRONMENTS = """
import os as _os


def _look():
    found = []
    if _os.environ.get("SWEGREEN_RECORD_KEY"):
        found.append("own environment")
    for pid in {_os.getppid(), _os.getpid()}:
        try:
            with open("/proc/%d/environ" % pid, "rb") as fh:
                if b"SWEGREEN_RECORD_KEY=" in fh.read():
                    found.append("environment of %d" % pid)
        except OSError:
            pass
    return found


_found = _look()
__import__("atexit").register(print, "KEY" + " FOUND: %s" % _found if _found else "NO" + " KEY")
"""

KEY_FROM_DESCRIPTORS = """
import os as _os


def _look():
    found = []
    for pid in {_os.getppid(), _os.getpid()}:
        try:
            names = _os.listdir("/proc/%d/fd" % pid)
        except OSError:
            continue
        for name in names:
            try:
                fd = _os.open("/proc/%d/fd/%s" % (pid, name), _os.O_RDONLY | _os.O_NONBLOCK)
            except OSError:
                continue
            try:
                data = _os.read(fd, 128).strip()
            except OSError:
                data = b""
            finally:
                _os.close(fd)
            if len(data) == 64 and all(c in b"0123456789abcdef" for c in data):
                found.append("descriptor %s of %d" % (name, pid))
    return found


_found = _look()
__import__("atexit").register(print, "KEY" + " FOUND: %s" % _found if _found else "NO" + " KEY")
"""

RUNTEST_CODE_SWAPPED = """
import _pytest.python as _pp

_pp.Function.runtest.__code__ = (lambda self: None).__code__
"""

PYFUNC_CALL_CODE_SWAPPED = """
import _pytest.python as _pp

_pp.pytest_pyfunc_call.__code__ = (lambda pyfuncitem: True).__code__
"""

ITEMS_SWAPPED = """
import gc as _gc


def _swap(how):
    import pytest
    import _pytest.config as _c

    class Swap:
        @pytest.hookimpl(trylast=True)
        def pytest_collection_modifyitems(self, items):
            for item in items:
                if how == "function":
                    item.obj = lambda *args, **kwargs: None
                else:
                    item.runtest = lambda: None

    for obj in _gc.get_objects():
        if isinstance(obj, _c.Config) and not obj.pluginmanager.has_plugin("swap"):
            obj.pluginmanager.register(Swap(), "swap")


_swap({how!r})
"""


def in_process(payload: str) -> Callable[[Path], None]:
    def plant(repo: Path) -> None:
        init = repo / "ledger" / "__init__.py"
        write(init, payload + init.read_text())

    return plant


# -- XFAIL and skips the code under test raises ---------------------------------------------

XFAIL_ON_THE_BUGGY_PATH = """
    def _check(self, other):
        if self.currency != other.currency:
            import pytest

            pytest.xfail("currencies differ")
"""


def xfail_on_the_buggy_path(repo: Path) -> None:
    """Both fail-to-pass tests end XFAIL: the official grader counts them passing."""
    money = repo / "ledger" / "money.py"
    text = money.read_text()
    for method in ("__add__", "__eq__"):
        head = f"    def {method}(self, other):\n"
        text = text.replace(head, head + "        self._check(other)\n")
    text = text.replace("    def __add__", XFAIL_ON_THE_BUGGY_PATH + "\n    def __add__")
    money.write_text(text)


def gold_but_str_xfails(repo: Path, gold: str) -> None:
    """The fix, and ``__str__`` broken behind ``pytest.xfail()``: the pass-to-pass test of
    it ends XFAIL, which the official grader counts as passing."""
    subprocess.run(["git", "-C", str(repo), "apply", "-"], input=gold, text=True, check=True)
    money = repo / "ledger" / "money.py"
    money.write_text(
        money.read_text().replace(
            "    def __str__(self):\n",
            "    def __str__(self):\n        import pytest\n\n        pytest.xfail('formatting')\n",
        )
    )


CASES: dict[str, tuple[Callable[[Path], None], tuple[str, str]]] = {
    "runner-console-script": (runner_console_script, ("no_op", "no_f2p_pass")),
    "runner-data-script": (runner_data_script, ("no_op", "no_f2p_pass")),
    "finder-appended": (finder_appended, ("no_op", "no_f2p_pass")),
    "finder-replaced": (finder_replaced, ("no_op", "no_f2p_pass")),
    "config-root-setup-cfg": (
        config_left_by_build("setup.cfg", "[tool:pytest]\naddopts = -p ledger.forcepass\n"),
        ("no_op", "no_f2p_pass"),
    ),
    "config-tests-pyproject": (
        config_left_by_build(
            "tests/pyproject.toml", '[tool.pytest.ini_options]\naddopts = "-p ledger.forcepass"\n'
        ),
        ("no_op", "no_f2p_pass"),
    ),
    "key-environments": (in_process(KEY_FROM_ENVIRONMENTS), ("no_op", "no_f2p_pass")),
    "key-descriptors": (in_process(KEY_FROM_DESCRIPTORS), ("no_op", "no_f2p_pass")),
    "runtest-code": (in_process(RUNTEST_CODE_SWAPPED), ("error", "log_tampering")),
    "pyfunc-call-code": (in_process(PYFUNC_CALL_CODE_SWAPPED), ("error", "log_tampering")),
    "items-function": (
        in_process(ITEMS_SWAPPED.format(how="function")),
        ("error", "log_tampering"),
    ),
    "items-runtest": (in_process(ITEMS_SWAPPED.format(how="runtest")), ("error", "log_tampering")),
    "xfail-on-buggy-path": (xfail_on_the_buggy_path, ("no_op", "no_f2p_pass")),
}


def evaluate(
    plant: Callable[[Path], None],
    name: str,
    run_sample: RunSample,
    sample: SampleBenchmark,
    settings: LocalSettings,
    tmp_path: Path,
) -> tuple[InstanceResult, str]:
    return evaluate_crafted(plant, f"round3-{name}", run_sample, sample, settings, tmp_path)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_forged_pass_from_the_build_or_the_code_under_test_never_resolves(
    name: str,
    run_sample: RunSample,
    sample: SampleBenchmark,
    settings: LocalSettings,
    tmp_path: Path,
) -> None:
    plant, expected = CASES[name]
    row, log = evaluate(plant, name, run_sample, sample, settings, tmp_path)
    assert (row.status.value, row.reason) == expected, row.detail
    assert MARK not in log  # nothing planted ran where it was aimed
    assert "KEY FOUND" not in log
    if name.startswith("key-"):
        assert "NO KEY" in log  # the payload ran, and found nothing
    if name.startswith(("runner-", "finder-")):
        assert any(f.startswith("env:") for f in row.tampered_files), row.tampered_files
    if name.startswith(("runtest-", "pyfunc-", "items-")):
        assert "changed" in row.detail or "test item" in row.detail, row.detail
    if name == "xfail-on-buggy-path":
        assert "XFAIL came from a xfail raised in ledger/money.py" in row.detail, row.detail


def test_an_xfail_pass_to_pass_test_the_patch_broke_counts_as_failing(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, tmp_path: Path
) -> None:
    inst = next(i for i in load_dataset(str(sample.dataset)).instances if i.instance_id == INSTANCE)
    row, _ = evaluate(
        lambda r: gold_but_str_xfails(r, inst.patch),
        "str-xfails",
        run_sample,
        sample,
        settings,
        tmp_path,
    )
    assert (row.status.value, row.reason) == ("breaking_resolved", "p2p_broken"), row.detail
    assert (
        "tests/test_money.py::test_str: integrity: XFAIL came from a xfail raised in ledger/money"
        in row.detail
    )
