"""Running the eval script in a testbed: its two phases, each in a sandbox of its own, the
benchmark's files and the environment put back between them, pytest's own record."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from swegreen.core.errors import WorkspaceTampering
from swegreen.core.eval_script import (
    EvalPhases,
    eval_commands,
    eval_phases,
    reinstall_changes_nothing,
    runs_no_project_code,
)
from swegreen.core.patches import inspect_patch
from swegreen.core.recipes import Recipe, tests_need_network
from swegreen.environments.environment import ENV_INFO
from swegreen.environments.services import SERVICES, start_script
from swegreen.evaluation.prepared import history_stores
from swegreen.evaluation.testbed import (
    CONFIG_FILES,
    HOST_INDEX,
    Testbed,
    TestbedsBase,
    TestRun,
)
from swegreen.processes.procs import ProcResult, run_process
from swegreen.repositories import trusted_git
from swegreen.sandbox.env_guard import EnvGuard, command_words, project_names
from swegreen.sandbox.environ import free_port
from swegreen.sandbox.isolation import Mounts, SandboxPolicy
from swegreen.sandbox.recorder import (
    CENSUS_VARIABLE,
    INSIDE_PATH,
    KEY_FD_VARIABLE,
    PLUGIN_DIR_INSIDE,
    RecordChannel,
    Recorded,
    covers,
    hash_seed,
    install_plugin,
    install_runner_recorder,
    key_pipe,
    new_key,
    pytest_addopts,
    python_path,
    runner_kind,
)
from swegreen.sandbox.tamper import Guard, drop_bytecode, runner_files
from swegreen.sandbox.tools import SYSTEM_PATH, tool
from swegreen.stores import artifacts as art

# What the install step may have left in the sandbox's HOME that the test phase would run:
# a global git configuration (the eval script's own `git checkout` of the test files reads
# it) and Python's user site-packages (its .pth files run at every interpreter start).
HOME_STARTUP_FILES = (".gitconfig", ".config/git", ".local")
# what may differ in .git after the install: the index, which git's own status refreshes
# (HOST_INDEX is the engine's own copy of it, in the prepared .git)
GIT_MAY_WRITE = frozenset({"index", HOST_INDEX})
CENSUS_TIMEOUT = 600.0  # pytest's start-up on the base commit, no test collected


class EvalRuns(TestbedsBase):
    """The eval script's run in a testbed, and the environment and limits it gets."""

    def policy_for(self, testbed: Testbed) -> SandboxPolicy:
        """The test command's limits: the recipe's, the network on only where the recipe
        or the instance needs it."""
        recipe = testbed.recipe
        return SandboxPolicy(
            timeout=self.timeout_for(recipe),
            network=tests_need_network(
                recipe, testbed.instance.instance_id, self.options.network_instances
            ),
            cpus=recipe.cpus,
            memory_mb=self.options.memory_mb,
            max_processes=self.options.max_processes,
            disk_mb=self.options.disk_mb,
            loopback=bool(recipe.services),
        )

    def guard(self, testbed: Testbed) -> Guard:
        """The keeper of the testbed's test files and test configuration (tamper.py)."""
        return Guard(
            testbed.repo,
            self.git_env(testbed),
            runner_files(testbed.recipe.test_cmd, testbed.repo),
        )

    def env_guard(self, testbed: Testbed, commands: frozenset[str] = frozenset()) -> EnvGuard:
        """The keeper of the environment view (env_guard.py), its snapshot taken: only the
        project's own distributions may change in it during the install step."""
        source = testbed.prepared / "env" if testbed.prepared is not None else None
        projects = (
            project_names(source, testbed.env.root / "py") if source is not None else frozenset()
        )
        roots = (testbed.repo, *([testbed.prepared / "repo"] if testbed.prepared else []))
        guard = EnvGuard(
            testbed.env.prefix,
            testbed.host_dir / "env-backup",
            source,
            projects,
            roots=roots,
            commands=command_words(testbed.recipe.test_cmd) | commands,
        )
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
        # the disk limit walks what a copy-on-write mount took, not the merged tree
        layers = [(testbed.repo, testbed.upper_layer)]
        layers += [(testbed.site_packages, testbed.env_upper_layer)]
        return Mounts(
            writable=(testbed.workspace, testbed.scratch),
            readonly=tuple(readonly),
            tmp=testbed.scratch / "sys-tmp",  # the sandbox's /tmp and /var/tmp, on disk
            layers=tuple((m, u) for m, u in layers if m is not None and u is not None),
        )

    async def run_eval(
        self,
        testbed: Testbed,
        guard: Guard | None = None,
        skip_install: bool = False,
        directives: Sequence[str] | None = None,
    ) -> TestRun:
        """Run the eval script's two phases, each in a fresh sandbox. Between them,
        ``guard`` puts back what the install step changed of the tests. Where the first
        phase provably runs nothing of the project's, both run in one sandbox. ``skip_install``:
        the recipe's install line is left out (it can change nothing: ``reinstall_skip``).
        ``directives``: the tests to name instead of the test patch's files (the
        regression check's run, eval_script.py)."""
        recipe = testbed.recipe
        policy = self.policy_for(testbed)
        phases = await self._phases(
            testbed, policy, skip_install=skip_install, directives=directives
        )
        host = testbed.host_dir
        log_path = host / art.TEST_OUTPUT
        log_path.unlink(missing_ok=True)
        one_sandbox = runs_no_project_code(phases.prepare)
        if policy.network or not one_sandbox:  # something may install: the dated index
            await self.with_index(testbed)
        env = self.test_env(testbed)
        mounts = self.mounts(testbed)
        deadline = time.monotonic() + policy.timeout
        if one_sandbox:
            # Nothing of the project's runs before the tests (no install, or one skipped):
            # nothing can change the tests, .git, HOME or the environment between the
            # phases, so both run in one sandbox, one after the other, as one log.
            trusted_git.real_dir(testbed.repo, "the checkout")
            await asyncio.to_thread(drop_bytecode, *self._bytecode_scope(testbed))
            await asyncio.to_thread(self.sandbox.lend, *self._to_lend(testbed))
            script = phases.prepare + phases.test
            result, recorded = await self._run_tests(
                testbed, script, env, mounts, policy, log_path, deadline
            )
            return self._finished(script, log_path, result, policy, [], recorded)
        prepare = host / "prepare.sh"
        prepare.write_text(phases.prepare)
        guard = guard or self.guard(testbed)
        await guard.snapshot()
        env_guard = await asyncio.to_thread(self.env_guard, testbed, eval_commands(phases.test))
        install_env = self._with_compile_cache(testbed, env, writable=False)
        await asyncio.to_thread(self.sandbox.lend, *self._to_lend(testbed))
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
                trusted = testbed.prepared / "repo" / ".git"
                trusted_git.real_dir(testbed.repo / ".git", "the checkout's .git")
                if wrote := await asyncio.to_thread(
                    trusted_git.written, testbed.repo / ".git", trusted, GIT_MAY_WRITE
                ):
                    raise WorkspaceTampering(
                        "the install wrote to the checkout's .git (no install of the project "
                        "does; a replace ref would have the test files put back from another "
                        f"tree): {', '.join(wrote[:8])}" + (" ..." if len(wrote) > 8 else "")
                    )
                await trusted_git.reseat(testbed.repo, trusted)
            await asyncio.to_thread(forget_startup_files, testbed.scratch / "home")
            stat_index = await asyncio.to_thread(self._host_index, testbed)
            reverted = await guard.revert_after_run(stat_index)
            trusted_git.real_dir(testbed.env.prefix, "the environment")
            reverted += await asyncio.to_thread(env_guard.put_back)
            await asyncio.to_thread(drop_bytecode, *self._bytecode_scope(testbed))
            lent = [testbed.repo / ".git", *(testbed.repo / p for p in reverted)]
            await asyncio.to_thread(self.sandbox.lend, lent)
            result, recorded = await self._run_tests(
                testbed, phases.test, env, mounts, policy, log_path, deadline
            )
        return self._finished(phases.script, log_path, result, policy, reverted, recorded)

    async def _phases(
        self,
        testbed: Testbed,
        policy: SandboxPolicy,
        skip_install: bool = False,
        directives: Sequence[str] | None = None,
    ) -> EvalPhases:
        """The eval script's phases as this sandbox runs them: the test command under its
        wrapper, the rest of the test phase on the system's PATH."""
        services = await self._services(testbed.recipe, policy)
        readonly = await self._readonly(testbed)
        wrapper = self.sandbox.test_wrapper(policy, services, readonly)
        return eval_phases(
            testbed.instance,
            testbed.recipe,
            str(testbed.repo),
            wrapper.prefix,
            pin_path=SYSTEM_PATH,
            shell=tool("bash"),
            # the wrapper mounts them read-only for the rest of the phase
            readonly_tests=self.sandbox.bwrap and bool(readonly),
            skip_install=skip_install,
            directives=directives,
            test_setup=wrapper.setup,
        )

    async def take_census(self, testbed: Testbed) -> dict[str, object] | None:
        """What configures the row's pytest session on the base commit: the test phase of
        the eval script (the test patch applied, the test command) in ``testbed``, a
        fresh copy of the prepared workspace that no patch has touched, with the recorder
        taking its census and ending the session before any test is collected
        (``census_changes`` compares the graded run's with it). None where the test
        command is not pytest's, or the census was not taken."""
        recipe = testbed.recipe
        if runner_kind(recipe.log_parser) is not None or not covers(
            recipe.log_parser, recipe.test_cmd
        ):
            return None
        policy = self.policy_for(testbed)
        phases = await self._phases(testbed, policy)
        env = {**self.test_env(testbed), CENSUS_VARIABLE: "1"}
        await asyncio.to_thread(self.sandbox.lend, *self._to_lend(testbed))
        log_path = testbed.host_dir / "census.log"
        deadline = time.monotonic() + min(policy.timeout, CENSUS_TIMEOUT)
        _, recorded = await self._run_tests(
            testbed, phases.test, env, self.mounts(testbed), policy, log_path, deadline
        )
        return recorded.census if recorded is not None else None

    @staticmethod
    def _finished(
        script: str,
        log_path: Path,
        result: ProcResult,
        policy: SandboxPolicy,
        reverted: list[str],
        recorded: Recorded | None,
    ) -> TestRun:
        if result.timed_out:
            with log_path.open("a") as fh:  # the official harness's timeout line
                fh.write(f"\n\nTimeout error: {policy.timeout:g} seconds exceeded.")
        return TestRun(
            script,
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
        runner = runner_kind(recipe.log_parser)
        record = runner is not None or covers(recipe.log_parser, recipe.test_cmd)
        channel = RecordChannel(host / "record")
        key = new_key()
        key_fd: int | None = None
        if record:
            plugins = host / "plugins"
            inside = PLUGIN_DIR_INSIDE if self.sandbox.bwrap else str(plugins)
            if runner is not None:
                recorder = install_runner_recorder(plugins, runner, str(testbed.repo))
                env.update(recorder.environ(inside))
                if runner == "sympy":
                    env["PYTHONHASHSEED"] = hash_seed()
            else:
                module = install_plugin(plugins)
                env["PYTEST_ADDOPTS"] = pytest_addopts(env.get("PYTEST_ADDOPTS"), module)
            env["PYTHONPATH"] = python_path(env.get("PYTHONPATH"), inside)
            if self.sandbox.bwrap:
                env["SWEGREEN_RECORD"] = INSIDE_PATH
                files += [(channel.path, INSIDE_PATH), (plugins, PLUGIN_DIR_INSIDE)]
            else:
                env["SWEGREEN_RECORD"] = str(channel.path)
                # lent where they are (Landlock lends by path; process mode ignores it)
                files += [(channel.path, str(channel.path)), (plugins, str(plugins))]
            await channel.open()
            key_fd = key_pipe(key)  # inherited, read once by the recorder: in no environment
            env[KEY_FD_VARIABLE] = str(key_fd)
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
                pass_fds=(key_fd,) if key_fd is not None else (),
            )
        finally:
            if key_fd is not None:
                os.close(key_fd)
            recorded = await channel.close(key.encode()) if record else None
        return result, recorded

    @staticmethod
    def _host_index(testbed: Testbed) -> Path | None:
        """A private copy of the prepared checkout's index as the engine sees its files
        (``HOST_INDEX``), for the engine's `git diff` over this copy; None: there is none
        (no prepared workspace), and git compares with the checkout's own index."""
        if testbed.prepared is None:
            return None
        kept = testbed.prepared / "repo" / ".git" / HOST_INDEX
        if not kept.is_file() or kept.is_symlink():
            return None
        copy = testbed.host_dir / HOST_INDEX
        shutil.copyfile(kept, copy)
        return copy

    @staticmethod
    def _to_lend(testbed: Testbed) -> tuple[list[Path], tuple[Path, ...]]:
        """What to hand to the sandbox before it runs: the workspace and scratch; of a
        copy-on-write checkout only its upper layer (what changed since the prepared
        one, which is the sandbox's already), not a walk over every file; of an
        environment view made the sandbox's (``Testbed.env_lent``), nothing."""
        shared = (testbed.env.prefix,) if testbed.env_lent else ()
        if (upper := testbed.upper_layer) is not None:
            return [testbed.workspace, testbed.scratch, upper], (testbed.repo, *shared)
        return [testbed.workspace, testbed.scratch], shared

    @staticmethod
    def _bytecode_scope(testbed: Testbed) -> tuple[Path, Path | None]:
        """Where bytecode can be (``drop_bytecode``): in a copy-on-write checkout over a
        prepared one that has none, only in its upper layer; else anywhere."""
        return testbed.repo, testbed.upper_layer if testbed.bytecode_free else None

    def reinstall_skip(self, testbed: Testbed, paths: Sequence[str], top: Sequence[str]) -> bool:
        """Whether upstream's eval-time install can change nothing here: the patch touches
        no build input and adds no top-level directory to ``top`` (the tree's names before
        it: ``reinstall_changes_nothing``), and the environment holds this checkout's
        editable install (a .pth, .egg-link or editable finder naming it)."""
        recipe = testbed.recipe
        if not reinstall_changes_nothing(recipe.install, paths, top):
            return False
        site = testbed.site_packages
        if site is None:
            return False
        repo = str(testbed.repo)
        markers = [*site.glob("*.pth"), *site.glob("*.egg-link"), *site.glob("__editable__*")]
        return any(
            repo in m.read_text(errors="replace")
            for m in markers
            if m.is_file() and not m.is_symlink()
        )

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

    async def _services(self, recipe: Recipe, policy: SandboxPolicy) -> tuple[str, ...]:
        """Start snippets for the local services the recipe's tests call."""
        snippets = []
        for name in recipe.services:
            service = SERVICES[name]
            env = await self.envs.ensure(service.recipe(), f"service {name}")
            port = None if self.sandbox.isolates(policy) else free_port()
            snippets.append(start_script(service, env.python, port))
        return tuple(snippets)


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
