"""Test infrastructure belongs to the benchmark: what a participant may not change.

SWE-bench's gold patches never touch tests, test configuration or interpreter start-up
hooks (``tests/test_tamper.py`` checks all 500), so a participant's change to them can
only matter as a way to influence its own grade: a ``conftest.py`` hook that rewrites
reports, a plugin loaded from ``pytest.ini``, an edited test. Such changes are put back
to the prepared state before the tests run, twice: after the patch is applied (what the
patch itself changed) and after the eval-time install (what the participant's code wrote
while it ran). The row lists every file put back.
"""

from __future__ import annotations

import configparser
import fnmatch
import os
import shlex
import shutil
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import iniconfig

from swegreen.processes.procs import run_process
from swegreen.repositories import trusted_git

TEST_DIRS = frozenset({"test", "tests", "testing"})
TEST_FILE_PATTERNS = ("test_*.py", "*_test.py")
TEST_CONFIG_FILES = frozenset(
    {"conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini"}
)
STARTUP_HOOKS = frozenset({"sitecustomize.py", "usercustomize.py"})
# The modules of a runner that lives inside the library it tests, outside its test
# directories: sympy's before 1.6 (``sympy/utilities/runtests.py`` and the helpers its
# tests import from ``pytest.py``; ``sympy/testing/`` from 1.6, a test directory), and any
# ``runtests.py``. No Verified gold patch touches one (tests/test_tamper.py); sympy-13877's
# touches ``utilities/randtest.py``, which is therefore not among them.
RUNNER_MODULE = "runtests.py"
RUNNER_HELPERS = "/utilities/pytest.py"
# Files that hold test configuration in some sections only: protected when those change.
SECTIONED = {
    "setup.cfg": ("tool:pytest", "pytest", "tox:", "testenv"),
    "pyproject.toml": ("tool.pytest", "tool.tox"),
}
GIT_TIMEOUT = 300.0
# Where installs put copies of the package (and its conftest.py files) that no test runs.
BUILD_EXCLUDES = tuple(
    f":(exclude,glob){d}" for d in ("**/build/**", "**/.tox/**", "**/.eggs/**", "**/*.egg-info/**")
)


def protected_reason(path: str, runner_files: frozenset[str] = frozenset()) -> str | None:
    """Why ``path`` (repository-relative) belongs to the benchmark, or None. Files whose
    test sections alone are protected (setup.cfg, pyproject.toml) answer None here: see
    ``sections_changed``."""
    parts = path.split("/")
    name = parts[-1]
    if path in runner_files:
        return "the test command runs it"
    if TEST_DIRS.intersection(parts[:-1]):
        return "inside a test directory"
    if name in TEST_CONFIG_FILES:
        return "test configuration"
    if any(fnmatch.fnmatchcase(name, pattern) for pattern in TEST_FILE_PATTERNS):
        return "a test file"
    if name in STARTUP_HOOKS or name.endswith(".pth"):
        return "an interpreter start-up hook"
    if name == RUNNER_MODULE or path.endswith(RUNNER_HELPERS):
        return "the test runner's own module"
    return None


def runner_files(test_cmd: str, repo: Path) -> frozenset[str]:
    """Files of the repository that the test command itself runs (sympy's ``bin/test``)."""
    found = set()
    for token in shlex.split(test_cmd):
        rel = token.removeprefix("./")
        if rel and not rel.startswith(("-", "/")) and (repo / rel).is_file():
            found.add(rel)
    return frozenset(found)


def _readers(name: str) -> tuple[Callable[[str | None], dict[str, object] | None], ...]:
    """Each reader a consumer of ``name`` uses, as a function of its text. A setup.cfg is
    read by configparser (setuptools, tox 4), which breaks lines at newlines only, and by
    pytest's iniconfig (py.iniconfig before pytest 6, tox 3), which breaks them where
    ``str.splitlines`` does (form feeds, vertical tabs, ``\x1c``...): a section can exist
    for the one and not the other."""
    if name == "pyproject.toml":
        return (_toml_sections,)
    return (_configparser_sections, _splitlines_sections, _iniconfig_sections)


def _toml_sections(text: str | None) -> dict[str, object] | None:
    if text is None:
        return {}
    try:
        flat = _flatten(tomllib.loads(text))
    except tomllib.TOMLDecodeError:
        return None
    return {k: v for k, v in flat.items() if k.startswith(SECTIONED["pyproject.toml"])}


def _configparser_sections(text: str | None) -> dict[str, object] | None:
    if text is None:
        return {}
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    prefixes = SECTIONED["setup.cfg"]
    return {s: dict(parser.items(s)) for s in parser.sections() if s.startswith(prefixes)}


def _splitlines_sections(text: str | None) -> dict[str, object] | None:
    return _configparser_sections(None if text is None else "\n".join(text.splitlines()))


def _iniconfig_sections(text: str | None) -> dict[str, object] | None:
    if text is None:
        return {}
    try:
        parsed = iniconfig.IniConfig("setup.cfg", data=text)
    except iniconfig.ParseError:
        return None
    prefixes = SECTIONED["setup.cfg"]
    return {s.name: dict(s.items()) for s in parsed if s.name.startswith(prefixes)}


