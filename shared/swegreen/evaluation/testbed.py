"""Testbeds: an instance's checkout and environment, prepared as the official instance
image is, and the eval script run inside them under the sandbox.

Preparing: clone from the git cache at the base commit, build (or reuse) the
environment and take a private view of it, run the recipe's pre-install and install
steps, commit the result so that ``git diff`` shows only what comes after. Running: the
eval script's two phases (eval_script.EvalPhases), each in a sandbox that sees only the
workspace (writable), the environment caches (read-only) and the system; stdout and
stderr merged into one log that lives outside the sandbox's reach, beside the scripts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from swegreen.core.dataset import Instance
from swegreen.core.errors import EvaluationFailure
from swegreen.core.eval_script import test_command_seconds
from swegreen.core.recipes import Recipe, RecipeBook
from swegreen.environments.build_sources import OfflineSources
from swegreen.environments.compile_cache import CACHE_DIR as COMPILE_CACHE_DIR
from swegreen.environments.compile_cache import CompileCache
from swegreen.environments.environment import Environment
from swegreen.environments.manager import EnvManager
from swegreen.evaluation.trash import empty_trash
from swegreen.processes.cache_room import CacheLease
from swegreen.processes.procs import ProcResult
from swegreen.repositories import trusted_git
from swegreen.repositories.repo_cache import RepoCache, git_env
from swegreen.sandbox import overlay
from swegreen.sandbox.environ import sandbox_env, scratch_dir
from swegreen.sandbox.local import LocalSandbox
from swegreen.sandbox.recorder import (
    Recorded,
)

# Test configuration at the repository's top, shown read-only while the tests run.
CONFIG_FILES = ("pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml")


DEFAULT_EVAL_TIMEOUT = 1800.0  # the official harness's


SETUP_TIMEOUT = 3600.0


PREPARED_COMPLETE = ".complete"


PREPARED_INFO = "prepared.json"


PIP_CACHE = "pip-cache"  # in a prepared workspace, and in each evaluation's scratch dir


WHEELHOUSE = "wheelhouse"  # in a prepared workspace: what its install downloaded (offline)


# 2: the checkout borrows objects from its base commit's history stores (history.py), not
# from the repository cache, which holds the later history
# 3: its git index refreshed once it is the sandbox's (stat data matching the files)
# 4: refreshed inside the sandbox (the owner as the evaluations see it, not the engine),
# beside a copy refreshed as the engine sees the files (HOST_INDEX)
PREPARED_LAYOUT = 4


# In a prepared checkout's .git: its index with the files' stat data as the engine sees
# them, for the engine's own `git diff` over an evaluation's copy (Guard.changed_tracked).
HOST_INDEX = "swegreen-host-index"


@dataclass(frozen=True)
class TestbedOptions:
    __test__ = False  # not a pytest test class

    work_root: Path
    eval_timeout: float | None = None  # None: the recipe's limit, else the official 1800 s
    memory_mb: int | None = 16384
    max_processes: int | None = 4096
    disk_mb: int | None = 10240
    keep_workspaces: bool = False
    # Instances whose tests reach real hosts upstream (where the container has the network).
    network_instances: frozenset[str] = frozenset()
    # Prepared workspaces (one per instance, like the official instance images);
    # default: beside work_root.
    prepared_dir: Path | None = None
    # Read a recipe's environment files at the base commit where the row's
    # environment_setup_commit is missing from the source (EvalConfig.env_files_at_base).
    env_files_at_base: bool = False
    # Evaluations' checkouts as overlays on the prepared one where the engine may mount
    # (overlay.py); off, or elsewhere: copies.
    copy_on_write: bool = True
    # Eval-time installs from the prepared workspace's wheelhouse, with no index and no
    # network (EvalConfig.offline_installs): what the prepared workspace's own install
    # downloaded, through a recording index (dated_index.py), is all they get.
    offline_installs: bool = False

    @property
    def prepared_root(self) -> Path:
        return self.prepared_dir or self.work_root.with_name("prepared")


LAYERS = "layers"  # in a testbed's host_dir: a copy-on-write checkout's (overlay.py)
ENV_LAYERS = "env-layers"  # and its environment view's site-packages, where mounted


@dataclass
class Testbed:
    """A prepared checkout with its environment view; notes collect what happened."""

    __test__ = False  # not a pytest test class

    instance: Instance
    recipe: Recipe
    workspace: Path
    env: Environment
    notes: list[str] = field(default_factory=list)
    env_build_seconds: float = 0.0  # spent building what this testbed was first to need
    prepared: Path | None = None  # the prepared workspace this one is a copy of
    # the package index as of the recipe's date (dated_index): resolved where something
    # may install (``TestbedsBase.with_index``), so a warm row starts no index process
    index_url: str | None = None
    # the prepared checkout holds no ``__pycache__`` (dropped before its seal): a copy-on-
    # write evaluation then looks for bytecode only in what it changed (its upper layer)
    bytecode_free: bool = False
    # a copy-on-write checkout's upper layer: what it changed of the prepared one
    # (testbeds.py mounts it, its layers in ``host_dir``); None for a plain copy
    upper_layer: Path | None = None
    # the environment view was made the sandbox's (views.make_view's owner): lending the
    # workspace need not walk it again
    env_lent: bool = False
    # a prepared workspace's environment whose directories are the sandbox's (given when
    # it was prepared: views.own_tree), so an evaluation's view may mount its
    # site-packages copy-on-write over it rather than link every file
    env_dirs_lent: bool = False
    # the upper layer of the view's site-packages where it is mounted so (testbeds.py)
    env_upper_layer: Path | None = None
    # How the environment was made where that differs from upstream's way (a row's
    # ``environment`` provenance): files read at another commit, say.
    provenance: dict[str, object] = field(default_factory=dict)

    @property
    def repo(self) -> Path:
        return self.workspace / "repo"

    def top_names(self) -> list[str]:
        """The checkout's top-level names (read before a patch: a package it adds at the
        top is new, and an editable install does not see it: ``reinstall_skip``)."""
        return [p.name for p in self.repo.iterdir() if p.name != ".git"]

    @property
    def scratch(self) -> Path:
        """HOME and TMPDIR of the test run (outside the workspace's top-level directory)."""
        return scratch_dir(self.repo, f"swegreen-{self.workspace.name}")

    @property
    def host_dir(self) -> Path:
        """Beside the workspace, never shown to the sandbox: scripts, log, record channel."""
        return host_dir_of(self.workspace)

    @property
    def site_packages(self) -> Path | None:
        found = sorted(self.env.prefix.glob("lib/python*/site-packages"))
        return found[0] if found else None


@dataclass(frozen=True)
class TestRun:
    __test__ = False  # not a pytest test class

    script: str
    log_path: Path
    result: ProcResult
    timeout: float
    # Files the participant's code changed while the install ran, put back before the tests.
    reverted: list[str] = field(default_factory=list)
    recorded: Recorded | None = None  # what pytest itself recorded (recipes it covers)
    exit_code: int | None = None  # the test command's, as the engine saw it

    @property
    def timed_out(self) -> bool:
        return self.result.timed_out

    def test_seconds(self) -> float:
        """Time inside the test command (the whole script's, if the log has no stamps)."""
        measured = test_command_seconds(self.log_path.read_text(errors="replace"))
        return measured if measured is not None else self.result.duration


class TestbedsBase:
    """What every part of the testbeds shares: the caches, the sandbox, the options, and
    the environment their installs and tests run with (the prepared workspace's setup and
    every evaluation use the same one)."""

    def __init__(
        self,
        *,
        repos: RepoCache,
        recipes: RecipeBook,
        envs: EnvManager,
        sandbox: LocalSandbox,
        options: TestbedOptions,
        host_env: Mapping[str, str],
        compile_cache: CompileCache | None = None,
        sources: OfflineSources | None = None,
        lease: CacheLease | None = None,
    ) -> None:
        # held while these testbeds may read the cache: `swegreen cache prune` refuses then
        self.lease = lease
        self.repos = repos
        self.sources = sources or OfflineSources(None)
        # Permanent failures of a prepared workspace's setup in this run, by its name: the
        # base validation and the evaluation of a row (and a retry) fail at once with the
        # same reason instead of running the failing install again.
        self._failed: dict[str, EvaluationFailure] = {}
        # workspaces of an engine killed before it could unmount them (overlay.py)
        overlay.sweep(options.work_root)
        empty_trash(options.work_root)  # and what their rows left on the way out
        self.compile_cache = compile_cache
        self.recipes = recipes
        self.envs = envs
        self.sandbox = sandbox
        self.options = options
        self.host_env = dict(host_env)

    def close(self) -> None:
        self.envs.close()
        if self.lease is not None:
            self.lease.release()

    async def with_index(self, testbed: Testbed) -> None:
        """Give ``testbed`` its dated package index, starting the index process if this
        is the first thing to need it (installs, the workbench, networked tests)."""
        if testbed.index_url is None:
            testbed.index_url = await self.envs.index_url(testbed.recipe)

    def timeout_for(self, recipe: Recipe) -> float:
        return self.options.eval_timeout or recipe.eval_timeout or DEFAULT_EVAL_TIMEOUT

    def test_env(self, testbed: Testbed) -> dict[str, str]:
        """The sandbox environment of the testbed's install and tests (the prepared
        workspace's setup runs with it too: prepared.py)."""
        env = testbed.env
        extra = {
            **env.runtime_env,
            "SWEGREEN_REPO": str(testbed.repo),
            **dict(testbed.recipe.env_vars),
        }
        if testbed.index_url:  # installs (and their build isolation) see the recipe's date
            extra["PIP_INDEX_URL"] = testbed.index_url
        if self.options.offline_installs and testbed.prepared is not None:
            # every pip (build isolation included): the prepared wheelhouse, no index
            extra.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(testbed.prepared / WHEELHOUSE))
        venv = env.prefix if (env.prefix / "pyvenv.cfg").exists() else None
        environ = sandbox_env(
            bin_dirs=env.bin_dirs,
            virtual_env=venv,
            scratch=testbed.scratch,
            host_env=self.host_env,
            pip_cache=testbed.scratch / PIP_CACHE,  # private: a shared one could be poisoned
            extra=extra,
        )
        if "PIP_NO_INDEX" in extra:
            environ.pop("PIP_INDEX_URL", None)
            environ.pop("PIP_EXTRA_INDEX_URL", None)
        return environ

    def _with_compile_cache(
        self, testbed: Testbed, env: dict[str, str], *, writable: bool
    ) -> dict[str, str]:
        """``env`` for an install step, compiling through the prepared workspace's
        compiler cache (compile_cache.py): written while the prepared workspace is built,
        read by evaluations. Unchanged where the host has no ccache."""
        prepared = testbed.workspace if writable else testbed.prepared
        if self.compile_cache is None or prepared is None:
            return env
        cache = prepared / COMPILE_CACHE_DIR
        if not writable and not cache.is_dir():
            return env  # prepared before the cache existed, or nothing was compiled
        shims, extra = self.compile_cache.environment(
            testbed.workspace, cache, Path(env["TMPDIR"]), writable=writable
        )
        return {**env, **extra, "PATH": f"{shims}:{env['PATH']}"}

    def git_env(self, testbed: Testbed) -> dict[str, str]:
        """The engine's git over ``testbed``: HOME beside the workspace, never in it (the
        sandbox could write a global configuration there), no system or global config."""
        return trusted_git.environment(
            git_env(testbed.host_dir / "git-home", self.host_env), testbed.host_dir / "git-home"
        )


def host_dir_of(workspace: Path) -> Path:
    """Beside a workspace, what the host keeps of it (``Testbed.host_dir``)."""
    return workspace.with_name(workspace.name + ".host")
