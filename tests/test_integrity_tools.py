"""Integrity, round three: the tools around participant code are the system's.

The row's environment ``bin`` is first on the sandbox's PATH, and the patch's eval-time
install fills it (console scripts and scripts its packaging declares are in the installed
RECORD, so the environment guard keeps them). Every tool the engine starts around the
tests (the outer ``timeout``, ``sh``, ``setpriv``), the privileged wrapper of the test
command (``ip``, ``mount``, ``awk``, ``setpriv``, ``bash``) and the test phase's own
commands (the test patch's ``git``) must be the system's: a planted one that runs says so
in the log, with its uid and capabilities, and then runs the real tool.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from swegreen.core.dataset import load_dataset
from swegreen.core.results import InstanceResult
from swegreen.evaluation.settings import LocalSettings
from swegreen.sample import SampleBenchmark
from swegreen.stores import artifacts as art
from tests.conftest import RunSample
from tests.test_integrity import crafted_patch, write

INSTANCE = "sample__ledger-1"  # its recipe installs the project at evaluation time
TOOLS = ("timeout", "sh", "bash", "setpriv", "ip", "mount", "awk", "git", "unshare", "mkdir")
MARK = "SWEGREEN-PLANTED"
PLANTED = f'''
import os, shutil, sys


def main():
    name = os.path.basename(sys.argv[0])
    with open("/proc/self/status") as fh:
        caps = next(line.split()[1] for line in fh if line.startswith("CapEff"))
    sys.stderr.write(f"{MARK} {{name}} uid={{os.getuid()}} caps={{caps}}\\n")
    sys.stderr.flush()
    real = shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
    os.execv(real, [real, *sys.argv[1:]])
'''
SHELL_PLANT = f"""#!/bin/sh
echo "{MARK} $(basename "$0") uid=$(id -u) caps=$(grep CapEff /proc/self/status)" >&2
PATH=/usr/sbin:/usr/bin:/sbin:/bin exec "$(basename "$0")" "$@"
"""


def console_scripts(repo: Path) -> None:
    """Entry points in pyproject.toml: pip writes a launcher per tool into bin/."""
    write(repo / "ledger" / "planted.py", PLANTED)
    entries = "".join(f'{t} = "ledger.planted:main"\n' for t in TOOLS)
    write(repo / "pyproject.toml", "\n[project.scripts]\n" + entries, True)


def data_scripts(repo: Path) -> None:
    """Shell scripts as setup.py's ``scripts``: copied into bin/ as they are."""
    for tool in TOOLS:
        write(repo / "bin" / tool, SHELL_PLANT)
        (repo / "bin" / tool).chmod(0o755)
    names = ", ".join(repr(f"bin/{t}") for t in TOOLS)
    write(repo / "setup.py", f"from setuptools import setup\nsetup(scripts=[{names}])\n")


def evaluate_crafted(
    plant: Callable[[Path], None],
    run_id: str,
    run_sample: RunSample,
    sample: SampleBenchmark,
    settings: LocalSettings,
    tmp_path: Path,
    instance: str = INSTANCE,
) -> tuple[InstanceResult, str]:
    """``plant``'s crafted patch on ``instance``, graded by the real engine in the real
    sandbox: the row, and its test log ("" where none was written)."""
    inst = next(i for i in load_dataset(str(sample.dataset)).instances if i.instance_id == instance)
    repo = sample.repos_dir / inst.repo.replace("/", "__")
    patch = crafted_patch(repo, inst.base_commit, tmp_path / "work", plant)
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text(
        json.dumps({"instance_id": instance, "model_name_or_path": "x", "model_patch": patch})
    )
    [row] = run_sample(str(predictions), run_id=run_id, instance_ids=[instance]).results
    log = settings.output_dir / art.instance_key(run_id, instance, art.TEST_OUTPUT)
    return row, log.read_text() if log.exists() else ""


@pytest.mark.parametrize("plant", [console_scripts, data_scripts])
def test_tools_named_like_the_engine_s_never_run_in_their_place(
    plant, run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, tmp_path: Path
) -> None:
    run_id = f"tools-{plant.__name__.replace('_', '-')}"
    row, log = evaluate_crafted(plant, run_id, run_sample, sample, settings, tmp_path)
    assert "Successfully installed ledger" in log  # the install ran: the plants were made
    planted = [line for line in log.splitlines() if line.startswith(MARK)]
    assert planted == []
    assert (row.status.value, row.reason) == ("no_op", "no_f2p_pass")  # graded as its code
    # a launcher named like a command of the test phase (its reset's git) is named
    assert any(f.endswith("bin/git") for f in row.tampered_files), row.tampered_files


# Install-time code that writes the gold fix as the bytecode cache of the unfixed source:
# stamped with that source's mtime and size, so Python would load it instead.
FORGE_PYC = """
import importlib.util, os
from importlib._bootstrap_external import _code_to_timestamp_pyc
from setuptools import setup

SOURCE = "ledger/money.py"
FIXED = {fixed!r}
st = os.stat(SOURCE)
code = compile(FIXED, os.path.abspath(SOURCE), "exec")
cache = importlib.util.cache_from_source(SOURCE)
os.makedirs(os.path.dirname(cache), exist_ok=True)
with open(cache, "wb") as fh:
    fh.write(_code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size))
setup()
"""


def test_a_forged_bytecode_cache_is_never_loaded(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, tmp_path: Path
) -> None:
    """The fix exists only as a cache of the unfixed source: the tests must see the source."""
    inst = next(i for i in load_dataset(str(sample.dataset)).instances if i.instance_id == INSTANCE)
    repo = sample.repos_dir / inst.repo.replace("/", "__")
    fixed_tree = tmp_path / "fixed"
    crafted_patch(repo, inst.base_commit, fixed_tree, lambda r: None)
    subprocess.run(["git", "-C", str(fixed_tree), "apply", "-"], input=inst.patch, text=True,
                   check=True)  # fmt: skip
    fixed = (fixed_tree / "ledger" / "money.py").read_text()

    def forge(r: Path) -> None:
        write(r / "setup.py", FORGE_PYC.format(fixed=fixed))

    patch = crafted_patch(repo, inst.base_commit, tmp_path / "work", forge)
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text(
        json.dumps({"instance_id": INSTANCE, "model_name_or_path": "x", "model_patch": patch})
    )
    [row] = run_sample(str(predictions), run_id="forged-pyc", instance_ids=[INSTANCE]).results
    assert (row.status.value, row.reason) == ("no_op", "no_f2p_pass")
