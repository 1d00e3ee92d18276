"""Testbeds: an instance's checkout and environment, prepared as the official instance
image is, and the eval script run inside them under the sandbox.

Preparing: clone from the git cache at the base commit, build (or reuse) the
environment and take a private view of it, run the recipe's pre-install and install
steps, commit the result so that ``git diff`` shows only what comes after. Running: the
eval script's two phases (eval_script.EvalPhases), each in a sandbox that sees only the
workspace (writable), the environment caches (read-only) and the system; stdout and
stderr merged into one log that lives outside the sandbox's reach, beside the scripts.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from swegreen.core.dataset import Instance
from swegreen.core.errors import EnvSetupFailed, EvaluationFailure, RepoUnavailable
from swegreen.core.eval_script import eval_phases, test_command_seconds
from swegreen.core.patches import inspect_patch
from swegreen.core.recipes import Recipe, RecipeBook, prepared_name
from swegreen.environments.build import transient_failure
from swegreen.environments.build_sources import OfflineSources
from swegreen.environments.compile_cache import CACHE_DIR as COMPILE_CACHE_DIR
from swegreen.environments.compile_cache import CompileCache
from swegreen.environments.dated_index import NO_CUTOFF
from swegreen.environments.environment import COMPLETE as ENV_COMPLETE
from swegreen.environments.environment import ENV_INFO, Environment
from swegreen.environments.manager import EnvManager
from swegreen.environments.services import SERVICES, start_script
from swegreen.processes.locks import file_lock
from swegreen.processes.procs import ProcResult, run_process
from swegreen.repositories import trusted_git
from swegreen.repositories.repo_cache import RepoCache, git_env
from swegreen.sandbox import overlay
from swegreen.sandbox.env_guard import EnvGuard, project_names
from swegreen.sandbox.environ import free_port, sandbox_env, scratch_dir
from swegreen.sandbox.isolation import Mounts, SandboxPolicy
from swegreen.sandbox.local import LocalSandbox
from swegreen.sandbox.recorder import (
    INSIDE_PATH,
    PLUGIN_DIR_INSIDE,
    RecordChannel,
    Recorded,
    covers,
    install_plugin,
    new_key,
    pytest_addopts,
    python_path,
)
from swegreen.sandbox.tamper import Guard, runner_files
from swegreen.stores import artifacts as art

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
PREPARED_LAYOUT = 2


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
    index_url: str | None = None  # the package index as of the recipe's date (dated_index)
    # How the environment was made where that differs from upstream's way (a row's
    # ``environment`` provenance): files read at another commit, say.
    provenance: dict[str, object] = field(default_factory=dict)

    @property
    def repo(self) -> Path:
        return self.workspace / "repo"

    @property
    def scratch(self) -> Path:
        """HOME and TMPDIR of the test run (outside the workspace's top-level directory)."""
        return scratch_dir(self.repo, f"swegreen-{self.workspace.name}")

    @property
    def host_dir(self) -> Path:
        """Beside the workspace, never shown to the sandbox: scripts, log, record channel."""
        return self.workspace.with_name(self.workspace.name + ".host")

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


class Testbeds:
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
    ) -> None:
        self.repos = repos
        self.sources = sources or OfflineSources(None)
        # Permanent failures of a prepared workspace's setup in this run, by its name: the
        # base validation and the evaluation of a row (and a retry) fail at once with the
        # same reason instead of running the failing install again.
        self._failed: dict[str, EvaluationFailure] = {}
        # workspaces of an engine killed before it could unmount them (overlay.py)
        overlay.sweep(options.work_root)
        self.compile_cache = compile_cache
        self.recipes = recipes
        self.envs = envs
        self.sandbox = sandbox
        self.options = options
        self.host_env = dict(host_env)

    def close(self) -> None:
        self.envs.close()

    def timeout_for(self, recipe: Recipe) -> float:
        return self.options.eval_timeout or recipe.eval_timeout or DEFAULT_EVAL_TIMEOUT

    @contextlib.asynccontextmanager
    async def open(self, scope: str, instance: Instance) -> AsyncIterator[Testbed]:
        """A fresh testbed for ``instance`` under ``work_root/scope``, removed afterwards:
        a private copy of the instance's prepared workspace (``prepared``)."""
        recipe = self.recipes.for_instance(instance)
        workspace = (
            self.options.work_root / scope / f"{instance.instance_id}.{uuid.uuid4().hex[:8]}"
        )
        workspace.mkdir(parents=True)
        host_dir = workspace.with_name(workspace.name + ".host")
        host_dir.mkdir()
        host_dir.chmod(0o711)  # the sandbox's uid may open the files it is given by name
        repo = workspace / "repo"
        mounted = False
        try:
            notes: list[str] = []
            t0 = time.monotonic()
            prepared = await self.prepared(instance, recipe, notes)
            if self._copy_on_write(prepared.repo):
                mounted = await asyncio.to_thread(
                    overlay.mount, prepared.repo, host_dir / "layers", repo
                )
            if not mounted:
                await asyncio.to_thread(_copy_tree, prepared.repo, repo)
            # What the setup's install downloaded (build requirements of an isolated
            # build, say), as a private copy: the eval-time install finds it, as it finds
            # the pip cache of upstream's image, and nothing it writes reaches another.
            cached = prepared.workspace / PIP_CACHE
            if cached.is_dir():
                scratch = scratch_dir(workspace / "repo", f"swegreen-{workspace.name}")
                scratch.mkdir(parents=True, exist_ok=True)
                await asyncio.to_thread(_copy_tree, cached, scratch / PIP_CACHE)
            env = await self.envs.view(
                prepared.env, workspace / "env", {str(prepared.repo): str(workspace / "repo")}
            )
            built = prepared.env_build_seconds
            how = "mounted copy-on-write on" if mounted else "copied from"
            notes.append(
                f"workspace {how} the prepared one in {time.monotonic() - t0:.1f}s"
                + (f" (including {built:.1f}s of building)" if built else "")
            )
            yield Testbed(
                instance,
                recipe,
                workspace,
                env,
                notes,
                env_build_seconds=built,
                prepared=prepared.workspace,
                index_url=prepared.index_url,
                provenance=prepared.provenance,
            )
        finally:
            if mounted:
                await asyncio.to_thread(overlay.unmount, repo)
            if not self.options.keep_workspaces:
                scratch = scratch_dir(workspace / "repo", f"swegreen-{workspace.name}")
                await asyncio.to_thread(shutil.rmtree, scratch, True)
                await asyncio.to_thread(shutil.rmtree, workspace, True)
                await asyncio.to_thread(shutil.rmtree, host_dir, True)

    async def prepared(self, instance: Instance, recipe: Recipe, notes: list[str]) -> Testbed:
        """The instance's workspace as the official instance image holds it: the
        repository at the base commit, its environment view, pre-install and install done
        and committed. Built once (under a lock), then only copied: the eval script's own
        install is the only one an evaluation runs. Its ``env_build_seconds`` are what this
        call spent building (the environment included)."""
        root = self._existing(instance, recipe)
        if root is None:
            setup_commit, provenance = await self.setup_source(instance, recipe)
            elsewhere = setup_commit != instance.environment_setup_commit
            root = self.options.prepared_root / prepared_name(
                instance,
                recipe,
                setup_commit if elsewhere else None,
                offline_installs=self.options.offline_installs,
            )
            if (known := self._failed.get(root.name)) is not None:
                raise known
            async with file_lock(self.options.prepared_root / ".locks" / f"{root.name}.lock"):
                if (known := self._failed.get(root.name)) is not None:
                    raise known
                if not self._usable(root):
                    try:
                        return await self._prepare(
                            instance, recipe, root, notes, setup_commit, provenance
                        )
                    except EvaluationFailure as exc:
                        if exc.permanent:
                            self._failed[root.name] = exc
                        raise
        info = json.loads((root / PREPARED_INFO).read_text())
        env = self.envs.loaded(info["env_key"], root / "env")
        notes.append(f"environment {env.key} and prepared workspace {root.name} (reused)")
        index_url = await self.envs.index_url(recipe)
        return Testbed(
            instance,
            recipe,
            root,
            env,
            [],
            index_url=index_url,
            provenance=info.get("provenance") or {},
        )

    def _copy_on_write(self, prepared_repo: Path) -> bool:
        """Whether an evaluation may mount its checkout over ``prepared_repo`` (overlay.py):
        the setting allows it, the workspace is not kept, and the prepared checkout is
        already the sandbox's (lending it would copy every file up). Prepared checkouts
        made before this was possible are copied, never changed while in use."""
        if not self.options.copy_on_write or self.options.keep_workspaces:
            return False
        if not overlay.can_mount():
            return False
        uid = self.sandbox.isolation.sandbox_uid
        return uid is None or prepared_repo.stat().st_uid == uid

    def _existing(self, instance: Instance, recipe: Recipe) -> Path | None:
        """A usable prepared workspace, found without the repository: the one made at the
        environment_setup_commit, else (when allowed) the one made at the base commit."""
        offline = self.options.offline_installs
        names = [prepared_name(instance, recipe, offline_installs=offline)]
        if self.options.env_files_at_base and recipe.requirements:
            names.append(
                prepared_name(instance, recipe, instance.base_commit, offline_installs=offline)
            )
        for name in names:
            if self._usable(root := self.options.prepared_root / name):
                return root
        return None

    async def setup_source(
        self, instance: Instance, recipe: Recipe
    ) -> tuple[str, dict[str, object]]:
        """The commit the environment build reads the repository at, and (when that is
        not the row's environment_setup_commit) the provenance that says why.

        Only a recipe that reads files there needs the commit at all. Its requirements
        files are read at the base commit instead only when ``env_files_at_base`` allows
        it; the project's own dependencies (which only the engine locks: upstream's
        install resolves them at the base commit) are then read at the base commit."""
        wanted = instance.environment_setup_commit
        if not recipe.reads_setup_commit or wanted == instance.base_commit:
            return wanted, {}
        try:
            await self.repos.ensure_commit(instance.repo, wanted)
            return wanted, {}
        except RepoUnavailable as exc:
            if recipe.requirements and not self.options.env_files_at_base:
                raise RepoUnavailable(
                    f"{exc}. Its recipe reads {', '.join(recipe.requirements)} there; to read "
                    "them at the base commit instead, pass --env-files-at-base (config "
                    "env_files_at_base = true; recorded in each such row)",
                    permanent=True,
                ) from exc
        what = list(recipe.requirements) or ["the project's own dependencies"]
        return instance.base_commit, {
            "environment_setup_commit": wanted,
            "files_read_at": instance.base_commit,
            "files": what,
            "why": "environment_setup_commit missing from the repository source",
        }

    def _usable(self, root: Path) -> bool:
        """Complete, made from the environment build that exists now (one rebuilt since,
        e.g. after the cache was cleared, prepares it again), its history stores there."""
        if not (root / PREPARED_COMPLETE).exists():
            return False
        try:
            info = json.loads((root / PREPARED_INFO).read_text())
            built = (self.envs.root / info["env_key"] / ENV_COMPLETE).read_text()
        except (OSError, ValueError, KeyError):
            return False
        if built != info.get("env_built") or info.get("layout") != PREPARED_LAYOUT:
            return False
        # the history stores its checkout borrows from (a cleared cache lost them)
        return all(store.is_dir() for store in history_stores(root / "repo"))

    async def _prepare(
        self,
        instance: Instance,
        recipe: Recipe,
        root: Path,
        notes: list[str],
        setup_commit: str,
        provenance: dict[str, object],
    ) -> Testbed:
        start = time.monotonic()
        await asyncio.to_thread(shutil.rmtree, root, True)  # an interrupted earlier one
        root.mkdir(parents=True)
        try:
            # The checkout first: an unreachable repository should not cost an env build.
            await self.repos.checkout_isolated(instance.repo, instance.base_commit, root / "repo")
            if provenance:
                notes.append(
                    f"environment files ({', '.join(map(str, provenance['files']))}) read at "
                    f"the base commit {setup_commit}: environment_setup_commit "
                    f"{instance.environment_setup_commit} is missing from the source"
                )
            if self.envs.search.given_for(recipe.python) is not None:
                provenance["interpreter"] = {"python": recipe.python, "given_by_user": True}
            read = functools.partial(self.repos.read_file, instance.repo, setup_commit)
            checkout = functools.partial(self.repos.checkout, instance.repo, setup_commit)
            built = await self.envs.ensure(
                recipe, f"{instance.repo} {instance.version}", setup_commit, read, checkout
            )
            how = "reused" if built.reused else f"built in {built.build_seconds:.1f}s"
            notes.append(f"environment {built.key} ({how})")
            env = await self.envs.view(built, root / "env")
            index_url = await self.envs.index_url(recipe)
            testbed = Testbed(
                instance, recipe, root, env, notes, index_url=index_url, provenance=provenance
            )
            await self._setup_repo(testbed)
            scratch = testbed.scratch
            if (scratch / PIP_CACHE).is_dir():  # kept for the evaluations (open)
                await asyncio.to_thread(shutil.move, scratch / PIP_CACHE, root / PIP_CACHE)
            await asyncio.to_thread(shutil.rmtree, scratch, True)
            (root / PREPARED_INFO).write_text(
                json.dumps(
                    {
                        "env_key": built.key,
                        "env_built": (built.root / ENV_COMPLETE).read_text(),
                        "layout": PREPARED_LAYOUT,
                        "instance_id": instance.instance_id,
                        "provenance": provenance,
                    }
                )
            )
            # the sandbox's already, so that evaluations mounted on it change no file
            await asyncio.to_thread(self.sandbox.lend, [root / "repo"])
            (root / PREPARED_COMPLETE).write_text(str(time.time()))
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, root, True)
            raise
        seconds = time.monotonic() - start
        notes.append(f"prepared workspace {root.name} built in {seconds:.1f}s")
        return Testbed(
            instance,
            recipe,
            root,
            env,
            [],
            env_build_seconds=seconds,
            index_url=index_url,
            provenance=provenance,
        )

    def git_env(self, testbed: Testbed) -> dict[str, str]:
        """The engine's git over ``testbed``: HOME beside the workspace, never in it (the
        sandbox could write a global configuration there), no system or global config."""
        return trusted_git.environment(
            git_env(testbed.host_dir / "git-home", self.host_env), testbed.host_dir / "git-home"
        )

    def policy_for(self, testbed: Testbed) -> SandboxPolicy:
        """The test command's limits: the recipe's, the network on only where the recipe
        or the instance needs it."""
        recipe = testbed.recipe
        return SandboxPolicy(
            timeout=self.timeout_for(recipe),
            network=recipe.network
            or testbed.instance.instance_id in self.options.network_instances,
            cpus=recipe.cpus,
            memory_mb=self.options.memory_mb,
            max_processes=self.options.max_processes,
            disk_mb=self.options.disk_mb,
        )

    def guard(self, testbed: Testbed) -> Guard:
        """The keeper of the testbed's test files and test configuration (tamper.py)."""
        return Guard(
            testbed.repo,
            self.git_env(testbed),
            runner_files(testbed.recipe.test_cmd, testbed.repo),
        )

    def env_guard(self, testbed: Testbed) -> EnvGuard:
        """The keeper of the environment view (env_guard.py), its snapshot taken: only the
        project's own distributions may change in it during the install step."""
        source = testbed.prepared / "env" if testbed.prepared is not None else None
        projects = (
            project_names(source, testbed.env.root / "py") if source is not None else frozenset()
        )
        guard = EnvGuard(testbed.env.prefix, testbed.host_dir / "env-backup", source, projects)
        guard.snapshot()
        return guard

    def mounts(self, testbed: Testbed) -> Mounts:
        """What a sandboxed phase sees besides the system: the workspace and its temp dirs
        (writable), the environment cache, the prepared workspace and the history stores
        its checkout borrows objects from (read-only: no later history, no other
        instance's stores), and the interpreter a virtualenv-layout environment is based
        on."""
        readonly = [self.envs.root]
        if testbed.prepared is not None:  # the view's links lead through the prepared one
            readonly.append(testbed.prepared)
            readonly += history_stores(testbed.prepared / "repo")
        info = testbed.env.root / ENV_INFO
        if info.exists():
            data = json.loads(info.read_text())
            if data.get("layout") == "virtualenv" and data.get("interpreter"):
                readonly.append(Path(data["interpreter"]).resolve().parents[1])
        return Mounts(
            writable=(testbed.workspace, testbed.scratch),
            readonly=tuple(readonly),
            tmp=testbed.scratch / "sys-tmp",  # the sandbox's /tmp and /var/tmp, on disk
        )

    async def run_eval(self, testbed: Testbed, guard: Guard | None = None) -> TestRun:
        """Run the eval script's two phases, each in a fresh sandbox. Between them,
        ``guard`` puts back what the install step changed of the tests."""
        recipe = testbed.recipe
        policy = self.policy_for(testbed)
        services = await self._services(recipe, policy)
        wrapper = self.sandbox.test_wrapper(policy, services, await self._readonly(testbed))
        phases = eval_phases(testbed.instance, recipe, str(testbed.repo), wrapper)
        host = testbed.host_dir
        log_path = host / art.TEST_OUTPUT
        log_path.unlink(missing_ok=True)
        env = self.test_env(testbed)
        mounts = self.mounts(testbed)
        deadline = time.monotonic() + policy.timeout
        prepare = host / "prepare.sh"
        prepare.write_text(phases.prepare)
        guard = guard or self.guard(testbed)
        await guard.snapshot()
        env_guard = await asyncio.to_thread(self.env_guard, testbed)
        install_env = self._with_compile_cache(testbed, env, writable=False)
        self.sandbox.lend([testbed.workspace, testbed.scratch])
        # The install may need the package index (as in upstream's containers), unless it
        # installs offline from the prepared wheelhouse; the tests never get the network
        # unless the recipe or the instance needs it.
        result = await self.sandbox.run_script(
            prepare,
            cwd=testbed.repo,
            env=install_env,
            policy=policy,
            log_path=log_path,
            mounts=mounts,
            network=policy.network or (bool(recipe.install) and not self.options.offline_installs),
        )
        reverted: list[str] = []
        recorded = None
        if not result.timed_out:
            # Nothing the install step left in .git (configuration that names programs,
            # hooks, an index that lies) is read by the engine or by the test phase.
            trusted_git.real_dir(testbed.repo, "the checkout")
            if testbed.prepared is not None:
                await trusted_git.reseat(testbed.repo, testbed.prepared / "repo" / ".git")
            await asyncio.to_thread(forget_startup_files, testbed.scratch / "home")
            reverted = await guard.revert_after_run()
            trusted_git.real_dir(testbed.env.prefix, "the environment")
            reverted += await asyncio.to_thread(env_guard.put_back)
            self.sandbox.lend([testbed.repo / ".git", *(testbed.repo / p for p in reverted)])
            result, recorded = await self._run_tests(
                testbed, phases.test, env, mounts, policy, log_path, deadline
            )
        if result.timed_out:
            with log_path.open("a") as fh:  # the official harness's timeout line
                fh.write(f"\n\nTimeout error: {policy.timeout:g} seconds exceeded.")
        return TestRun(
            phases.script,
            log_path,
            result,
            policy.timeout,
            reverted=reverted,
            recorded=recorded,
            exit_code=None if result.timed_out else result.returncode,
        )

    async def _run_tests(
        self,
        testbed: Testbed,
        script: str,
        env: dict[str, str],
        mounts: Mounts,
        policy: SandboxPolicy,
        log_path: Path,
        deadline: float,
    ) -> tuple[ProcResult, Recorded | None]:
        recipe, host = testbed.recipe, testbed.host_dir
        path = host / "test.sh"
        path.write_text(script)
        files = list(self.sandbox.cpu_view(policy, host))
        env = dict(env)
        record = covers(recipe.log_parser, recipe.test_cmd)
        channel = RecordChannel(host / "record")
        key = new_key()
        if record:
            env["SWEGREEN_RECORD_KEY"] = key  # the recorder takes it out of the environment
            plugins = host / "plugins"
            module = install_plugin(plugins)
            env["PYTEST_ADDOPTS"] = pytest_addopts(env.get("PYTEST_ADDOPTS"), module)
            if self.sandbox.bwrap:
                env["SWEGREEN_RECORD"] = INSIDE_PATH
                env["PYTHONPATH"] = python_path(env.get("PYTHONPATH"), PLUGIN_DIR_INSIDE)
                files += [(channel.path, INSIDE_PATH), (plugins, PLUGIN_DIR_INSIDE)]
            else:
                env["SWEGREEN_RECORD"] = str(channel.path)
                env["PYTHONPATH"] = python_path(env.get("PYTHONPATH"), str(plugins))
            await channel.open()
        try:
            result = await self.sandbox.run_script(
                path,
                cwd=testbed.repo,
                env=env,
                policy=policy,
                log_path=log_path,
                mounts=mounts.with_files(*files),
                append=True,
                timeout=max(1.0, deadline - time.monotonic()),
                admin=self.sandbox.bwrap,
            )
        finally:
            recorded = await channel.close(key.encode()) if record else None
        return result, recorded

    async def _readonly(self, testbed: Testbed) -> tuple[str, ...]:
        """What the test phase shows read-only once the test patch is applied: every file
        the test patch touches, the tracked conftest.py files and the test configuration
        files, as absolute paths (read from the prepared checkout, the engine's)."""
        repo = testbed.repo
        files = {
            f for change in inspect_patch(testbed.instance.test_patch).files for f in change.paths
        }
        source = testbed.prepared / "repo" if testbed.prepared is not None else repo
        listed = await run_process(
            trusted_git.argv(source, "ls-files", "-z", "--", "*conftest.py", *CONFIG_FILES),
            env=self.git_env(testbed),
            timeout=300,
        )
        if listed.ok:
            files |= {p for p in listed.output.split("\0") if p}
        files |= runner_files(testbed.recipe.test_cmd, source)
        return tuple(str(repo / f) for f in sorted(files))

    def test_env(self, testbed: Testbed) -> dict[str, str]:
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

    async def _services(self, recipe: Recipe, policy: SandboxPolicy) -> tuple[str, ...]:
        """Start snippets for the local services the recipe's tests call."""
        snippets = []
        for name in recipe.services:
            service = SERVICES[name]
            env = await self.envs.ensure(service.recipe(), f"service {name}")
            port = None if self.sandbox.isolates(policy) else free_port()
            snippets.append(start_script(service, env.python, port))
        return tuple(snippets)

    async def _setup_repo(self, testbed: Testbed) -> None:
        """What the official instance image does after cloning: pre-install, install, and
        one commit of the result, so that ``git diff`` shows only the patch."""
        recipe = testbed.recipe
        steps = [*recipe.pre_install, *([recipe.install] if recipe.install else [])]
        environ = self._with_compile_cache(testbed, self.test_env(testbed), writable=True)
        environ.update({k: v for k, v in self.git_env(testbed).items() if k.startswith("GIT_")})
        # downloads during the build (matplotlib's qhull, FreeType) from the offline sources
        shim = testbed.scratch / "sources-shim"
        staged = await asyncio.to_thread(self.sources.stage, Path(environ["HOME"]), shim)
        environ.update(staged.env, PATH=f"{shim}:{environ['PATH']}")
        script = "\n".join(
            ["set -euxo pipefail", *steps, "git commit --quiet --allow-empty -am SWE-bench"]
        )
        recorder = None
        if self.options.offline_installs:
            # what this install downloads is what the evaluations' installs get (offline)
            recorder = self.envs.recording_index(testbed.workspace / WHEELHOUSE)
            environ["PIP_INDEX_URL"] = await recorder.url(
                recipe.exclude_newer or NO_CUTOFF, recipe.exclude_newer_exempt
            )
            environ.pop("PIP_EXTRA_INDEX_URL", None)
        try:
            result = await run_process(
                ["bash", "-c", script], cwd=testbed.repo, env=environ, timeout=SETUP_TIMEOUT
            )
        finally:
            if recorder is not None:
                await asyncio.to_thread(recorder.close)
        testbed.notes.append(f"repository setup ({len(steps)} step(s)) took {result.duration:.1f}s")
        if not result.ok:
            if missing := self.sources.missing_in(result.output):
                raise EnvSetupFailed(
                    f"repository setup: {self.sources.advice(missing)}",
                    log_tail=result.tail(),
                    permanent=True,
                )
            raise EnvSetupFailed(
                f"repository setup (pre_install/install) failed: {recipe.install or 'commit'}",
                log_tail=result.tail(),
                permanent=not result.timed_out and not transient_failure(result.output),
            )
        if used := staged.used():
            testbed.provenance["build_sources"] = used


