"""Integrity, round two: attacks through the eval-time install (the sample's ledger recipe
installs the project at evaluation time, as nearly every Verified recipe does) and through
code that runs while the tests do. A real adversarial A2A participant answers; a real
green agent grades. Nothing the participant's code writes may run outside the sandbox,
and nothing it leaves behind may change what the tests load or how they are graded."""

from __future__ import annotations

import asyncio
import contextlib
import json
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from swegreen.core.dataset import load_dataset
from swegreen.core.eval_script import PHASE_BREAK
from swegreen.sample import SampleBenchmark
from tests.helpers import Server, read_jsonl, start, stop
from tests.test_agent import assess
from tests.test_integrity import FAKE_PASSED_AT_EXIT, REWRITE_REPORTS, crafted_patch, write

# Every git key or file that names a program: each writes a canary named after itself into
# a host directory that no sandbox can see, so a canary there means host code execution.
PLANT_GIT = """
import os as _os, stat as _stat, subprocess as _sp

def _plant_git(mark, label):
    repo = _os.getcwd()
    while not _os.path.isdir(_os.path.join(repo, ".git")) and repo != "/":
        repo = _os.path.dirname(repo)
    git = _os.path.join(repo, ".git")

    def cmd(name):
        return "sh -c 'echo pwned > %s/%s-%s-$(id -u)' #" % (mark, label, name)

    def cfg(*args):
        _sp.run(["git", "-C", repo, "config", *args], check=False)

    cfg("core.fsmonitor", cmd("fsmonitor"))
    cfg("core.pager", cmd("pager"))
    cfg("diff.external", cmd("external-diff"))
    cfg("filter.evil.clean", cmd("filter-clean"))
    cfg("filter.evil.smudge", cmd("filter-smudge"))
    cfg("filter.evil.process", cmd("filter-process"))
    cfg("diff.evil.textconv", cmd("textconv"))
    hooks = _os.path.join(repo, "evil-hooks")
    for where in (hooks, _os.path.join(git, "hooks")):
        _os.makedirs(where, exist_ok=True)
        for hook in ("post-checkout", "post-index-change", "reference-transaction",
                     "pre-commit", "post-commit", "fsmonitor-watchman"):
            path = _os.path.join(where, hook)
            with open(path, "w") as fh:
                fh.write("#!/bin/sh\\n" + cmd("hook-" + hook).split(" #")[0] + "\\n")
            _os.chmod(path, 0o755)
    cfg("core.hooksPath", hooks)
    with open(_os.path.join(repo, "evil.cfg"), "w") as fh:
        fh.write("[core]\\n\\tfsmonitor = %s\\n" % cmd("include"))
    cfg("include.path", _os.path.join(repo, "evil.cfg"))
    _os.makedirs(_os.path.join(git, "info"), exist_ok=True)
    with open(_os.path.join(git, "info", "attributes"), "w") as fh:
        fh.write("* filter=evil diff=evil\\n")
    with open(_os.path.join(repo, ".gitattributes"), "w") as fh:
        fh.write("* filter=evil diff=evil\\n")
    # where a careless engine keeps its git HOME: the workspace, beside the checkout
    for home in (_os.path.dirname(repo), _os.path.join(_os.path.dirname(repo), "home"),
                 _os.environ.get("HOME", "/nonexistent")):
        try:
            _os.makedirs(home, exist_ok=True)
            with open(_os.path.join(home, ".gitconfig"), "w") as fh:
                fh.write("[core]\\n\\tfsmonitor = %s\\n" % cmd("global"))
        except OSError:
            pass
    # a file that every later git command over the checkout reports as changed
    with open(_os.path.join(repo, "README.md"), "a") as fh:
        fh.write("\\nplanted\\n")
"""

SETUP_PY = """
from setuptools import setup
{plant}
_plant_git({mark!r}, "install")
setup()
"""

SHOW_GIT_TO_TESTS = """
{plant}
def _show():
    import os, subprocess
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(["git", "-C", here, "config", "--list", "--show-origin"],
                         capture_output=True, text=True).stdout
    hooks = sorted(os.listdir(os.path.join(here, ".git", "hooks")))
    hooks = [h for h in hooks if not h.endswith(".sample")]
    lines = ["TESTPHASE-GIT-CONFIG " + out.replace("\\n", " | "), "TESTPHASE-GIT-HOOKS %s" % hooks]
    # pytest captures what collection prints: report once it has let go of stdout
    import atexit
    atexit.register(lambda: print("\\n".join(lines), flush=True))

_show()
{then}
"""


