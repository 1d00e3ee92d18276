"""The testbeds: a fresh, private copy of an instance's prepared workspace for each
evaluation, and everything run in it (prepared.py, eval_run.py)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from swegreen.core.dataset import Instance
from swegreen.core.recipes import Recipe
from swegreen.evaluation.eval_run import EvalRuns
from swegreen.evaluation.prepared import PreparedWorkspaces, _copy_tree
from swegreen.evaluation.testbed import ENV_LAYERS, LAYERS, PIP_CACHE, Testbed, host_dir_of
from swegreen.evaluation.trash import discard
from swegreen.repositories import trusted_git
from swegreen.sandbox import overlay, seal
from swegreen.sandbox.environ import scratch_dir


class Testbeds(PreparedWorkspaces, EvalRuns):
    """Testbeds for a run: prepared workspaces, private copies, eval script runs."""

    @contextlib.asynccontextmanager
    async def open(self, scope: str, instance: Instance) -> AsyncIterator[Testbed]:
        """A fresh testbed for ``instance`` under ``work_root/scope``, removed afterwards:
        a private copy of the instance's prepared workspace (``prepared``).

        A reused prepared workspace's seal is checked beside the steps that make the
        copy (the mount, the environment view: they read it and run nothing of it), and
        before anything runs in it; where it is broken the copy is thrown away and made
        again the checked way (``prepared``: set aside, prepared again, an incident)."""
        recipe = self.recipes.for_instance(instance)
        for overlapped in (True, False):
            testbed = await self._open_once(scope, instance, recipe, overlapped)
            if testbed is None:
                continue  # the seal broke: the checked way, which records the incident
            try:
                yield testbed
            finally:
                await self._close(testbed)
            return

    async def _open_once(
        self, scope: str, instance: Instance, recipe: Recipe, overlapped: bool
    ) -> Testbed | None:
        workspace = (
            self.options.work_root / scope / f"{instance.instance_id}.{uuid.uuid4().hex[:8]}"
        )
        workspace.mkdir(parents=True)
        host_dir = host_dir_of(workspace)
        host_dir.mkdir()
        host_dir.chmod(0o711)  # the sandbox's uid may open the files it is given by name
        repo = workspace / "repo"
        mounted = False
        sealing: asyncio.Future[str | None] | None = None
        try:
            notes: list[str] = []
            t0 = time.monotonic()
            found = await self.reused(instance, recipe, notes) if overlapped else None
            if found is not None:
                prepared = found
                sealing = asyncio.ensure_future(asyncio.to_thread(seal.broken, prepared.workspace))
                if not await self.envs.intact(prepared.env.root):
                    # its environment is set aside: the checked way builds and prepares again
                    await _broken(sealing)
                    sealing = None
                    await self._close_parts(workspace, host_dir, mounted)
                    return None
            else:
                prepared = await self.prepared(instance, recipe, notes)
                if (why := self.envs.incidents.pop(prepared.env.key, None)) is not None:
                    prepared.provenance["env_seal_broken"] = why  # on the row, not only the log
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
                prepared.env,
                workspace / "env",
                {str(prepared.repo): str(workspace / "repo")},
                owner=self.sandbox.isolation.sandbox_uid,
                # a sandbox of the engine's own uid could write a hard-linked file in place
                links="hard" if self.sandbox.isolation.sandbox_uid is not None else "symbolic",
                # copy-on-write like the checkout, where its directories are the
                # sandbox's already (the view's 8,000 links on django: 0.1-0.45 s)
                mount_copy=functools.partial(_mount_copy, host_dir / ENV_LAYERS)
                if mounted and prepared.env_dirs_lent
                else None,
            )
            if sealing is not None and await _broken(sealing):
                await self._close_parts(workspace, host_dir, mounted)
                return None
        except BaseException:
            if sealing is not None:
                await _broken(sealing)  # its thread ends either way; nothing is left unread
            await self._close_parts(workspace, host_dir, mounted)
            raise
        built = prepared.env_build_seconds
        env_upper = host_dir / ENV_LAYERS / "upper"  # its site-packages, where mounted
        how = "mounted copy-on-write on" if mounted else "copied from"
        notes.append(
            f"workspace {how} the prepared one in {time.monotonic() - t0:.1f}s"
            + (f" (including {built:.1f}s of building)" if built else "")
        )
        return Testbed(
            instance,
            recipe,
            workspace,
            env,
            notes,
            env_build_seconds=built,
            prepared=prepared.workspace,
            index_url=prepared.index_url,
            bytecode_free=prepared.bytecode_free and mounted,
            env_lent=self.sandbox.isolation.sandbox_uid is not None,
            upper_layer=host_dir / LAYERS / "upper" if mounted else None,
            env_upper_layer=env_upper if env_upper.is_dir() else None,
            provenance=prepared.provenance,
        )

    async def _close(self, testbed: Testbed) -> None:
        mounted = testbed.upper_layer is not None
        await self._close_parts(testbed.workspace, testbed.host_dir, mounted)

    async def _close_parts(self, workspace: Path, host_dir: Path, mounted: bool) -> None:
        # the checkout's overlay, and its environment's where mounted too
        mounts = await asyncio.to_thread(overlay.mounts_under, workspace) if mounted else []
        if self.options.keep_workspaces:
            for mount in mounts:
                await asyncio.to_thread(overlay.unmount, mount)
            return
        # unmounted by the detached job that deletes them (trash.py), after the row
        scratch = scratch_dir(workspace / "repo", f"swegreen-{workspace.name}")
        await asyncio.to_thread(
            discard, self.options.work_root, [scratch, workspace, host_dir], mounts
        )


def _mount_copy(layers: Path, lower: Path, target: Path) -> bool:
    return overlay.mount(lower, layers, target)


async def _broken(sealing: asyncio.Future[str | None]) -> bool:
    """Whether the seal check says the workspace must not be used (one that could not be
    made counts as broken: the checked way makes it again and says why)."""
    try:
        return await sealing is not None
    except Exception:
        return True
