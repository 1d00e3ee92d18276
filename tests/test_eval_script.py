"""The eval script has the official shape: markers, exit code, test patch, directives."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from swebench.harness.constants import START_TEST_OUTPUT

from swegreen.core.dataset import parse_rows
from swegreen.core.eval_script import (
    READONLY_RESET,
    SKIPPED_INSTALL,
    TIME_START,
    adapt_eval_script,
    declares_dependencies,
    editable_install,
    eval_phases,
    get_test_directives,
    image_eval_phases,
    make_eval_script,
    modified_test_files,
    new_test_files,
    official_lines,
    reinstall_changes_nothing,
    runs_no_project_code,
)
from swegreen.core.patches import inspect_patch
from swegreen.core.recipes import Recipe

from .helpers import raw_row

TEST_PATCH = (
    "diff --git a/tests/test_x.py b/tests/test_x.py\n--- a/tests/test_x.py\n+++ b/tests/test_x.py\n"
    "@@ -1 +1,2 @@\n x = 1\n+y = 2\n"
    "diff --git a/tests/new_test.py b/tests/new_test.py\nnew file mode 100644\n--- /dev/null\n"
    "+++ b/tests/new_test.py\n@@ -0,0 +1 @@\n+z = 3\n"
    "diff --git a/tests/data.json b/tests/data.json\n--- a/tests/data.json\n+++ b/tests/data.json\n"
    "@@ -1 +1 @@\n-{}\n+[]\n"
)
RECIPE = Recipe(python="host", test_cmd="pytest -rA", install="python -m pip install -e .")


def instance(**kw: object):
    return parse_rows([raw_row(1, test_patch=TEST_PATCH, **kw)])[0]


def test_test_files_are_the_modified_ones_and_directives_skip_data_files() -> None:
    assert modified_test_files(TEST_PATCH) == ["tests/test_x.py", "tests/data.json"]
    assert get_test_directives(instance(), "paths") == ["tests/test_x.py", "tests/new_test.py"]
    assert get_test_directives(instance(), "django") == ["test_x", "new_test"]


def test_script_follows_the_official_order() -> None:
    script = make_eval_script(instance(), RECIPE, "/ws/repo")
    lines = script.splitlines()
    assert lines[:2] == ["#!/bin/bash", "set -uxo pipefail"]
    order = [
        "python -m pip install -e .",
        f"git checkout {'c' * 40} tests/test_x.py tests/data.json",
        "git apply -v - <<'EOF_114329324912'",
        ": '>>>>> Start Test Output'",
        "pytest -rA tests/test_x.py tests/new_test.py",
        "SWEBENCH_TEST_EXIT_CODE=$?",
        ": '>>>>> End Test Output'",
        'echo ">>>>> Test Exit Code: $SWEBENCH_TEST_EXIT_CODE"',
    ]
    positions = [lines.index(item) for item in order]
    assert positions == sorted(positions)
    assert lines[-2:] == [
        f"git checkout {'c' * 40} tests/test_x.py tests/data.json",
        'exit "$SWEBENCH_TEST_EXIT_CODE"',  # the phase's status is the test command's
    ]
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)  # valid bash


def test_the_script_splits_where_the_test_files_are_reset() -> None:
    """The install runs in a sandbox of its own; the test phase starts with the reset, from
    the workspace and with the exports made before (django's LANG)."""
    recipe = RECIPE.model_copy(update={"eval_commands": ("export LANG=en_US.UTF-8",)})
    phases = eval_phases(instance(), recipe, "/ws/repo")
    assert "python -m pip install -e ." in phases.prepare
    assert "git apply" not in phases.prepare and START_TEST_OUTPUT not in phases.prepare
    test_lines = phases.test.splitlines()
    assert test_lines[2:5] == [
        "cd /ws/repo",
        "export LANG=en_US.UTF-8",
        f"git checkout {'c' * 40} tests/test_x.py tests/data.json",
    ]
    assert "pip install" not in phases.test
    for part in (phases.prepare, phases.test, phases.script):
        subprocess.run(["bash", "-n"], input=part, text=True, check=True)


def test_with_read_only_test_files_only_the_reset_after_the_tests_is_left_out() -> None:
    """The engine's sandbox mounts the test files read-only for the test phase: the reset
    before the test patch stays, the one after the end marker (which could only fail,
    into every log) is replaced by a line that says so; the official row script too."""
    reset = f"git checkout {'c' * 40} tests/test_x.py tests/data.json"
    official = eval_phases(instance(), RECIPE, "/ws/repo").test.splitlines()
    phases = eval_phases(instance(), RECIPE, "/ws/repo", readonly_tests=True)
    lines = phases.test.splitlines()
    assert official.count(reset) == 2 and lines.count(reset) == 1
    assert lines.index(reset) < lines.index(": '>>>>> Start Test Output'")
    end = lines.index(": '>>>>> End Test Output'")
    assert READONLY_RESET in lines[end:]
    # everything else is the official script, line for line
    last = len(official) - 1 - official[::-1].index(reset)
    assert [ln for ln in lines if ln != READONLY_RESET] == official[:last] + official[last + 1 :]
    script = make_eval_script(instance(), RECIPE, "/ws/repo")
    row = instance(eval_script=script)
    adapted = eval_phases(row, RECIPE, "/ws/repo", readonly_tests=True).test.splitlines()
    assert adapted.count(reset) == 1 and READONLY_RESET in adapted
    subprocess.run(["bash", "-n"], input=phases.test, text=True, check=True)


def test_a_sandbox_wrapper_only_wraps_the_test_command() -> None:
    script = make_eval_script(instance(), RECIPE, "/ws/repo", test_wrapper="unshare --net --")
    assert "unshare --net -- bash -c 'pytest -rA tests/test_x.py tests/new_test.py'" in script
    assert script.count("unshare") == 1


def test_the_sandbox_setup_runs_before_the_clock_and_outside_the_graded_region() -> None:
    """The sandbox's own steps come after the test patch is applied (the read-only binds
    show its files) and before the clock stamp and the start marker: the test command's
    recorded time and the graded log hold none of them. Rows with their own eval script too."""
    upstream = official_lines(instance(), RECIPE, conda=True)  # as the hub's rows hold it
    own = instance(eval_script="\n".join(["#!/bin/bash", "set -uxo pipefail", *upstream]))
    for row in (instance(), own):
        test = eval_phases(row, RECIPE, "/ws/repo", "W", test_setup="S --setup").test
        lines = test.splitlines()
        setup = lines.index("S --setup")
        start = next(i for i, ln in enumerate(lines) if ln.startswith(f"{TIME_START}="))
        marker = lines.index(f": '{START_TEST_OUTPUT}'")
        applied = max(i for i, ln in enumerate(lines) if ln.startswith("git apply"))
        assert applied < setup < start < marker, lines
        assert test.count("S --setup") == 1
        assert "W bash -c 'pytest -rA tests/test_x.py tests/new_test.py'" in test
        subprocess.run(["bash", "-n"], input=test, text=True, check=True)


def test_rows_with_their_own_eval_script_run_it_outside_the_image() -> None:
    official = "\n".join(
        [
            "#!/bin/bash",
            "set -uxo pipefail",
            "source /opt/miniconda3/bin/activate",
            "conda activate testbed",
            "cd /testbed",
            "git checkout abc tests/t.py",
            ": '>>>>> Start Test Output'",
            "pytest -rA tests/t.py",
            ": '>>>>> End Test Output'",
            "git checkout abc tests/t.py",
        ]
    )
    script = adapt_eval_script(official, "/ws/repo", test_wrapper="W")
    assert "conda" not in script and "/testbed" not in script and "cd /ws/repo" in script
    assert "W bash -c 'pytest -rA tests/t.py'" in script
    assert "SWEBENCH_TEST_EXIT_CODE=$?" in script
    assert make_eval_script(
        instance(eval_script=official), RECIPE, "/ws/repo"
    ) == adapt_eval_script(official, "/ws/repo")


def test_the_script_really_runs_and_records_the_exit_code(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "tests").mkdir()
    (repo / "tests" / "test_x.py").write_text("x = 1\n")
    (repo / "tests" / "data.json").write_text("{}\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    base = subprocess.run(
        [*git, "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    inst = parse_rows([raw_row(1, base_commit=base, test_patch=TEST_PATCH)])[0]
    recipe = Recipe(python="host", test_cmd="sh -c 'ls tests; exit 3'")
    script = make_eval_script(inst, recipe, str(repo))
    out = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        cwd=repo,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    log = out.stdout + out.stderr
    assert "new_test.py" in log  # the test patch was applied before the tests ran
    assert ">>>>> Test Exit Code: 3" in log
    assert json.loads((repo / "tests" / "data.json").read_text()) == {}  # reset afterwards


def test_the_test_phase_puts_the_test_files_back_from_the_commit_not_a_replacement(
    tmp_path: Path,
) -> None:
    """A replace ref for the base commit (``.git/refs/replace/<base>``, which code run
    before the tests could write) would have the reset check the test files out of a
    forged tree: the pinned part of the test phase reads the commit as it is."""
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "tests" / "test_x.py").write_text("x = 1\n")
    (repo / "tests" / "data.json").write_text("{}\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    rev = lambda: subprocess.run(  # noqa: E731
        [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    base = rev()
    (repo / "tests" / "test_x.py").write_text("x = 1  # forged, the fix's behaviour\n")
    subprocess.run([*git, "commit", "-qam", "forged"], check=True)
    subprocess.run([*git, "replace", base, rev()], check=True)
    inst = parse_rows([raw_row(1, base_commit=base, test_patch=TEST_PATCH)])[0]
    recipe = Recipe(python="host", test_cmd="cat tests/test_x.py")
    for pin, expected in ((None, "forged"), ("/usr/bin:/bin", "x = 1\ny = 2\n")):
        test = eval_phases(inst, recipe, str(repo), pin_path=pin).test
        out = subprocess.run(
            ["bash", "-c", test],
            capture_output=True,
            text=True,
            cwd=repo,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )
        assert expected in out.stdout, out.stdout + out.stderr
        subprocess.run([*git, "checkout", "-q", "-f", base], check=True)
        subprocess.run([*git, "clean", "-qfd"], check=True)


def test_the_test_phase_finds_its_own_tools_on_the_pinned_path_only() -> None:
    """Everything of the test phase but the test command runs with PATH pinned to the
    system's: the reset and the test patch's `git` cannot be the environment's."""
    test = eval_phases(instance(), RECIPE, "/w", "WRAP", pin_path="/usr/bin:/bin").test
    lines = test.splitlines()
    git = "export GIT_NO_REPLACE_OBJECTS=1"
    pin = lines.index(f'SWEGREEN_PATH="$PATH"; PATH=/usr/bin:/bin; {git}')
    restore = lines.index('PATH="$SWEGREEN_PATH"; unset GIT_NO_REPLACE_OBJECTS')
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f": '{START_TEST_OUTPUT}"))
    end = next(i for i, ln in enumerate(lines) if ln.startswith(": '>>>>> End Test Output"))
    repin = lines.index(f"PATH=/usr/bin:/bin; {git}")
    gits = [i for i, ln in enumerate(lines) if ln.startswith("git ")]
    assert pin < min(gits) and restore < start < end < repin < max(gits)
    assert all(not (restore < i < repin) for i in gits)  # no git outside the pin
    assert "PATH" not in eval_phases(instance(), RECIPE, "/w", "WRAP").test  # not asked


def test_the_eval_time_reinstall_is_skipped_only_where_it_can_change_nothing() -> None:
    top = ["pkg", "tests", "docs", "setup.py"]
    editable = "python -m pip install -e .[test]"
    assert editable_install(editable) and editable_install("python setup.py develop")
    assert editable_install("pip install -e . && pip install --editable ./sub")
    for install in ("python -m pip install .", "python setup.py install", "", None):
        assert not editable_install(install)
    assert not editable_install("python setup.py build; python setup.py install")
    assert reinstall_changes_nothing(editable, ["pkg/core.py", "pkg/sub/x.py"], top)
    assert reinstall_changes_nothing(editable, [], top)
    for touched in (
        "setup.py",  # a build input
        "pkg/setup.cfg",
        "pyproject.toml",
        "pkg/_speedups.c",  # an extension source
        "pkg/_cy.pyx",
        "README.rst",  # any top-level file: setup.py may read it
        "newpkg/__init__.py",  # a new top-level package: an editable finder may not map it
    ):
        assert not reinstall_changes_nothing(editable, ["pkg/core.py", touched], top), touched
    assert not reinstall_changes_nothing("python -m pip install .", ["pkg/core.py"], top)


def test_a_skipped_install_leaves_only_its_line_out_saying_so() -> None:
    recipe = RECIPE.model_copy(update={"install": "python -m pip install -e ."})
    ran = eval_phases(instance(), recipe, "/ws/repo")
    skipped = eval_phases(instance(), recipe, "/ws/repo", skip_install=True)
    assert "python -m pip install -e ." in ran.prepare.splitlines()
    assert "python -m pip install -e ." not in skipped.prepare
    assert SKIPPED_INSTALL in skipped.prepare.splitlines()
    assert skipped.test == ran.test
    assert [ln for ln in skipped.prepare.splitlines() if ln != SKIPPED_INSTALL] == [
        ln for ln in ran.prepare.splitlines() if ln != "python -m pip install -e ."
    ]
    # a row's own eval script: its install line, the same way
    row = instance(eval_script=make_eval_script(instance(), recipe, "/testbed"))
    own = eval_phases(row, recipe, "/ws/repo", skip_install=True)
    assert SKIPPED_INSTALL in own.prepare.splitlines()
    assert "python -m pip install -e ." not in own.prepare
    subprocess.run(["bash", "-n"], input=skipped.prepare, text=True, check=True)


def test_only_a_prepare_phase_of_reports_and_no_ops_counts_as_running_nothing() -> None:
    """Where the install is skipped the environment guard takes no snapshot: only when
    every line of the phase provably runs nothing of the project's."""
    recipe = RECIPE.model_copy(
        update={"install": "python -m pip install -e .", "eval_commands": ("export LANG=C.UTF-8",)}
    )
    skipped = eval_phases(instance(), recipe, "/ws/repo", skip_install=True).prepare
    assert runs_no_project_code(skipped)
    assert not runs_no_project_code(eval_phases(instance(), recipe, "/ws/repo").prepare)
    for added in (
        "export X=$(python -c 'import evil')",
        "export X=`python setup.py`",
        "python -m pip install -e .",
        "git diff HEAD; python conftest.py",
        "cd /ws/repo && python x.py",
        "git -c core.fileMode=false diff origin/main",
    ):
        assert not runs_no_project_code(skipped + added + "\n"), added


def test_a_patch_that_changes_where_dependencies_are_declared_is_told_apart() -> None:
    """Its eval-time install may download (the Docker backend keeps the network for it):
    of the 500 Verified gold patches, exactly pylint-dev__pylint-4661's (setup.cfg)."""
    paths = ["setup.cfg", "pkg/setup.py", "requirements/dev.txt", "pyproject.toml", "a/b.py",
             "docs/setup.rst", "MANIFEST.in"]  # fmt: skip
    assert declares_dependencies(paths) == paths[:4]
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "swebench_verified.jsonl"
    if not shared.is_file():
        return
    rows = [json.loads(line) for line in shared.read_text().splitlines()]
    hits = [
        r["instance_id"] for r in rows
        if declares_dependencies(inspect_patch(r["patch"]).paths)
    ]  # fmt: skip
    assert hits == ["pylint-dev__pylint-4661"]


def test_a_test_patch_that_only_adds_files_resets_them_by_removing_them() -> None:
    """Not ``git checkout <base>`` with no file, which would undo the image's setup commit
    (upstream's repair): the new files are removed before the test patch and after the
    tests, and the test phase starts at that removal."""
    only_new = TEST_PATCH[TEST_PATCH.index("diff --git a/tests/new_test.py") :]
    only_new = only_new[: only_new.index("diff --git a/tests/data.json")]
    row = parse_rows([raw_row(1, test_patch=only_new)])[0]
    assert new_test_files(only_new) == ["tests/new_test.py"]
    for conda in (False, True):
        lines = official_lines(row, RECIPE, conda=conda)
        assert [ln for ln in lines if ln.startswith(("git checkout", "rm -f"))] == [
            "rm -f tests/new_test.py", "rm -f tests/new_test.py"
        ]  # fmt: skip
    phases = image_eval_phases(row, RECIPE)
    assert "rm -f" not in phases.prepare
    assert phases.test.count("rm -f tests/new_test.py") == 2
