"""Where an interactive participant's commands run: its own copy of the instance's
prepared workspace, under the same sandbox as the tests.

The copy is a testbed like the one that grades the patch (repository at the base commit,
environment installed, hidden tests absent: the test patch only ever exists in the graded
testbed's host directory, opened after the conversation ends), with three differences:

- its git history is cut to the one commit it starts from: a checkout borrows the objects
  of the repository cache, which holds the fix and its tests, so the cache is not shown
  and the copy's ``.git`` is made self-contained;
- files that are there but untracked (build products of the install) are excluded, so
  ``git status`` and ``git add -A && git diff --cached`` show only the participant's work;
- every command runs in a fresh sandbox (bubblewrap or Landlock: the weaker ``process``
  mode would show it the host's files) without the network, its output capped on the
  way out; its processes end with it.

The copy is removed when the conversation ends; the graded workspace is a different copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import shlex
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

from swegreen.core.dataset import Instance
from swegreen.core.errors import DiskLimitExceeded, EnvSetupFailed, OutOfMemory, SandboxUnavailable
from swegreen.core.ports import CommandRun
from swegreen.environments.environment import ENV_INFO
from swegreen.evaluation.testbed import Testbed
from swegreen.evaluation.testbeds import Testbeds
from swegreen.processes.procs import CommandFailed, run_checked, run_process
from swegreen.sandbox.overlay import discard_later

COMMAND_INSIDE = "/run/swegreen/command.sh"
# Bytes of a command's output kept on the host before the per-command limit is applied:
# enough for a head and a tail, never a disk filled by `yes`.
CAPTURE_CAP = 8_000_000
# Never part of a participant's change, ignored or not by the repository.
BYPRODUCTS = ("__pycache__/", "*.py[cod]", ".pytest_cache/")
# The command leads a process group of its own; what it left running in the background
# is killed when it exits (it would hold the output pipe open until the time limit).
STEP_SCRIPT = """\
step() {{
  setsid bash {command} </dev/null 2>&1 &
  local pid=$!
  wait "$pid"
  local code=$?
  kill -KILL -- "-$pid" 2>/dev/null
  return "$code"
}}
step | stdbuf -o0 head -c {cap}
exit "${{PIPESTATUS[0]}}"
"""


class Workbench:
    """One participant's copy of one instance's workspace."""

    def __init__(self, testbeds: Testbeds, testbed: Testbed) -> None:
        self.testbeds = testbeds
        self.testbed = testbed
        self._steps = 0
        self.mounts = testbeds.mounts(testbed)
        self.env = testbeds.test_env(testbed)

    @property
    def workdir(self) -> Path:
        return self.testbed.repo

    @property
    def python_version(self) -> str:
        """The environment's Python (major.minor), as its build recorded it."""
        info = self.testbed.env.root / ENV_INFO
        try:
            version = str(json.loads(info.read_text())["python"])
        except (OSError, ValueError, KeyError):
            version = self.testbed.recipe.python
        return ".".join(version.split(".")[:2])

    async def run(self, command: str, timeout: float) -> CommandRun:
        self._steps += 1
        host = self.testbed.host_dir
        command_file = host / f"command-{self._steps}.sh"
        command_file.write_text(command, encoding="utf-8", errors="surrogateescape")
        script = host / f"step-{self._steps}.sh"
        inside = COMMAND_INSIDE if self.testbeds.sandbox.bwrap else str(command_file)
        script.write_text(STEP_SCRIPT.format(command=shlex.quote(inside), cap=CAPTURE_CAP))
        log = host / f"step-{self._steps}.log"
        policy = dataclasses.replace(
            self.testbeds.policy_for(self.testbed), network=False, timeout=timeout
        )
        try:
            result = await self.testbeds.sandbox.run_script(
                script,
                cwd=self.workdir,
                env=self.env,
                policy=policy,
                log_path=log,
                mounts=self.mounts.with_files((command_file, COMMAND_INSIDE)),
                network=False,
                timeout=timeout,
            )
            output = log.read_text(encoding="utf-8", errors="replace")
        except (DiskLimitExceeded, OutOfMemory) as exc:
            # the command's own doing: it ends like a killed command, the workbench lives on
            output = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
            return CommandRun(137, f"{output}\n[killed: {exc}]\n", 0.0)
        finally:
            for path in (command_file, script, log):
                path.unlink(missing_ok=True)
        return CommandRun(None if result.timed_out else result.returncode, output, result.duration)

    async def run_discarded(self, command: str, timeout: float) -> CommandRun:
        """``run``, then the workspace as it was before: nothing the command wrote stays
        (the AgentSWE protocol's read-only ``bash`` and ephemeral ``debug`` commands)."""
        layers = self.testbed.host_dir / f"discard-{self._steps + 1}"
        undo = await asyncio.to_thread(discard_later, self.workdir, layers)
        try:
            return await self.run(command, timeout)
        finally:
            await asyncio.to_thread(undo)


