"""Testbeds: an instance's checkout and environment, prepared as the official instance
image is, and the eval script run inside them under the sandbox.

Preparing: clone from the git cache at the base commit, build (or reuse) the
environment and take a private view of it, run the recipe's pre-install and install
steps, commit the result so that ``git diff`` shows only what comes after. Running: the
eval script, stdout and stderr merged into one log, under the sandbox's limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shutil
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from swegreen import artifacts as art
from swegreen.dataset import Instance
from swegreen.environments import Environment, EnvManager
from swegreen.errors import EnvSetupFailed
from swegreen.eval_script import make_eval_script, test_command_seconds
from swegreen.procs import ProcResult, run_process
from swegreen.recipes import Recipe, RecipeBook
from swegreen.repo_cache import RepoCache, git_env
from swegreen.sandbox import LocalSandbox, SandboxPolicy, free_port, sandbox_env, scratch_dir
from swegreen.services import SERVICES, start_script

DEFAULT_EVAL_TIMEOUT = 1800.0  # the official harness's
SETUP_TIMEOUT = 3600.0


@dataclass(frozen=True)
class TestbedOptions:
    __test__ = False  # not a pytest test class

    work_root: Path
    eval_timeout: float | None = None  # None: the recipe's limit, else the official 1800 s
    memory_mb: int | None = 16384
    max_processes: int | None = 4096
    keep_workspaces: bool = False
    # Instances whose tests reach real hosts upstream (where the container has the network).
    network_instances: frozenset[str] = frozenset()


@dataclass
class Testbed:
    """A prepared checkout with its environment view; notes collect what happened."""

    __test__ = False  # not a pytest test class

    instance: Instance
    recipe: Recipe
    workspace: Path
    env: Environment
    notes: list[str] = field(default_factory=list)

    @property
    def repo(self) -> Path:
        return self.workspace / "repo"

    @property
    def scratch(self) -> Path:
        """HOME and TMPDIR of the test run (outside the workspace's top-level directory)."""
        return scratch_dir(self.repo, f"swegreen-{self.workspace.name}")


@dataclass(frozen=True)
class TestRun:
    __test__ = False  # not a pytest test class

    script: str
    log_path: Path
    result: ProcResult
    timeout: float

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
    ) -> None:
        self.repos = repos
        self.recipes = recipes
        self.envs = envs
        self.sandbox = sandbox
        self.options = options
        self.host_env = dict(host_env)

    def timeout_for(self, recipe: Recipe) -> float:
        return self.options.eval_timeout or recipe.eval_timeout or DEFAULT_EVAL_TIMEOUT

    @contextlib.asynccontextmanager
    async def open(self, scope: str, instance: Instance) -> AsyncIterator[Testbed]:
        """A fresh testbed for ``instance`` under ``work_root/scope``, removed afterwards."""
        recipe = self.recipes.for_instance(instance)
        workspace = (
            self.options.work_root / scope / f"{instance.instance_id}.{uuid.uuid4().hex[:8]}"
        )
        workspace.mkdir(parents=True)
        try:
            notes: list[str] = []
            # The checkout first: an unreachable repository should not cost an env build.
            await self.repos.checkout(instance.repo, instance.base_commit, workspace / "repo")
            await self.repos.ensure_commit(instance.repo, instance.environment_setup_commit)
            read = functools.partial(
                self.repos.read_file, instance.repo, instance.environment_setup_commit
            )
            checkout = functools.partial(
                self.repos.checkout, instance.repo, instance.environment_setup_commit
            )
            built = await self.envs.ensure(
                recipe,
                f"{instance.repo} {instance.version}",
                instance.environment_setup_commit,
                read,
                checkout,
            )
            how = "reused" if built.reused else f"built in {built.build_seconds:.1f}s"
            notes.append(f"environment {built.key} ({how})")
            env = await self.envs.view(built, workspace / "env")
            testbed = Testbed(instance, recipe, workspace, env, notes)
            await self._setup_repo(testbed)
            yield testbed
        finally:
            if not self.options.keep_workspaces:
                scratch = scratch_dir(workspace / "repo", f"swegreen-{workspace.name}")
                await asyncio.to_thread(shutil.rmtree, scratch, True)
                await asyncio.to_thread(shutil.rmtree, workspace, True)

    def git_env(self, testbed: Testbed) -> dict[str, str]:
        return git_env(testbed.workspace / "home", self.host_env)

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
        )

    async def run_eval(self, testbed: Testbed) -> TestRun:
        """Write and run the eval script; its whole log lands in the workspace."""
        recipe = testbed.recipe
        policy = self.policy_for(testbed)
        services = await self._services(recipe, policy)
        wrapper = self.sandbox.test_wrapper(policy, services)
        script = make_eval_script(testbed.instance, recipe, str(testbed.repo), wrapper)
        script_path = testbed.workspace / art.EVAL_SCRIPT
        script_path.write_text(script)
        log_path = testbed.workspace / art.TEST_OUTPUT
        result = await self.sandbox.run_script(
            script_path,
            cwd=testbed.repo,
            env=self._test_env(testbed),
            policy=policy,
            log_path=log_path,
        )
        if result.timed_out:
            with log_path.open("a") as fh:  # the official harness's timeout line
                fh.write(f"\n\nTimeout error: {policy.timeout:g} seconds exceeded.")
        return TestRun(script, log_path, result, policy.timeout)

    def _test_env(self, testbed: Testbed) -> dict[str, str]:
        env = testbed.env
        extra = {
            **env.runtime_env,
            "SWEGREEN_REPO": str(testbed.repo),
            **dict(testbed.recipe.env_vars),
        }
        venv = env.prefix if (env.prefix / "pyvenv.cfg").exists() else None
        return sandbox_env(
            bin_dirs=env.bin_dirs,
            virtual_env=venv,
            scratch=testbed.scratch,
            host_env=self.host_env,
            pip_cache=self.envs.root / ".pip-cache",
            extra=extra,
        )

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
        environ = self._test_env(testbed)
        environ.update({k: v for k, v in self.git_env(testbed).items() if k.startswith("GIT_")})
        script = "\n".join(
            ["set -euxo pipefail", *steps, "git commit --quiet --allow-empty -am SWE-bench"]
        )
        result = await run_process(
            ["bash", "-c", script], cwd=testbed.repo, env=environ, timeout=SETUP_TIMEOUT
        )
        testbed.notes.append(f"repository setup ({len(steps)} step(s)) took {result.duration:.1f}s")
        if not result.ok:
            raise EnvSetupFailed(
                f"repository setup (pre_install/install) failed: {recipe.install or 'commit'}",
                log_tail=result.tail(),
            )
