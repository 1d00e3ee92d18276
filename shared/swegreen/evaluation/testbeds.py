"""The testbeds: a fresh, private copy of an instance's prepared workspace for each
evaluation, and everything run in it (prepared.py, eval_run.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator

from swegreen.core.dataset import Instance
from swegreen.evaluation.eval_run import EvalRuns
from swegreen.evaluation.prepared import PreparedWorkspaces, _copy_tree
from swegreen.evaluation.testbed import LAYERS, PIP_CACHE, Testbed
from swegreen.evaluation.trash import discard
from swegreen.repositories import trusted_git
from swegreen.sandbox import overlay
from swegreen.sandbox.environ import scratch_dir


class Testbeds(PreparedWorkspaces, EvalRuns):
    """Testbeds for a run: prepared workspaces, private copies, eval script runs."""

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
            # the engine's git runs over a copy of it before any sandbox does
            await asyncio.to_thread(trusted_git.check_config, prepared.repo / ".git")
            if self._copy_on_write(prepared.repo):
                mounted = await asyncio.to_thread(
                    overlay.mount, prepared.repo, host_dir / LAYERS, repo
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
                bytecode_free=prepared.bytecode_free and mounted,
                upper_layer=host_dir / LAYERS / "upper" if mounted else None,
                provenance=prepared.provenance,
            )
        finally:
            if mounted:
                await asyncio.to_thread(overlay.unmount, repo)
            if not self.options.keep_workspaces:
                scratch = scratch_dir(workspace / "repo", f"swegreen-{workspace.name}")
                await asyncio.to_thread(
                    discard, self.options.work_root, [scratch, workspace, host_dir]
                )
