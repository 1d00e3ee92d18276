"""Prepared workspaces: an instance's checkout at its base commit, its environment view,
its setup (pre-install, install) run once and committed, as the official instance
images are; evaluations copy them."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import swegreen
from swegreen.core.dataset import Instance
from swegreen.core.errors import EnvSetupFailed, EvaluationFailure, RepoUnavailable
from swegreen.core.recipes import Recipe, prepared_name
from swegreen.environments.dated_index import NO_CUTOFF
from swegreen.environments.environment import COMPLETE as ENV_COMPLETE
from swegreen.environments.environment import interpreter_source, transient_failure
from swegreen.environments.views import own_tree
from swegreen.evaluation.testbed import (
    HOST_INDEX,
    PIP_CACHE,
    PREPARED_COMPLETE,
    PREPARED_INFO,
    PREPARED_LAYOUT,
    SETUP_TIMEOUT,
    WHEELHOUSE,
    Testbed,
    TestbedsBase,
)
from swegreen.processes.cache_room import mark_used
from swegreen.processes.locks import file_lock
from swegreen.processes.procs import run_checked, run_process
from swegreen.repositories import trusted_git
from swegreen.sandbox import overlay, seal
from swegreen.sandbox.isolation import Mounts, SandboxPolicy
from swegreen.sandbox.tamper import drop_bytecode


class PreparedWorkspaces(TestbedsBase):
    """Making and finding prepared workspaces (the install step through the eval-run half's
    environment)."""

    async def prepared(self, instance: Instance, recipe: Recipe, notes: list[str]) -> Testbed:
        """The instance's workspace as the official instance image holds it: the
        repository at the base commit, its environment view, pre-install and install done
        and committed. Built once (under a lock), then only copied: the eval script's own
        install is the only one an evaluation runs. Its ``env_build_seconds`` are what this
        call spent building (the environment included)."""
        root = self._existing(instance, recipe)
        incident = None
        if root is not None and await asyncio.to_thread(seal.broken, root):
            root, incident = None, await self._set_aside(root, notes)
        testbed = await self._prepared_at(instance, recipe, notes, root)
        if incident is not None:  # on the row (its environment record), not only in its log
            testbed.provenance["seal_broken"] = incident
        return testbed

    async def reused(self, instance: Instance, recipe: Recipe, notes: list[str]) -> Testbed | None:
        """The instance's existing prepared workspace with its seal not yet checked (None:
        there is none). The caller checks it (``seal.broken``) before anything runs in it
        and, where it is broken, calls ``prepared``, which sets it aside."""
        root = self._existing(instance, recipe)
        if root is None:
            return None
        return await self._prepared_at(instance, recipe, notes, root)

    async def _prepared_at(
        self, instance: Instance, recipe: Recipe, notes: list[str], root: Path | None
    ) -> Testbed:
        if root is None:
            # a missing interpreter fails the row (or is installed) before anything is
            # cloned: finding the environment_setup_commit may clone the repository
            await self.envs.check_interpreter(recipe, f"{instance.repo} {instance.version}")
            await self._needed_downloads(instance, recipe)
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
                    if (reserve := self.envs.reserve) is not None:
                        await asyncio.to_thread(
                            reserve.check, f"the prepared workspace {root.name}"
                        )
                    try:
                        made = await self._prepare(
                            instance, recipe, root, notes, setup_commit, provenance
                        )
                    except EvaluationFailure as exc:
                        if exc.permanent:
                            self._failed[root.name] = exc
                        raise
                    mark_used(root.parent, root.name)
                    return made
        info = json.loads((root / PREPARED_INFO).read_text())
        mark_used(root.parent, root.name)  # what `swegreen cache prune` keeps longest
        env = self.envs.loaded(info["env_key"], root / "env")
        notes.append(f"environment {env.key} and prepared workspace {root.name} (reused)")
        return Testbed(
            instance,
            recipe,
            root,
            env,
            [],
            bytecode_free=info.get("bytecode_free", False),  # prepared by an older version
            env_dirs_lent=info.get("env_dirs_lent", False),
            provenance=info.get("provenance") or {},
        )

    async def _set_aside(self, root: Path, notes: list[str]) -> str | None:
        """A prepared workspace whose seal broke is moved aside (kept for inspection: rows
        using it now go on, their mounts hold it) and prepared again by the caller.
        Returns the incident (None: no incident, or another evaluation handled it)."""
        async with file_lock(self.options.prepared_root / ".locks" / f"{root.name}.lock"):
            why = await asyncio.to_thread(seal.broken, root)
            if why is None or not (root / PREPARED_COMPLETE).exists():
                return None  # another evaluation has already prepared it again
            stamp = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
            aside = root.with_name(f"{root.name}.broken-{stamp}")
            await asyncio.to_thread(root.rename, aside)
        if why == seal.UNSEALED:  # made before seals existed: no incident, nothing to keep
            await asyncio.to_thread(shutil.rmtree, aside, True)
            notes.append(f"prepared workspace {root.name} prepared again: {why}")
            return None
        incident = (
            f"prepared workspace {root.name}: {why}; set aside as {aside} and prepared "
            "again (docs/security-logs.md, the seal)"
        )
        notes.append(f"INCIDENT: {incident}")
        return incident

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
            return wanted, {}  # nothing is read there: whatever it lacks blocks nothing
        try:
            await self.repos.ensure_commit(instance.repo, wanted)
            # what the build reads there: the requirements files, or the whole tree when
            # it locks the project's own dependencies (a checkout at that commit)
            paths = () if recipe.locks_project else tuple(recipe.requirements)
            lacking = await asyncio.to_thread(
                self.repos.missing_objects, instance.repo, wanted, paths
            )
            if not lacking:
                return wanted, {}
            why = (
                f"environment_setup_commit's tree lacks {len(lacking)} object(s) in the "
                f"repository source ({', '.join(lacking[:3])})"
            )
            exc = RepoUnavailable(f"{instance.repo}: {why}", permanent=True)
        except RepoUnavailable as missing:
            why, exc = "environment_setup_commit missing from the repository source", missing
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
            "why": why,
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
                    f"the base commit {setup_commit}: {provenance['why']} "
                    f"({instance.environment_setup_commit})"
                )
            read = functools.partial(self.repos.read_file, instance.repo, setup_commit)
            checkout = functools.partial(self.repos.checkout, instance.repo, setup_commit)
            built = await self.envs.ensure(
                recipe,
                f"{instance.repo} {instance.version}",
                setup_commit,
                read,
                checkout,
                row=instance.instance_id,
            )
            if (source := await asyncio.to_thread(interpreter_source, built.root)) is not None:
                provenance["interpreter"] = source
            elif self.envs.search.given_for(recipe.python) is not None:  # built before sources
                provenance["interpreter"] = {"python": recipe.python, "given_by_user": True}
            how = "reused" if built.reused else f"built in {built.build_seconds:.1f}s"
            notes.append(f"environment {built.key} ({how})")
            env = await self.envs.view(built, root / "env")
            index_url = await self.envs.index_url(recipe)
            testbed = Testbed(
                instance, recipe, root, env, notes, index_url=index_url, provenance=provenance
            )
            await self._setup_repo(testbed)
            # the evaluations drop bytecode before their tests (eval_run.py): none here
            # means each of them need look only at what it changed
            await asyncio.to_thread(drop_bytecode, testbed.repo)
            scratch = testbed.scratch
            if (scratch / PIP_CACHE).is_dir():  # kept for the evaluations (open)
                await asyncio.to_thread(shutil.move, scratch / PIP_CACHE, root / PIP_CACHE)
            await asyncio.to_thread(shutil.rmtree, scratch, True)
            # The environment's directories and symlinks are the sandbox's, never a file:
            # an evaluation's view then mounts its site-packages copy-on-write, its
            # directories the sandbox's to add to as a view of links has them (views.py)
            uid = self.sandbox.isolation.sandbox_uid
            if lent := uid is not None:
                await asyncio.to_thread(own_tree, root / "env", uid)
            (root / PREPARED_INFO).write_text(
                json.dumps(
                    {
                        "env_key": built.key,
                        "env_built": (built.root / ENV_COMPLETE).read_text(),
                        "layout": PREPARED_LAYOUT,
                        "instance_id": instance.instance_id,
                        "provenance": provenance,
                        "bytecode_free": True,
                        "env_dirs_lent": lent,
                    }
                )
            )
            # the sandbox's already, so that evaluations mounted on it change no file
            await asyncio.to_thread(self.sandbox.lend, [root / "repo"])
            await self._refresh_index(testbed)
            await asyncio.to_thread(seal.seal, root)  # checked before every reuse
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
            bytecode_free=True,
            env_dirs_lent=lent,
            provenance=provenance,
        )

    async def _refresh_index(self, testbed: Testbed) -> None:
        """Refresh git's index as the evaluations' sandbox sees the files. Handing them over
        changed every file's ctime, and git records each file's owner as seen by whoever
        refreshes (bubblewrap shows the sandbox's uid as root): an index refreshed by the
        engine would make each evaluation's first `git status` read every file's bytes
        (0.25 s of 6,000 files on django) instead of comparing stat data."""
        repo = testbed.repo
        # beside the checkout, never in it; an interrupted preparation's goes with it
        scratch = testbed.workspace / "refresh"
        scratch.mkdir()
        try:
            scratch.chmod(0o711)  # the sandbox's uid reads the script by name
            script = scratch / "refresh.sh"
            script.write_text(
                shlex.join(trusted_git.argv(repo, "update-index", "-q", "--refresh")) + "\n"
            )
            result = await self.sandbox.run_script(
                script,
                cwd=repo,
                env=self.git_env(testbed),
                policy=SandboxPolicy(timeout=600, disk_mb=None),
                log_path=scratch / "refresh.log",
                mounts=Mounts(writable=(repo,), readonly=tuple(history_stores(repo))),
            )
            if not result.ok:
                log = (scratch / "refresh.log").read_text(errors="replace")
                raise EnvSetupFailed(
                    "refreshing the prepared checkout's git index in the sandbox failed",
                    log_tail=log[-4000:],
                )
        finally:
            await asyncio.to_thread(shutil.rmtree, scratch, True)
        # and a copy as the engine sees them, for its own `git diff` over an evaluation's
        # checkout (eval_run.py): with the sandbox's, that diff would read every file
        host_index = repo / ".git" / HOST_INDEX
        await asyncio.to_thread(shutil.copyfile, repo / ".git" / "index", host_index)
        await run_checked(
            trusted_git.argv(repo, "update-index", "-q", "--refresh"),
            env={**self.git_env(testbed), "GIT_INDEX_FILE": str(host_index)},
        )
        # the sandbox's, as the whole checkout is: lending a copy of it copies nothing up
        await asyncio.to_thread(self.sandbox.lend, [host_index])

    async def _needed_downloads(self, instance: Instance, recipe: Recipe) -> None:
        """The files the row's setup will download (matplotlib's qhull, FreeType), had
        before anything is spent on it: fetched into the offline sources directory (their
        URLs, then byte-identical copies elsewhere, each hash-checked), or the row fails
        now, naming them all, rather than after building its environment."""
        steps = [*recipe.pre_install, *([recipe.install] if recipe.install else [])]
        needed = self.sources.needed_for(instance.repo, instance.version, steps)
        if not needed:
            return
        missing = await asyncio.to_thread(self.sources.fetch_missing, needed, self.envs.host_env)
        if missing:
            raise EnvSetupFailed(
                f"repository setup: {self.sources.advice(missing)}", permanent=True
            )

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
        # the row's own temp directories, gone with the setup (nothing left in the host's)
        tmp = testbed.scratch / "setup-tmp"
        keep = (  # the engine's own trees the setup reads and writes, wherever they lie
            testbed.workspace,
            testbed.scratch,
            testbed.repo,
            self.envs.root,
            self.repos.root,
            self.repos.history.root,
            self.options.work_root,
            *([self.sources.directory] if self.sources.directory else []),
            # what the engine's own helpers run from (the sources shim: this interpreter
            # and this package), a checkout under /tmp included
            Path(sys.prefix),
            Path(sys.base_prefix),
            Path(swegreen.__file__).resolve().parents[1],
        )
        argv, environ = self.sandbox.private_tmp(["bash", "-c", script], tmp, environ, keep)
        try:
            result = await run_process(argv, cwd=testbed.repo, env=environ, timeout=SETUP_TIMEOUT)
        finally:
            await asyncio.to_thread(shutil.rmtree, tmp, True)
            if recorder is not None:
                await asyncio.to_thread(recorder.close)
        testbed.notes.append(f"repository setup ({len(steps)} step(s)) took {result.duration:.1f}s")
        if not result.ok:
            instance = testbed.instance
            if missing := self.sources.still_missing(
                result.output, instance.repo, instance.version, steps
            ):
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


def _copy_tree(source: Path, dest: Path) -> None:
    """A real copy (reflinked where the filesystem can): the evaluation may write anywhere
    in its checkout, and nothing it writes may reach the prepared one."""
    subprocess.run(
        ["cp", "-a", "--reflink=auto", str(source), str(dest)], check=True, capture_output=True
    )
