"""The AWS pipeline's shared cache (EFS), split by trust.

The prepare task, which runs no participant code, fills the cache with the adapters of a
local run (``fill``). The evaluate task, which does, mounts it read-only and uses these
adapters, which never write to it: a git mirror or an environment the prepare task
could not make is a failure of the row (``repo_unavailable``, ``env_setup_failed``),
never a fetch or a build. An environment is localized first (``localize``): put in the
task's own cache, at the path where the prepare task built it (absolute paths inside it
then hold), with what an evaluation may write copied and the rest linked to the
read-only original. Whatever a patch's tests write lands on the task's disk and dies
with it, or is refused.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from swegreen.base_validation import BaseValidator
from swegreen.dataset import Instance
from swegreen.environments import COMPLETE, Checkout, Environment, EnvManager, ReadFile
from swegreen.errors import EnvSetupFailed, RepoUnavailable
from swegreen.interpreters import InterpreterSearch
from swegreen.procs import run_checked
from swegreen.recipes import Recipe
from swegreen.repo_cache import RepoCache
from swegreen.services import SERVICES
from swegreen.testbed import Testbeds

COPY_TIMEOUT = 1800.0
PREPARE_LOG = "the prepare task's log (CloudWatch, stream prefix prepare)"


async def fill(testbeds: Testbeds, validator: BaseValidator | None, instance: Instance) -> None:
    """Everything the evaluation of ``instance`` will ask of the cache: both commits in the
    git mirror, the environment (and the services' its tests call), and the base run."""
    repo, setup = instance.repo, instance.environment_setup_commit
    recipe = testbeds.recipes.for_instance(instance)
    await testbeds.repos.ensure_commit(repo, instance.base_commit)
    await testbeds.repos.ensure_commit(repo, setup)
    # As Testbeds.open asks for it (the same key, the same sources of requirements).
    await testbeds.envs.ensure(
        recipe,
        f"{repo} {instance.version}",
        setup,
        functools.partial(testbeds.repos.read_file, repo, setup),
        functools.partial(testbeds.repos.checkout, repo, setup),
    )
    for name in recipe.services:
        await testbeds.envs.ensure(SERVICES[name].recipe(), f"service {name}")
    if validator is not None:
        await validator.validate(instance)


class SharedRepos(RepoCache):
    """The shared git mirrors, read-only. Checkouts are ``--shared`` clones that read the
    mirror's objects; git's own HOME is under ``home`` (the task's disk)."""

    def __init__(
        self, home: Path, shared: Path, url_template: str, env: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(home, url_template, env)
        self.root = shared

    async def ensure_commit(self, repo: str, commit: str, url: str | None = None) -> Path:
        mirror = self.mirror_path(repo)
        if mirror.exists() and await self._has_commit(mirror, commit):
            return mirror
        raise RepoUnavailable(
            f"{repo}: commit {commit} is not in the shared git cache; the prepare task "
            f"could not fetch it (see {PREPARE_LOG})"
        )


class SharedEnvs(EnvManager):
    """Environments copied from the shared cache (read-only) to ``root`` on the task's disk."""

    def __init__(
        self, root: Path, shared: Path, search: InterpreterSearch, host_env: Mapping[str, str]
    ) -> None:
        super().__init__(root, search, host_env)
        self.shared = shared

    async def ensure(
        self,
        recipe: Recipe,
        label: str,
        setup_commit: str = "",
        read_file: ReadFile | None = None,
        checkout: Checkout | None = None,
    ) -> Environment:
        key = recipe.env_key(setup_commit)
        local, source = self.root / key, self.shared / key
        if not (local / COMPLETE).exists():
            if not (source / COMPLETE).exists():
                failed = self.shared / f"{key}.failed.log"
                tail = failed.read_text(errors="replace")[-4000:] if failed.exists() else ""
                why = f"its build failed ({failed})" if tail else f"see {PREPARE_LOG}"
                raise EnvSetupFailed(
                    f"environment {key} for {label} is not in the shared cache: {why}",
                    log_tail=tail,
                    permanent=True,  # the prepare task already tried; a retry cannot help
                )
            await localize(source, local)
        return self._load(key, local)


async def localize(source: Path, dest: Path) -> None:
    """``dest``: the environment ``source`` (read-only), whole or not at all, with what
    ``environments.make_view`` gives each evaluation a private copy of (``bin/``,
    ``site-packages``, ``pyvenv.cfg``) and the environment's own files copied, and what it
    shares as files nothing writes (the standard library, headers, libraries, the
    sysroot) linked to ``source``. Keep in step with make_view."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}")
    try:
        tmp.mkdir()
        for entry in source.iterdir():
            if entry.name == "py" and entry.is_dir() and not entry.is_symlink():
                await _localize_prefix(entry, tmp / "py")
            elif entry.is_dir() and not entry.is_symlink():
                (tmp / entry.name).symlink_to(entry)
            elif entry.name != COMPLETE:
                await _copy(entry, tmp / entry.name)
        (tmp / COMPLETE).write_text((source / COMPLETE).read_text())
        shutil.rmtree(dest, ignore_errors=True)  # never complete (that is checked first)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def _localize_prefix(source: Path, dest: Path) -> None:
    dest.mkdir()
    for entry in source.iterdir():
        target = dest / entry.name
        if entry.name == "lib" and entry.is_dir() and not entry.is_symlink():
            target.mkdir()
            for lib in entry.iterdir():
                if lib.name.startswith("python") and lib.is_dir() and not lib.is_symlink():
                    (target / lib.name).mkdir()
                    for item in lib.iterdir():
                        if item.name == "site-packages":
                            await _copy(item, target / lib.name / item.name)
                        else:
                            (target / lib.name / item.name).symlink_to(item)
                else:
                    (target / lib.name).symlink_to(lib)
        elif entry.name in ("bin", "pyvenv.cfg"):
            await _copy(entry, target)
        else:
            target.symlink_to(entry)


async def _copy(source: Path, dest: Path) -> None:
    """Links stay links, hard links stay hard links; modes and times are kept (so
    byte-compiled files stay valid)."""
    await run_checked(
        [
            "cp",
            "-R",
            "--no-dereference",
            "--preserve=mode,timestamps,links",
            str(source),
            str(dest),
        ],
        timeout=COPY_TIMEOUT,
    )


class SharedBaseValidation(BaseValidator):
    """The prepare task's base run, read from the shared cache; never run here."""

    async def validate(self, instance: Instance) -> dict[str, Any]:
        path = self.cache_dir / f"{instance.instance_id}-{self.key(instance)}.json"
        if path.exists():
            return {**json.loads(path.read_text()), "cached": True}
        return {
            "ok": None,
            "error": f"no base run in the shared cache: the prepare task could not make one "
            f"(see {PREPARE_LOG})",
            "cached": False,
        }