# Install-time code that makes every test pass from outside the repository: a .pth that
# loads a report-rewriting plugin, a sitecustomize, a forged distribution with a pytest11
# entry point, and a module of pytest's own extended with the same hook.
FORCE_PASS_ENV = (
    """
import os, sysconfig
from setuptools import setup

site = sysconfig.get_paths()["purelib"]
"""
    + f"plugin = {REWRITE_REPORTS!r}\n"
    + '''
# pytest's own hook, wrapped in place (its module is one of pytest's built-in plugins)
wrapped = """
_zz_original = pytest_runtest_makereport

def pytest_runtest_makereport(item, call):
    report = _zz_original(item, call)
    report.outcome = "passed"
    report.longrepr = None
    return report
"""

def put(rel, text):
    path = os.path.join(site, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    with open(path, "w") as fh:
        fh.write(text)

for name in ("zz_pth", "zz_custom", "zz_entry"):
    put(name + ".py", plugin)
put("zz_force.pth", "import os; os.environ['PYTEST_PLUGINS'] = 'zz_pth'\\n")
put("sitecustomize.py", "import os\\nos.environ['PYTEST_PLUGINS'] = 'zz_pth,zz_custom'\\n")
put("evil-1.0.dist-info/METADATA", "Metadata-Version: 2.1\\nName: evil\\nVersion: 1.0\\n")
put("evil-1.0.dist-info/entry_points.txt", "[pytest11]\\nevil = zz_entry\\n")
put("evil-1.0.dist-info/RECORD", "zz_entry.py,,\\n")
runner = os.path.join(site, "_pytest", "runner.py")
if "_zz_original" not in open(runner).read():  # setuptools runs setup.py more than once
    put("_pytest/runner.py", open(runner).read() + "\\n" + wrapped)
setup()
'''
)

# Install-time code that shadows the recorder from the repository and the environment, so
# that printed PASSED lines and a forced exit code would go unchallenged.
SHADOW_RECORDER = """
import os, sysconfig
from setuptools import setup

fake = "def pytest_configure(config):\\n    pass\\n"
os.makedirs("_swegreen_recorder", exist_ok=True)
with open("_swegreen_recorder/__init__.py", "w") as fh:
    fh.write(fake)
with open(os.path.join(sysconfig.get_paths()["purelib"], "_swegreen_recorder.py"), "w") as fh:
    fh.write(fake)
setup()
"""


@dataclass
class Outcome:
    rows: dict[str, dict[str, Any]]
    logs: dict[str, str]
    canaries: Path
    env_rows: dict[str, dict[str, Any]]