def history_stores(repo: Path) -> list[Path]:
    """The history stores a (trusted) checkout borrows objects from: its alternates."""
    alternates = repo / ".git" / "objects" / "info" / "alternates"
    if not alternates.is_file():
        return []
    return [Path(line).parent for line in alternates.read_text().split() if line]


# What the install step may have left in the sandbox's HOME that the test phase would run:
# a global git configuration (the eval script's own `git checkout` of the test files reads
# it) and Python's user site-packages (its .pth files run at every interpreter start).
HOME_STARTUP_FILES = (".gitconfig", ".config/git", ".local")


def forget_startup_files(home: Path) -> None:
    """Remove ``HOME_STARTUP_FILES`` from the sandbox's HOME, following no symlink (a
    symlink on the way is removed itself)."""
    trusted_git.real_dir(home.parent, "the test run's scratch directory")
    for name in HOME_STARTUP_FILES:
        path = home
        for part in Path(name).parts:
            if path.is_symlink() or (path.exists() and not path.is_dir()):
                path.unlink()  # what HOME, or a directory on the way, was made into
                break
            if not path.exists():
                break
            path = path / part
        else:
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif path.is_dir():
                shutil.rmtree(path)


def _copy_tree(source: Path, dest: Path) -> None:
    """A real copy (reflinked where the filesystem can): the evaluation may write anywhere
    in its checkout, and nothing it writes may reach the prepared one."""
    subprocess.run(
        ["cp", "-a", "--reflink=auto", str(source), str(dest)], check=True, capture_output=True
    )