def sections_changed(name: str, before: str | None, after: str | None) -> bool:
    """Whether the test sections differ, or no longer read, for any of the file's readers."""
    for read in _readers(name):
        new = read(after)
        if new is None or new != read(before):
            return True
    return False


def _flatten(data: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and not path.startswith(("tool.pytest", "tool.tox")):
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out


class Guard:
    """Puts a workspace's protected files back to the prepared commit (HEAD). Its git runs
    under ``trusted_git``: after a sandboxed phase, only once ``.git`` has been reseated."""

    def __init__(self, repo: Path, env: Mapping[str, str], runner: frozenset[str]) -> None:
        self.repo = repo
        self.env = dict(env)
        self.runner = runner
        self._loaders_before: set[str] = set()

    async def _git(self, *args: str, env: Mapping[str, str] | None = None) -> str:
        result = await run_process(
            trusted_git.argv(self.repo, *args), env=env or self.env, timeout=GIT_TIMEOUT
        )
        if not result.ok:
            raise RuntimeError(f"git {' '.join(args)} failed: {result.tail(10)}")
        return result.output

    async def _head_text(self, path: str) -> str | None:
        result = await run_process(
            trusted_git.argv(self.repo, "show", f"HEAD:{path}"), env=self.env, timeout=GIT_TIMEOUT
        )
        return result.output if result.ok else None

    async def is_protected(self, path: str) -> bool:
        if protected_reason(path, self.runner):
            return True
        name = path.rsplit("/", 1)[-1]
        if name in SECTIONED:
            current = self.repo / path
            regular = current.is_file() and not current.is_symlink()  # never read through a link
            after = current.read_text(errors="replace") if regular else None
            return sections_changed(name, await self._head_text(path), after)
        return False

    async def revert(self, paths: Iterable[str]) -> list[str]:
        """Put back every protected path of ``paths``; returns the ones put back."""
        reverted = []
        for path in dict.fromkeys(paths):
            if not await self.is_protected(path):
                continue
            in_head = await self._head_text(path) is not None
            target = self.repo / path
            if in_head:
                await self._git("checkout", "HEAD", "--", path)
            elif target.is_symlink() or target.is_file():
                target.unlink()
            elif target.is_dir():
                continue  # a directory is not a file change (its files are listed apart)
            else:
                continue
            reverted.append(path)
        return reverted

    async def changed_tracked(self, stat_index: Path | None = None) -> list[str]:
        """Tracked files that differ from HEAD. ``stat_index``: a private copy of an
        index of HEAD whose stat data are the files as the engine sees them, so that git
        reads only the files whose stat data changed (the checkout's own index holds them
        as the sandbox sees them: the owner differs, and git would read every file)."""
        env = {**self.env, "GIT_INDEX_FILE": str(stat_index)} if stat_index else None
        out = await self._git("diff", "--name-only", "-z", "--no-renames", "HEAD", env=env)
        return [p for p in out.split("\0") if p]

    async def loader_files(self) -> set[str]:
        """Untracked files, ignored or not, that Python or pytest would load by their name
        or place: test configuration (a ``setup.cfg`` or ``pyproject.toml`` too: pytest
        takes its options from the first one it meets on the way up from the tests),
        start-up hooks, anything in a test directory (build products in directories no
        test runs from are left out)."""
        out = await self._git("ls-files", "-z", "--others", "--", ".", *BUILD_EXCLUDES)
        return {
            p
            for p in out.split("\0")
            if p and "__pycache__/" not in p  # bytecode: dropped apart (drop_bytecode)
            if protected_reason(p, self.runner) or p.rsplit("/", 1)[-1] in SECTIONED
        }

    async def snapshot(self) -> None:
        """Remember the loader files that exist before participant code runs."""
        self._loaders_before = await self.loader_files()

    async def revert_after_run(self, stat_index: Path | None = None) -> list[str]:
        """What participant code changed while it ran: tracked protected files are put
        back, and test or start-up hooks it created are removed (``stat_index``:
        ``changed_tracked``'s)."""
        reverted = await self.revert(await self.changed_tracked(stat_index))
        for path in sorted(await self.loader_files() - self._loaders_before):
            (self.repo / path).unlink(missing_ok=True)
            reverted.append(path)
        return reverted


def drop_bytecode(repo: Path, within: Path | None = None) -> int:
    """Remove every ``__pycache__`` of the checkout (``.git`` aside), following no symlink;
    returns how many. Python reads a cache whose header matches its source's mtime and
    size instead of the source, so code that ran before the tests (the install) could
    leave a fix, or a forged pass, that the source does not hold; the tests compile the
    sources again. ``within``: a tree laid out as ``repo`` that holds everything that can
    differ from a checkout known to have no ``__pycache__`` (a copy-on-write checkout's
    upper layer over a prepared one whose bytecode was dropped): only it is walked."""
    removed = 0
    top = within if within is not None else repo
    for dirpath, dirnames, _ in os.walk(top):
        if dirpath == str(top):
            dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in [d for d in dirnames if d == "__pycache__"]:
            path = repo / Path(dirpath, name).relative_to(top)
            if not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink()
            removed += 1
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
    return removed