class Workbenches:
    """Opens workbenches from the engine's testbeds (prepared workspaces, sandbox)."""

    def __init__(self, testbeds: Testbeds) -> None:
        self.testbeds = testbeds

    @property
    def available(self) -> bool:
        """Only where commands see nothing of the host but what they are lent (bubblewrap
        or Landlock)."""
        return self.testbeds.sandbox.isolates_files

    @contextlib.asynccontextmanager
    async def open(self, scope: str, instance: Instance) -> AsyncIterator[Workbench]:
        if not self.available:
            raise SandboxUnavailable(
                "interactive mode needs isolation = bwrap or landlock: in process mode a "
                "command could read the host's files"
            )
        async with self.testbeds.open(scope, instance) as testbed:
            try:
                await detach_history(testbed.repo, self.testbeds.git_env(testbed))
            except CommandFailed as exc:
                raise EnvSetupFailed(
                    f"could not prepare the participant's workspace: {exc}"
                ) from exc
            await self.testbeds.with_index(testbed)  # the participant's pip sees its date
            bench = Workbench(self.testbeds, testbed)  # makes HOME and TMPDIR: lend them too
            await asyncio.to_thread(
                self.testbeds.sandbox.lend, [testbed.workspace, testbed.scratch]
            )
            yield bench


async def detach_history(repo: Path, env: dict[str, str]) -> None:
    """Give ``repo`` a ``.git`` of its own holding only its current commit (shallow), its
    index rebuilt and its untracked files excluded; submodules keep their objects but lose
    borrowed ones."""
    git = ["git", "-C", str(repo)]
    head = (await run_checked([*git, "rev-parse", "HEAD"], env=env)).output.strip()
    untracked = (
        await run_checked([*git, "ls-files", "--others", "--exclude-standard", "-z"], env=env)
    ).output
    fresh = repo.parent / "git-detached"
    await run_checked(["git", "init", "--quiet", "--bare", str(fresh)], env=env)
    await run_checked(
        # the engine's own fresh copy (no participant code has run in it yet): the file
        # transport for it alone (trusted_git.OVERRIDES refuse every transport)
        [
            "git",
            "-c",
            "protocol.file.allow=always",
            "-C",
            str(fresh),
            "fetch",
            "--quiet",
            # git clears the environment's configuration for the other side: its
            # upload-pack is told itself that the sandbox-owned checkout is safe
            "--upload-pack=git -c safe.directory=* upload-pack",
            "--depth=1",
            f"file://{repo}",
            head,
        ],
        env=env,
    )
    old = repo / ".git"
    modules = old / "modules"
    if modules.is_dir():
        await _self_contained_modules(modules, env)
        await asyncio.to_thread(shutil.move, str(modules), str(fresh / "modules"))
    await asyncio.to_thread(shutil.rmtree, old)
    await asyncio.to_thread(shutil.move, str(fresh), str(old))
    await run_checked([*git, "config", "core.bare", "false"], env=env)
    (old / "HEAD").write_text(head + "\n")
    await run_checked([*git, "reset", "--quiet"], env=env)
    paths = [p for p in untracked.split("\0") if p]
    info = old / "info"
    info.mkdir(exist_ok=True)
    with (info / "exclude").open("a") as fh:
        fh.write("# what running the code leaves behind\n")
        fh.writelines(f"{p}\n" for p in BYPRODUCTS)
        fh.write("# present before the participant's first command\n")
        fh.writelines(f"/{_escape(p)}\n" for p in paths)


async def _self_contained_modules(modules: Path, env: dict[str, str]) -> None:
    for alternates in modules.rglob("objects/info/alternates"):
        gitdir = alternates.parents[2]
        result = await run_process(
            ["git", "--git-dir", str(gitdir), "repack", "-a", "-d", "-q"], env=env, timeout=600
        )
        if result.ok:
            alternates.unlink()


def _escape(path: str) -> str:
    """A path as a gitignore pattern matching only itself."""
    out = "".join("\\" + c if c in "*?[\\!#" else c for c in path)
    return out[:-1] + "\\ " if out.endswith(" ") else out
