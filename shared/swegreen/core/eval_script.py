"""The eval script: what runs an instance's tests, shaped like the official one.

Same steps and markers as swebench's ``make_eval_script_list_py`` (reset the test files,
apply the test patch, ``: '>>>>> Start Test Output'``, the test command, the recorded
exit code, ``: '>>>>> End Test Output'``, reset again), with conda activation replaced by
the environment on PATH and ``/testbed`` by the workspace. Rows that carry their own
``eval_script`` (the newer hub revision) are run as given, with the same substitutions.

The script runs in two phases (``EvalPhases``), each in a sandbox of its own: *prepare*
(everything before the test files are reset: the eval-time install, which may need the
package index) and *test* (reset, test patch, markers, test command). Between the two the
engine puts back any test file or test configuration that the install step, which runs
the participant's code, changed. Their logs, concatenated, are the official log.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from swebench.harness.constants import (
    END_TEST_OUTPUT,
    START_TEST_OUTPUT,
    TEST_EXIT_CODE_VAR,
)
from swebench.utils import get_modified_files
from unidiff import PatchSet

from swegreen.core.dataset import Instance
from swegreen.core.recipes import Recipe
from swegreen.core.related_tests import directives_for
from swegreen.core.upstream import parse_eval_script, record_test_exit_code

HEREDOC = "EOF_114329324912"
# Git's objects as the commits name them: no replace ref (``refs/replace/``) stands
# another tree in for the base commit's when the grading path's git reads it. (A graft
# changes a commit's parents, never its tree; alternates add objects, and an object's
# name is its content's hash: neither can change which files a commit holds.)
GIT_AS_COMMITTED = {"GIT_NO_REPLACE_OBJECTS": "1"}
# The programs an instance image's test phase runs before its test command: the
# system's, never what the eval-time install put first on the environment's PATH.
IMAGE_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CONDA_ACTIVATE = ("source /opt/miniconda3/bin/activate", "conda activate testbed")
# In an instance image these run the image's own activation scripts, outside /testbed,
# which a patch cannot reach: before the eval-time install they run nothing of the patch's.
IMAGE_ACTIVATION = CONDA_ACTIVATE
TIME_START, TIME_END = "SWEGREEN_TEST_START", "SWEGREEN_TEST_END"
_DIFF_TARGET = re.compile(r"diff --git a/.* b/(.*)")
_CONDA_LINES = re.compile(r"^\s*(source /opt/miniconda3/bin/activate|conda activate \S+)\s*$")


def modified_test_files(test_patch: str) -> list[str]:
    """Files the test patch modifies (not creates): reset to the base commit around the run.
    Upstream's own function: a file that git lists without a ---/+++ header (a mode change,
    an empty new file) is not one of them there either."""
    return get_modified_files(test_patch)


def new_test_files(test_patch: str) -> list[str]:
    """Files the test patch creates (upstream's ``get_new_files``: a ``/dev/null`` source)."""
    return [f.path for f in PatchSet(test_patch) if f.source_file == "/dev/null"]


def test_reset(instance: Instance) -> str:
    """The command that resets the test files, before the test patch and after the tests.
    4.1.0 writes ``git checkout <base> <modified files>``; with no modified file (a test
    patch that only adds files: django__django-16877, sphinx-doc__sphinx-8595 and -9711)
    that checks out the base commit itself, which undoes the image's setup commit (sphinx's
    ``-rA`` in tox.ini: no test can be graded). Upstream repaired those three rows' scripts
    to ``rm -f <new files>`` (SWE-bench PR 539, and 542 for the v5 rows); so does this."""
    modified = modified_test_files(instance.test_patch)
    if modified:
        return f"git checkout {instance.base_commit} {' '.join(modified)}"
    return f"rm -f {' '.join(new_test_files(instance.test_patch))}"


def files_of_test_patch(instance: Instance) -> list[str]:
    """Every file the test patch names (upstream's reading of its ``diff --git`` lines)."""
    return _DIFF_TARGET.findall(instance.test_patch)


def get_test_directives(instance: Instance, style: str) -> list[str]:
    """The test files to run, from the test patch; django wants dotted module names."""
    return directives_for(files_of_test_patch(instance), style)


def sandboxed(command: str, wrapper: str | None, shell: str = "bash") -> str:
    """The test command, run through the sandbox's wrapper (e.g. a network namespace) by
    ``shell`` (the engine names the system's, by absolute path: tools.py)."""
    if not wrapper:
        return command
    return f"{wrapper} {shell} -c {shlex.quote(command)}"


@dataclass(frozen=True)
class EvalPhases:
    prepare: str
    test: str

    @property
    def script(self) -> str:
        """Both phases as one script: what is stored as the row's eval.sh."""
        return f"{self.prepare}{PHASE_BREAK}\n{self.test}"


# What an editable install reads besides the package's Python sources: a patch that
# touches one of these (or any file at the top of the repository, which setup.py may read)
# needs upstream's eval-time reinstall; one that touches none gets nothing from it.
BUILD_FILES = frozenset(
    {
        "setup.py",
        "setup.cfg",
        "pyproject.toml",
        "MANIFEST.in",
        "setupext.py",
        "versioneer.py",
        "meson.build",
        "meson_options.txt",
        "CMakeLists.txt",
        "Makefile",
    }
)
# Where a Python project declares what it installs: a patch that changes one may add a
# dependency, which upstream's eval-time install then downloads (its containers have the
# network). Of the 500 Verified gold patches one does: pylint-dev__pylint-4661 (appdirs).
DEPENDENCY_FILES = frozenset({"setup.py", "setup.cfg", "pyproject.toml"})


def declares_dependencies(paths: Iterable[str]) -> list[str]:
    """The files among ``paths`` where a project declares its dependencies."""

    def declares(path: str) -> bool:
        parts = path.split("/")
        return parts[-1] in DEPENDENCY_FILES or any(p.startswith("requirements") for p in parts)

    return [p for p in paths if declares(p)]


EXTENSION_SOURCES = (
    ".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".pyx", ".pxd", ".pxi",
    ".f", ".f90", ".cu", ".in",
)  # fmt: skip
SKIPPED_INSTALL = (
    ": 'swegreen: eval-time reinstall skipped: the patch changes no build input "
    "and the environment holds the editable install'"
)


def editable_install(install: str | None) -> bool:
    """Whether every command of ``install`` installs the checkout in editable mode (its
    sources imported in place): then only build inputs need it to run again."""
    if not install:
        return False
    commands = [c.split() for c in re.split(r";|&&", install) if c.strip()]
    return all(
        ("-e" in words or "--editable" in words or "develop" in words)
        and ("install" in words or "develop" in words)
        for words in commands
    )


def reinstall_changes_nothing(
    install: str | None, paths: Sequence[str], top_level: Iterable[str]
) -> bool:
    """Whether upstream's eval-time ``install`` can change nothing for a patch touching
    ``paths``: an editable install, no build input touched (``BUILD_FILES``, extension
    sources, any top-level file), nothing added outside the existing top-level
    directories (``top_level``: a new package a static editable finder would not map)."""
    if not editable_install(install):
        return False
    existing = set(top_level)
    for path in paths:
        head, _, rest = path.partition("/")
        name = path.rsplit("/", 1)[-1]
        if not rest or head not in existing:
            return False
        if name in BUILD_FILES or name.endswith(EXTENSION_SOURCES):
            return False
    return True


# The prepare phase's lines that run nothing of the project's: where every line is one of
# these (the eval-time install skipped), no participant code runs before the tests, and
# the environment cannot have changed (eval_run.py then takes no environment snapshot).
_INERT = re.compile(
    r"^(#.*|set -[a-z]+ \w+|cd \S+|export [A-Za-z_][A-Za-z0-9_]*=[^`$;&|<>()]*"
    r"|git config --global --add safe\.directory \S+|git status|git show"
    r"|git -c core\.fileMode=false diff [0-9a-f]{7,40}|: '[^']*'|)$"
)


def runs_no_project_code(script: str, trusted: Sequence[str] = ()) -> bool:
    """Whether every line of a phase is inert (``_INERT``): git's reports, directory
    changes, constant exports, no-ops; or one of ``trusted``, lines that run only what the
    patch cannot change (an instance image's conda activation: ``IMAGE_ACTIVATION``)."""
    return all(
        _INERT.match(line.strip()) or line.strip() in trusted for line in script.splitlines()
    )


def _without_install(lines: list[str], install: str) -> list[str]:
    return [SKIPPED_INSTALL if ln.strip() == install.strip() else ln for ln in lines]


PHASE_BREAK = "# ---- the test phase runs in a sandbox of its own from here ----"
_KEEP_FOR_TESTS = re.compile(r"^\s*(export|source|\.|conda\s+activate)\s")


# In the engine's sandbox the test files are read-only mounts during the test phase: the
# upstream reset after the tests cannot unlink them ("Device or resource busy") and would
# print an error into every honest log. It changes nothing that is graded (the log ends
# at the end marker; the workspace is discarded), so it is left out there, saying so.
READONLY_RESET = ": 'swegreen: no reset after the tests (the test files are read-only)'"
RESETS = ("git checkout ", "rm -f ")  # how an eval script resets the test files


def _no_reset_after(lines: list[str]) -> list[str]:
    end = next((i for i, ln in enumerate(lines) if END_TEST_OUTPUT in ln), None)
    if end is None:
        return lines
    tail = [READONLY_RESET if ln.startswith(RESETS) else ln for ln in lines[end + 1 :]]
    return [*lines[: end + 1], *tail]


def split_phases(
    lines: list[str], workdir: str, pin_path: str | None = None, readonly_tests: bool = False
) -> EvalPhases:
    """Split an eval script's commands where the test files are reset (the last
    ``git checkout`` or ``rm -f`` before the start marker, else the test patch's
    ``git apply``). The test phase starts again from the working directory and the
    exports made before.
    ``pin_path``: the test phase's own commands before the start marker (the reset and
    the test patch's ``git apply``) find their tools there, not on the environment's
    PATH, whose first directory the participant's install may have filled."""
    start = next((i for i, ln in enumerate(lines) if START_TEST_OUTPUT in ln), len(lines))
    cut = next((i for i in range(start - 1, -1, -1) if lines[i].startswith(RESETS)), None)
    if cut is None:
        cut = next((i for i in range(start) if lines[i].startswith("git apply")), start)
    prelude = [f"cd {workdir}"] + [ln for ln in lines[:cut] if _KEEP_FOR_TESTS.match(ln)]
    rest = _no_reset_after(lines[cut:]) if readonly_tests else lines[cut:]
    test = record_test_exit_code([*prelude, *rest])
    if pin_path is not None:
        test = _pinned(test, len(prelude), pin_path)
    if any(ln.startswith(f"{TEST_EXIT_CODE_VAR}=") for ln in test):
        # The phase's exit status is the test command's: the engine reads it from the
        # process, where nothing the tests print can reach it.
        test.append(f'exit "${TEST_EXIT_CODE_VAR}"')
    return EvalPhases(prepare=_script(lines[:cut]), test=_script(test))


def eval_commands(script: str) -> frozenset[str]:
    """The programs a phase of the eval script runs by name (the first word of each of
    its commands, heredoc bodies aside): a launcher the install makes under one of these
    names would run in their place wherever PATH is not pinned (``git``, ``rm``)."""
    names: set[str] = set()
    ending = None
    for line in script.splitlines():
        if ending is not None:
            ending = None if line.strip() == ending else ending
            continue
        if heredoc := re.search(r"<<-?\s*'?\"?(\w+)", line):
            ending = heredoc.group(1)
        for command in re.split(r"&&|\|\||[;|&(){}]", line):
            words = [w for w in command.split() if not re.match(r"^\w+=", w)]
            if words and re.fullmatch(r"[\w./+-]+", words[0]):
                names.add(words[0].rsplit("/", 1)[-1])
    return frozenset(names - {""})


def _marks(line: str, marker: str) -> bool:
    """Whether ``line`` is the script's own ``: '<marker>'`` line (not a command naming it)."""
    return line.startswith(":") and marker in line


def _pinned(lines: list[str], start: int, pin_path: str) -> list[str]:
    """``lines`` from ``start`` on with ``PATH`` pinned and git reading objects as
    committed (``GIT_AS_COMMITTED``), but between the markers (the test command, the
    record of its exit code), which see neither."""
    git = " ".join(f"{k}={shlex.quote(v)}" for k, v in GIT_AS_COMMITTED.items())
    pin = f"PATH={shlex.quote(pin_path)}; export {git}"
    out = [*lines[:start], f'SWEGREEN_PATH="$PATH"; {pin}']
    for line in lines[start:]:
        if _marks(line, START_TEST_OUTPUT):
            out.append(f'PATH="$SWEGREEN_PATH"; unset {" ".join(GIT_AS_COMMITTED)}')
        out.append(line)
        if _marks(line, END_TEST_OUTPUT):
            out.append(pin)
    return out


def make_eval_script(
    instance: Instance, recipe: Recipe, workdir: str, test_wrapper: str | None = None
) -> str:
    return eval_phases(instance, recipe, workdir, test_wrapper).script


def eval_phases(
    instance: Instance,
    recipe: Recipe,
    workdir: str,
    test_wrapper: str | None = None,
    pin_path: str | None = None,
    shell: str = "bash",
    readonly_tests: bool = False,
    skip_install: bool = False,
    directives: Sequence[str] | None = None,
    test_setup: str | None = None,
) -> EvalPhases:
    """``test_wrapper``: what the test command runs under; ``test_setup``: the sandbox's
    own steps, run just before the start marker (``with_setup``).
    ``readonly_tests``: the test files are read-only mounts in the test phase (the
    engine's sandbox): the reset after the tests is left out (``READONLY_RESET``).
    ``skip_install``: the recipe's install line is left out, saying so, where it can
    change nothing (``reinstall_changes_nothing``, decided by the engine).
    ``directives``: the test command names these instead of the test patch's files (the
    regression check's wider run; never a graded one)."""
    if instance.eval_script:
        script = instance.eval_script
        if directives is not None:
            script = widened_script(
                script, get_test_directives(instance, recipe.directive_style), directives
            )
        phases = adapt_eval_phases(
            script, workdir, test_wrapper, pin_path, shell, readonly_tests, test_setup
        )
        if skip_install and recipe.install:
            lines = _without_install(phases.prepare.splitlines(), recipe.install)
            phases = EvalPhases(prepare="\n".join(lines) + "\n", test=phases.test)
        return phases
    lines = official_lines(
        instance, recipe, workdir, test_wrapper, shell=shell, directives=directives
    )
    if skip_install and recipe.install:
        lines = _without_install(lines, recipe.install)
    return split_phases(with_setup(lines, test_setup), workdir, pin_path, readonly_tests)


def official_lines(
    instance: Instance,
    recipe: Recipe,
    workdir: str = "/testbed",
    test_wrapper: str | None = None,
    conda: bool = False,
    shell: str = "bash",
    directives: Sequence[str] | None = None,
) -> list[str]:
    """The commands of swebench 4.1.0's ``make_eval_script_list_py`` (the test files'
    reset as upstream has since repaired it: ``test_reset``); ``conda`` keeps its
    activation lines (for the instance images, which have the ``testbed`` env)."""
    if directives is None:
        directives = get_test_directives(instance, recipe.directive_style)
    reset_tests = test_reset(instance)
    apply_test_patch = f"git apply -v - <<'{HEREDOC}'\n{instance.test_patch}\n{HEREDOC}"
    test_command = " ".join([recipe.test_cmd, *directives])
    activate = list(CONDA_ACTIVATE) if conda else []
    evals = image_eval_commands(recipe) if conda else recipe.eval_commands
    lines = [*activate, f"cd {workdir}", *evals]
    lines += [
        f"git config --global --add safe.directory {workdir}",
        f"cd {workdir}",
        "git status",
        "git show",
        f"git -c core.fileMode=false diff {instance.base_commit}",
        *activate,
    ]
    if recipe.install:
        lines.append(recipe.install)
    lines += [
        reset_tests,
        apply_test_patch,
        f": '{START_TEST_OUTPUT}'",
        sandboxed(test_command, test_wrapper, shell),
        f": '{END_TEST_OUTPUT}'",
        reset_tests,
    ]
    return lines


def image_eval_commands(recipe: Recipe) -> tuple[str, ...]:
    """The eval commands as upstream's script runs them in its image."""
    if recipe.upstream_eval_commands is not None:
        return tuple(recipe.upstream_eval_commands)
    return tuple(recipe.eval_commands)


def image_eval_phases(
    instance: Instance,
    recipe: Recipe,
    skip_install: bool = False,
    test_setup: str | None = None,
) -> EvalPhases:
    """The official eval script as it runs inside the instance image (the Docker backend):
    the row's own ``eval_script`` when it has one, else 4.1.0's, conda activation kept,
    split where the test files are reset like the engine's (``split_phases``);
    ``skip_install``: the eval-time reinstall left out, said in the log, where it can
    change nothing (the engine's rule); ``test_setup``: the backend's own line just before
    the start marker (``with_setup``)."""
    if instance.eval_script:
        lines = parse_eval_script(instance.eval_script)
    else:
        lines = official_lines(instance, recipe, conda=True)
    if skip_install and recipe.install:
        lines = _without_install(lines, recipe.install)
    return split_phases(with_setup(lines, test_setup), "/testbed", IMAGE_SYSTEM_PATH)


def adapt_eval_script(script: str, workdir: str, test_wrapper: str | None = None) -> str:
    return adapt_eval_phases(script, workdir, test_wrapper).script


def adapt_eval_phases(
    script: str,
    workdir: str,
    test_wrapper: str | None = None,
    pin_path: str | None = None,
    shell: str = "bash",
    readonly_tests: bool = False,
    test_setup: str | None = None,
) -> EvalPhases:
    """An official eval script, made to run outside its image."""
    lines = [ln for ln in parse_eval_script(script) if not _CONDA_LINES.match(ln)]
    lines = [ln.replace("/testbed", workdir) for ln in lines]
    for i, line in enumerate(lines):
        if START_TEST_OUTPUT in line and i + 1 < len(lines):
            lines[i + 1] = sandboxed(lines[i + 1], test_wrapper, shell)
            break
    return split_phases(with_setup(lines, test_setup), workdir, pin_path, readonly_tests)


def with_setup(lines: list[str], setup: str | None) -> list[str]:
    """``setup`` (the sandbox's own steps before the tests) just before the start marker:
    outside the region the grader reads, and before the clock stamp that starts the test
    command's time (``_timed``), so neither holds the engine's steps."""
    if not setup:
        return lines
    for i, line in enumerate(lines):
        if _marks(line, START_TEST_OUTPUT):
            return [*lines[:i], setup, *lines[i:]]
    return lines


class NotWidenable(ValueError):
    """A row's own eval script names its tests in a form the regression check cannot
    widen (its test command does not end with the test patch's files)."""


def widened_script(script: str, official: Sequence[str], directives: Sequence[str]) -> str:
    """A row's own eval script with its test command naming ``directives`` instead of
    the ``official`` ones it ends with."""
    lines = script.splitlines()
    for i, line in enumerate(lines):
        if START_TEST_OUTPUT in line and i + 1 < len(lines):
            words = lines[i + 1].split()
            if not official or words[-len(official) :] != list(official):
                raise NotWidenable(
                    "the row's eval script does not end its test command with the test "
                    "patch's files"
                )
            lines[i + 1] = " ".join([*words[: -len(official)], *directives])
            return "\n".join(lines) + "\n"
    raise NotWidenable("the row's eval script has no test command after its start marker")


def _script(lines: list[str]) -> str:
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", *_timed(lines)]) + "\n"


def _timed(lines: list[str]) -> list[str]:
    """Stamp the clock just outside the markers, so the test command's own duration can be
    read from the log (``set -x`` prints the values) without touching the parsed region."""
    out = []
    for line in lines:
        if _marks(line, START_TEST_OUTPUT):
            out.append(f"{TIME_START}=$EPOCHREALTIME")
        out.append(line)
        if _marks(line, END_TEST_OUTPUT):
            out.append(f"{TIME_END}=$EPOCHREALTIME")
    return out


def test_command_seconds(log: str) -> float | None:
    """How long the test command ran, from the clock stamps ``_timed`` put in the log."""
    start = re.search(rf"^\+ {TIME_START}=(\d+[.,]\d+)$", log, re.M)
    end = re.search(rf"^\+ {TIME_END}=(\d+[.,]\d+)$", log, re.M)
    if not (start and end):
        return None
    return float(end.group(1).replace(",", ".")) - float(start.group(1).replace(",", "."))