def run_assessment(
    green: Server,
    session_cache: Path,
    out: Path,
    sample: SampleBenchmark,
    name: str,
    edits: dict[str, Callable[[Path], None]],
    config: dict[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """Answer ``edits``' instances with crafted patches from a real A2A participant
    (``config``: more of the assessment's config)."""
    dataset = {i.instance_id: i for i in load_dataset(str(sample.dataset)).instances}
    lines = []
    for iid, edit in edits.items():
        inst = dataset[iid]
        repo = sample.repos_dir / inst.repo.replace("/", "__")
        patch = crafted_patch(repo, inst.base_commit, out / name / "work" / iid, edit)
        lines.append({"instance_id": iid, "model_name_or_path": name, "model_patch": patch})
    predictions = out / name / "predictions.jsonl"
    predictions.write_text("".join(json.dumps(x) + "\n" for x in lines))
    before = set((out / "green").rglob("instances.jsonl"))
    adversary = start(
        ["participant", "predictions", "--predictions", str(predictions)],
        session_cache,
        out,
        f"adversary-{name}",
    )
    try:
        request = {
            "participants": {"agent": adversary.url},
            "config": {
                "dataset": "swegreen:sample",
                "instance_ids": list(edits),
                **(config or {}),
            },
        }
        outcome = asyncio.run(assess(green.url, request))
        assert outcome.state == "TASK_STATE_COMPLETED", outcome.statuses[-3:]
    finally:
        stop([adversary])
    (run,) = set((out / "green").rglob("instances.jsonl")) - before
    return {r["instance_id"]: r for r in read_jsonl(run)}


@contextlib.contextmanager
def green_agent(
    session_cache: Path, out: Path, env: dict[str, str] | None = None
) -> Iterator[Server]:
    """A real green agent (``swegreen serve``) for a module's assessments, stopped after."""
    green = start(["serve", "--no-diagnoses"], session_cache, out, "green", env=env)
    try:
        yield green
    finally:
        stop([green])


@pytest.fixture(scope="module")
def attacks(
    session_cache: Path, sample: SampleBenchmark, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Outcome]:
    out = tmp_path_factory.mktemp("integrity-install")
    canaries = out / "canaries"
    canaries.mkdir()
    canaries.chmod(0o777)  # whoever ran a planted command could write here: none may
    plant = PLANT_GIT
    with green_agent(session_cache, out) as green:
        rows = run_assessment(
            green,
            session_cache,
            out,
            sample,
            "git",
            {
                # install time: setup.py plants every key; the test-time code shows what
                # git configuration the test phase's own git commands ran under
                "sample__ledger-1": lambda r: (
                    write(r / "setup.py", SETUP_PY.format(plant=plant, mark=str(canaries))),
                    write(
                        r / "ledger" / "__init__.py",
                        SHOW_GIT_TO_TESTS.format(plant="", then=""),
                        True,
                    ),
                ),
                # test time: the package plants every key while the tests import it
                "sample__ledger-2": lambda r: write(
                    r / "ledger" / "__init__.py",
                    SHOW_GIT_TO_TESTS.format(
                        plant=plant, then=f"_plant_git({str(canaries)!r}, 'tests')"
                    ),
                    True,
                ),
            },
        )
        logs = {
            p.parent.name: p.read_text(errors="replace")
            for p in (out / "green").rglob("test_output.txt")
        }
        env_rows = run_assessment(
            green,
            session_cache,
            out,
            sample,
            "env",
            {
                "sample__ledger-1": lambda r: write(r / "setup.py", FORCE_PASS_ENV),
                "sample__ledger-2": lambda r: (
                    write(r / "setup.py", SHADOW_RECORDER),
                    write(r / "ledger" / "__init__.py", FAKE_PASSED_AT_EXIT, True),
                ),
            },
        )
        yield Outcome(rows, logs, canaries, env_rows)


def test_planted_git_configuration_runs_nothing_outside_the_sandbox(attacks: Outcome) -> None:
    assert set(attacks.rows) == {"sample__ledger-1", "sample__ledger-2"}
    assert sorted(p.name for p in attacks.canaries.iterdir()) == []


def test_the_attacks_ran_and_were_graded_as_the_rest_of_their_patch(attacks: Outcome) -> None:
    # planted at test time: the verdict is that of a patch that fixes nothing (the
    # planted README change is the participant's own business)
    row = attacks.rows["sample__ledger-2"]
    assert (row["status"], row["reason"]) == ("no_op", "no_f2p_pass"), row
    assert row["tests_ran"] is True and row["isolation"] == "bwrap"
    # the test-time planting did run (inside the sandbox): its git saw the keys
    assert "filter.evil.clean" in attacks.logs["sample__ledger-2"]


def test_git_configuration_the_install_writes_ends_the_row_before_the_tests(
    attacks: Outcome,
) -> None:
    """The install's writes to .git are read against the prepared .git before it is
    thrown away: the row ends naming them, and no test phase runs after them (before,
    .git was replaced silently and the test phase's git ran under the prepared one)."""
    row = attacks.rows["sample__ledger-1"]
    assert (row["status"], row["reason"]) == ("error", "workspace_tampering"), row
    assert "wrote to the checkout's .git" in row["detail"] and "config" in row["detail"], row
    log = attacks.logs.get("sample__ledger-1", "")
    assert not [ln for ln in log.splitlines() if ln.startswith("TESTPHASE-GIT-")], log[-2000:]


def test_what_the_install_wrote_into_the_environment_is_put_back(attacks: Outcome) -> None:
    row = attacks.env_rows["sample__ledger-1"]
    assert (row["status"], row["reason"]) == ("no_op", "no_f2p_pass"), row
    put_back = {f.rsplit("site-packages/", 1)[-1] for f in row["tampered_files"]}
    assert {
        "zz_pth.py",
        "zz_custom.py",
        "zz_entry.py",
        "zz_force.pth",
        "sitecustomize.py",
        "evil-1.0.dist-info",
        "_pytest/runner.py",
    } <= put_back, row["tampered_files"]
    assert row["tampered"] is True


def test_the_recorder_cannot_be_shadowed(attacks: Outcome) -> None:
    row = attacks.env_rows["sample__ledger-2"]
    assert (row["status"], row["reason"]) == ("error", "log_tampering"), row
    assert "pytest recorded failed, the log says PASSED" in row["detail"]


def test_payloads_compile() -> None:
    """The payloads are Python the sandbox will run: a typo would make every check vacuous."""
    compile(SETUP_PY.format(plant=PLANT_GIT, mark="/x"), "setup.py", "exec")
    compile(SHOW_GIT_TO_TESTS.format(plant=PLANT_GIT, then="pass"), "init.py", "exec")
    compile(FORCE_PASS_ENV, "setup.py", "exec")
    compile(SHADOW_RECORDER, "setup.py", "exec")
    assert textwrap.dedent(PLANT_GIT).count("cfg(") > 8


def test_an_install_that_runs_gets_a_sandbox_of_its_own(attacks: Outcome) -> None:
    """A patch that changes setup.py has its install run, and the tests run in a second
    sandbox after the put-back; one that changes no build input runs in one sandbox."""
    seen = set()
    for script in (attacks.canaries.parent / "green").rglob("eval.sh"):
        installs = "a/setup.py" in (script.parent / "patch.diff").read_text()
        assert (PHASE_BREAK in script.read_text()) == installs, script
        seen.add(installs)
    assert seen == {True, False}
