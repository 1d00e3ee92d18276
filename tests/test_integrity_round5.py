"""Integrity, round five (b): test configuration read as pytest reads it, and whatever
configures pytest's session compared with what configures it on the base commit.

A patch adds a pytest plugin that turns every failed call into a pass, and a setup.cfg
whose ``[tool:pytest]`` section (``addopts = -p <that plugin>``) follows a ``[flake8]``
section across form feeds: configparser reads one section, pytest's iniconfig two. Two
defences stand, each tested alone: the put-back reads the file as each of its consumers
does and removes it (the row is graded as the code it is), and the recorder's census of
the session (its plugins, configuration file and values) differs from the base commit's,
which ends the row ``error/log_tampering`` even where the put-back is made to miss the
file. With both taken away the attack resolves the row: the test shows it bites.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from swegreen.evaluation.eval_run import EvalRuns
from swegreen.evaluation.settings import LocalSettings
from swegreen.sample import SampleBenchmark
from swegreen.sandbox import tamper
from tests import test_integrity_round4 as round4
from tests.conftest import RunSample
from tests.test_integrity import write
from tests.test_integrity_tools import evaluate_crafted

# the engine as round four runs it: bubblewrap, and Landlock as a non-root engine has it
isolation, settings = round4.isolation, round4.settings

INSTANCE = "sample__ledger-2"
PLUGIN = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.outcome, report.longrepr = "passed", None
"""
HIDDEN = "[flake8]\nmax-line-length = 99\f[tool:pytest]\faddopts = -p ledger._report\n"


def hidden_plugin(repo: Path) -> None:
    write(repo / "ledger" / "_report.py", PLUGIN)
    write(repo / "setup.cfg", HIDDEN)


@pytest.fixture
def put_back_as_configparser_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The put-back as it was: setup.cfg read by configparser alone."""
    readers = tamper._readers
    monkeypatch.setattr(tamper, "_readers", lambda name: readers(name)[:1])


@pytest.fixture
def no_census(monkeypatch: pytest.MonkeyPatch) -> None:
    async def none(self: EvalRuns, testbed: object) -> None:
        return None

    monkeypatch.setattr(EvalRuns, "take_census", none)


def test_a_pytest_section_behind_form_feeds_is_put_back(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, tmp_path: Path
) -> None:
    row, log = evaluate_crafted(
        hidden_plugin, "r5-hidden", run_sample, sample, settings, tmp_path, INSTANCE
    )
    assert "setup.cfg" in row.tampered_files, row
    assert "FAILED tests/test_account.py" in log, log[-2000:]
    assert (row.status.value, row.reason) == ("no_op", "no_f2p_pass"), row.detail


@pytest.mark.usefixtures("put_back_as_configparser_reads")
def test_a_plugin_the_base_commit_does_not_load_ends_the_row(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, tmp_path: Path
) -> None:
    row, log = evaluate_crafted(
        hidden_plugin, "r5-census", run_sample, sample, settings, tmp_path, INSTANCE
    )
    assert "setup.cfg" not in row.tampered_files  # the put-back missed it, as before
    assert "PASSED tests/test_account.py::test_withdraw_overdraft_raises" in log  # the plugin bit
    assert (row.status.value, row.reason) == ("error", "log_tampering"), row.detail
    assert "plugin ledger._report @ repo:ledger/_report.py" in row.detail, row.detail
    assert "configuration file is repo:setup.cfg, the base" in row.detail, row.detail


@pytest.mark.usefixtures("put_back_as_configparser_reads", "no_census")
def test_without_either_defence_the_attack_resolves(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, tmp_path: Path
) -> None:
    row, _ = evaluate_crafted(
        hidden_plugin, "r5-bare", run_sample, sample, settings, tmp_path, INSTANCE
    )
    assert (row.status.value, row.reason) == ("resolved", "all_tests_pass"), row.detail


# The eval-time install (ledger's recipe installs the project) writes a replace ref for
# the base commit, as it would to have the test files put back from a forged tree.
REPLACE_REF = """
import os, subprocess
base = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout
os.makedirs(".git/refs/replace", exist_ok=True)
with open(".git/refs/replace/" + base.strip(), "w") as fh:
    fh.write(base)
from setuptools import setup
setup()
"""


def test_a_write_to_git_by_the_install_ends_the_row(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, tmp_path: Path
) -> None:
    row, _ = evaluate_crafted(
        lambda r: write(r / "setup.py", REPLACE_REF),
        "r5-replace",
        run_sample,
        sample,
        settings,
        tmp_path,
        INSTANCE,
    )
    assert (row.status.value, row.reason) == ("error", "workspace_tampering"), row.detail
    assert "refs/replace/" in row.detail, row.detail


# The install rewrites the tracked root conftest.py into a force-pass plugin and marks it
# assume-unchanged in the checkout's index (the Docker backend's twin of this test:
# tests/test_docker_round5.py): the engine reads its own copy of the index, not this one.
HIDDEN_BY_THE_INDEX = """
import subprocess
from setuptools import setup
open("conftest.py", "w").write(
    "import pytest\\n\\n\\n@pytest.hookimpl(hookwrapper=True)\\n"
    "def pytest_runtest_makereport(item, call):\\n"
    "    outcome = yield\\n"
    "    outcome.get_result().outcome = 'passed'\\n"
)
subprocess.run(["git", "update-index", "--assume-unchanged", "conftest.py"], check=True)
setup()
"""


def test_a_test_file_the_index_hides_is_put_back(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, tmp_path: Path
) -> None:
    row, _ = evaluate_crafted(
        lambda r: write(r / "setup.py", HIDDEN_BY_THE_INDEX),
        "r5-index",
        run_sample,
        sample,
        settings,
        tmp_path,
        "sample__ledger-1",
    )
    assert (row.status.value, row.reason) == ("no_op", "no_f2p_pass"), row.detail
    assert "conftest.py" in row.tampered_files, row
