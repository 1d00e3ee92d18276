"""The environment cache: one Python environment per recipe key, built once and reused.

An environment is what a conda env is in the official images: a whole interpreter tree
(copied from pyenv/uv, so tools that symlink ``sys.executable`` still find their
packages), upstream's base tooling, the recipe's packages resolved as of a date, plus a
sysroot for missing Debian packages and compiled locales. It is built under a lock and
marked complete only at the end; a failed build leaves ``<key>.failed.log``.

Each evaluation works in a *view*: a linked copy of the environment (a fraction of a
second; views.py) whose few files that installs rewrite in place are real copies, so an editable
install or ``setup.py install`` of one instance never leaks into the environment or
into another instance running at the same time."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from swegreen.core.errors import (
    EnvSetupFailed,
    EvaluationFailure,
    InterpreterNotFound,
    RepoUnavailable,
)
from swegreen.core.recipes import Recipe
from swegreen.environments.dated_index import DEFAULT_UPSTREAM, DatedIndex
from swegreen.environments.environment import (
    COMPLETE,
    ENV_INFO,
    Checkout,
    Environment,
    ReadFile,
)
from swegreen.environments.interpreters import (
    InterpreterSearch,
    find_interpreter,
)
from swegreen.environments.views import (
    Links,
    MountCopy,
    make_view,
)
from swegreen.processes.cache_room import DiskReserve, mark_used
from swegreen.processes.locks import file_lock
from swegreen.sandbox import seal
from swegreen.sandbox.environ import INDEX_PASSTHROUGH

log = logging.getLogger(__name__)

INDEX = "index.jsonl"  # content-keyed environments and who uses them (EnvManager.shared)
BY_LOCK = "by-lock"  # lock key -> the environment first built from that lock
# Passed from the host to environment builds: what a test run's install gets, and uv's.
BUILD_PASSTHROUGH = (*INDEX_PASSTHROUGH, "UV_INDEX_URL")


class SharedLocks(Protocol):
    """Environments built by other machines, found by what they are made of."""

    def find(self, lock_key: str) -> str | None:
        """The key of an environment made of ``lock_key``, brought under the manager's
        root (complete, as built), or None."""
        ...


class EnvManager:
    """Builds and hands out environments.

    A build that fails for a reason of its own (a resolve conflict, a compile error) is
    remembered on disk, per environment key, with its log (``<key>.failed.json`` and
    ``.failed.log``): every later row that needs it fails fast with the same reason, in
    this run and the next, until the recipe changes (another key) or the user asks for a
    rebuild (``rebuild_failed``). A failure of the moment (the index unreachable, a full
    disk) is not remembered on disk and may be retried, at most ``max_builds`` times per
    process."""

    def __init__(
        self,
        root: Path,
        search: InterpreterSearch,
        host_env: Mapping[str, str],
        max_builds: int = 2,
        rebuild_failed: bool = False,
        dated_index: DatedIndex | None = None,
        content_keys: bool = True,
        reserve: DiskReserve | None = None,
        check_seals: bool = False,
    ) -> None:
        self.root = root
        self.reserve = reserve
        self.content_keys = content_keys
        self.dated_index = dated_index
        self.search = search
        self._interpreters_seen: set[str] = set()  # versions found (check_interpreter)
        # where the tests run as the engine's own uid and Landlock (which covers no
        # metadata) is what confines them: environments are checked before use (``intact``)
        self.check_seals = check_seals
        self.incidents: dict[str, str] = {}  # key -> why it was set aside
        self.host_env = dict(host_env)
        self.max_builds = max_builds
        self.rebuild_failed = rebuild_failed
        self._failures: dict[str, list[EvaluationFailure]] = {}
        self._rebuilt: set[str] = set()  # keys whose remembered failure this process retried
        # environments stored elsewhere, by lock (the AWS build phase's: build_phase.py)
        self.shared_locks: SharedLocks | None = None

    def failure_path(self, key: str) -> Path:
        return self.root / f"{key}.failed.json"

    async def intact(self, path: Path) -> bool:
        """Whether the built environment at ``path`` may be used: always, unless seals are
        checked (``check_seals``: the tests share the engine's uid), when it must be as
        built; one that is not is set aside (``<key>.broken-<time>``, kept for
        inspection) and said so in the log, and the caller builds it again."""
        if not self.check_seals:
            return True
        why = await asyncio.to_thread(seal.env_broken, path)
        if why == seal.UNSEALED:  # built before environments were sealed: from now on
            await asyncio.to_thread(seal.seal_env, path)
            return True
        if why is None:
            return True
        aside = path.with_name(f"{path.name}.broken-{int(time.time())}-{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            os.rename(path, aside)
        self.incidents[path.name] = why
        log.warning("INCIDENT: environment %s %s; set aside as %s", path.name, why, aside.name)
        return False

    async def check_interpreter(self, recipe: Recipe, label: str) -> None:
        """Fails at once (``InterpreterNotFound``, with what to do) where the recipe's
        Python is not on this machine and no environment here was built with it: before
        the row clones anything, rather than after (a django clone takes minutes). An
        environment built with that version may be the one this row reuses, so its
        presence skips the check; the build looks again either way."""
        version = recipe.python
        if version == "host" or version in self._interpreters_seen:
            return
        if any(_built_with(info, version) for info in self.root.glob(f"*/{ENV_INFO}")):
            self._interpreters_seen.add(version)
            return
        await asyncio.to_thread(find_interpreter, version, self.search, label)
        self._interpreters_seen.add(version)

    def remembered_failure(self, key: str) -> EvaluationFailure | None:
        """The failure remembered for ``key``, unless a rebuild was asked for and this
        process has not tried it yet."""
        path = self.failure_path(key)
        if not path.exists() or (self.rebuild_failed and key not in self._rebuilt):
            return None
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        cls = RepoUnavailable if data.get("reason") == RepoUnavailable.reason else EnvSetupFailed
        return cls(
            f"{data.get('message', 'the build failed')} (remembered from "
            f"{data.get('when', 'an earlier build')}; log: {self.root / f'{key}.failed.log'}; "
            "fix the recipe, or run with --rebuild-envs to build it again)",
            log_tail=str(data.get("log_tail", "")),
            permanent=True,
        )

    def build_env(self, home: Path) -> dict[str, str]:
        """The clean environment every build step runs with (no host pip config leaks in)."""
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "TZ": "Etc/UTC",
            "PIP_CONFIG_FILE": "/dev/null",
            "PIP_CACHE_DIR": str(self.root / ".pip-cache"),
            "UV_CACHE_DIR": str(self.root / ".uv-cache"),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_INPUT": "1",
            "PIP_PROGRESS_BAR": "off",
            "DEBIAN_FRONTEND": "noninteractive",
        }
        env.update({k: self.host_env[k] for k in BUILD_PASSTHROUGH if k in self.host_env})
        if "SSL_CERT_FILE" not in env and "PIP_CERT" in env:
            env["SSL_CERT_FILE"] = env["PIP_CERT"]  # uv reads this one
        return env

    async def ensure(
        self,
        recipe: Recipe,
        label: str,
        setup_commit: str = "",
        read_file: ReadFile | None = None,
        checkout: Checkout | None = None,
        row: str = "",
    ) -> Environment:
        """The environment for ``recipe``, building it if no complete one exists.
        ``read_file`` reads a path of the repository at ``setup_commit`` (for recipes whose
        requirements come from the repository); ``checkout`` materializes the repository
        there (for recipes that pip-install it, whose dependencies are locked too).
        Where the recipe reads only its requirements files, the environment is the one
        for their text (``Recipe.content_env_key``), whatever commit they were read at;
        ``row`` names who asked, in the index of who shares which (``INDEX``)."""
        key = recipe.env_key(setup_commit)
        if self.content_keys and recipe.content_keyed and read_file is not None:
            # the build machinery (packaging, yaml, uv's lock) loads only when needed: a
            # row on a prepared workspace never does
            from swegreen.environments.lock import files_read

            files = await asyncio.to_thread(files_read, recipe, read_file)
            key = await asyncio.to_thread(
                self._content_key, recipe.content_env_key(files), key, label, setup_commit, row
            )
        path = self.root / key
        if (path / COMPLETE).exists() and await self.intact(path):
            return self._load(key, path)
        if (known := self.remembered_failure(key)) is not None:
            raise known
        async with file_lock(self.root / ".locks" / f"{key}.lock"):
            if (path / COMPLETE).exists():  # built by whoever held the lock before us
                return self._load(key, path)
            if (known := self.remembered_failure(key)) is not None:  # failed while we waited
                raise known
            if self.reserve is not None:  # a disk too full to build on: not the recipe's fault
                await asyncio.to_thread(self.reserve.check, f"the environment {label}")
            failures = self._failures.setdefault(key, [])
            if failures and (failures[-1].permanent or len(failures) >= self.max_builds):
                last = failures[-1]
                raise type(last)(
                    f"{last} (failed {len(failures)} time(s) in this run; "
                    f"log: {self.root / f'{key}.failed.log'})",
                    log_tail=last.log_tail,
                    permanent=True,
                )
            self._rebuilt.add(key)
            self.failure_path(key).unlink(missing_ok=True)
            start = time.monotonic()
            from swegreen.environments.build import SameAsBuilt, _Build

            try:
                build = _Build(
                    self, recipe, label, setup_commit, key, path, read_file or (lambda _path: None)
                )
                build.checkout = checkout
                await build.run()
            except SameAsBuilt as same:
                await asyncio.to_thread(self._alias, key, same.key, label, setup_commit, row)
                env = self._load(key, path)
                return dataclasses.replace(env, build_seconds=time.monotonic() - start)
            except (EnvSetupFailed, RepoUnavailable) as exc:
                # A permanent failure (the recipe's own, or an object the source lacks at
                # the setup commit) fails every later build of this key the same way: kept
                # for this run, and on disk but for a missing interpreter (installable).
                failures.append(exc)
                if exc.permanent and not isinstance(exc, InterpreterNotFound):
                    self._remember(key, label, exc)
                raise
            env = self._load(key, path)
            return Environment(
                env.key,
                env.root,
                env.prefix,
                env.runtime_env,
                env.extra_bin,
                build_seconds=time.monotonic() - start,
                reused=False,
            )

    async def same_lock(self, lock_key: str) -> str | None:
        """The complete, intact environment made of the same as ``lock_key`` says, if any:
        one of this cache, else one ``shared_locks`` brings into it."""
        link = self.root / BY_LOCK / lock_key
        if link.is_symlink():
            target = self.root / Path(os.readlink(link)).name  # ../<key>, beside this one
            if (target / COMPLETE).exists() and await self.intact(target):
                return target.name
        if self.shared_locks is None:
            return None
        key = await asyncio.to_thread(self.shared_locks.find, lock_key)
        if key is None:
            return None
        target = self.root / key
        if (target / COMPLETE).exists() and await self.intact(target):
            await asyncio.to_thread(self.record_lock, lock_key, key)
            return key
        return None

    def lock_of(self, key: str) -> str | None:
        """The lock key environment ``key`` was recorded under (its build's), if any."""
        folder = self.root / BY_LOCK
        if not folder.is_dir():
            return None
        for link in folder.iterdir():
            if link.is_symlink() and Path(os.readlink(link)).name == key:
                return link.name
        return None

    def record_lock(self, lock_key: str, key: str) -> None:
        """``key`` is made of what ``lock_key`` says (the first build of it keeps it)."""
        link = self.root / BY_LOCK / lock_key
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() and (link.parent / os.readlink(link) / COMPLETE).exists():
            return
        fresh = link.with_name(f".{lock_key}.{os.getpid()}")
        fresh.unlink(missing_ok=True)
        fresh.symlink_to(f"../{key}")
        os.replace(fresh, link)  # over one whose environment was pruned

    def _alias(self, key: str, target: str, label: str, setup_commit: str, row: str) -> None:
        """``key`` names the environment ``target`` (made of the same), and the index says
        who shares it."""
        link = self.root / f".{key}.{os.getpid()}.link"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        os.replace(link, self.root / key)
        entry = {"env": target, "commit_key": key, "label": label, "same_lock": True}
        entry.update(files_read_at=setup_commit, row=row)
        with (self.root / INDEX).open("a") as fh:
            fh.write(json.dumps(entry) + "\n")

    def _content_key(
        self, content: str, address: str, label: str, setup_commit: str, row: str
    ) -> str:
        """The key to build or load for requirements whose text gives ``content``: that
        one, or an equal build already made under the commit's key (``address``, before
        keys were by content), which ``content`` then names (a link). The pair is added to
        the index the first time it is seen."""
        path = self.root / content
        if (
            not path.exists()
            and not path.is_symlink()
            and (self.root / address / COMPLETE).exists()
        ):
            link = self.root / f".{content}.{os.getpid()}.link"
            link.unlink(missing_ok=True)
            link.symlink_to(address)
            try:
                os.rename(link, path)  # fails where a build of its own appeared meanwhile
            except OSError:
                link.unlink(missing_ok=True)
        seen = self.root / "addresses" / f"{address}{'.' + row if row else ''}"
        seen.parent.mkdir(parents=True, exist_ok=True)
        try:
            seen.symlink_to(f"../{content}")
        except FileExistsError:
            return content
        entry = {"env": content, "commit_key": address, "label": label}
        entry.update(files_read_at=setup_commit, row=row)
        with (self.root / INDEX).open("a") as fh:  # one short line: appends do not interleave
            fh.write(json.dumps(entry) + "\n")
        return content

    def shared(self) -> dict[str, list[dict[str, str]]]:
        """The index: each content-keyed environment and the rows and commits using it."""
        by_env: dict[str, list[dict[str, str]]] = {}
        path = self.root / INDEX
        if path.exists():
            for line in path.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    by_env.setdefault(entry["env"], []).append(entry)
        return by_env

    def _remember(self, key: str, label: str, exc: EvaluationFailure) -> None:
        record = {
            "key": key,
            "for": label,
            "reason": exc.reason,
            "message": str(exc),
            "log_tail": exc.log_tail[-4000:],
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        tmp = self.failure_path(key).with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=2))
        os.replace(tmp, self.failure_path(key))

    def _load(self, key: str, path: Path) -> Environment:
        if path.is_symlink():  # a content key naming the equal build made under a commit's
            path = self.root / os.readlink(path)
            key = path.name
        mark_used(self.root, key)  # what `swegreen cache prune` keeps longest
        info = json.loads((path / ENV_INFO).read_text())
        return Environment(
            key=key,
            root=path,
            prefix=path / "py",
            runtime_env=dict(info.get("runtime_env", {})),
            extra_bin=tuple(Path(p) for p in info.get("extra_bin", [])),
        )

    def close(self) -> None:
        """Stop what the manager started (the dated index process)."""
        if self.dated_index is not None:
            self.dated_index.close()

    def recording_index(self, wheelhouse: Path) -> DatedIndex:
        """A dated index of its own that keeps in ``wheelhouse`` every file it serves (the
        caller closes it): one per prepared workspace, so no other install adds to it."""
        upstream = self.dated_index.upstream if self.dated_index else DEFAULT_UPSTREAM
        env = self.dated_index.env if self.dated_index else None
        return DatedIndex(upstream, env, record=wheelhouse)

    async def index_url(self, recipe: Recipe) -> str | None:
        """The index every pip of ``recipe`` should see: as of its date, when it has one."""
        if not recipe.exclude_newer or self.dated_index is None:
            return None
        return await self.dated_index.url(recipe.exclude_newer, recipe.exclude_newer_exempt)

    def loaded(self, key: str, prefix: Path) -> Environment:
        """The built environment ``key``, seen through the view at ``prefix``."""
        return dataclasses.replace(self._load(key, self.root / key), prefix=prefix)

    async def view(
        self,
        env: Environment,
        dest: Path,
        rewrite: Mapping[str, str] | None = None,
        owner: int | None = None,
        mount_copy: MountCopy | None = None,
        links: Links = "hard",
    ) -> Environment:
        """A private, writable view of ``env`` at ``dest`` for one evaluation; ``owner``:
        the sandbox's uid, lent what it may write as the view is made; ``mount_copy``:
        its site-packages mounted copy-on-write where it can be; ``links``: symbolic for a
        sandbox of the engine's own uid (``make_view``)."""
        await asyncio.to_thread(make_view, env.prefix, dest, rewrite, owner, mount_copy, links)
        return Environment(
            env.key, env.root, dest, env.runtime_env, env.extra_bin, env.build_seconds, env.reused
        )


def _built_with(info: Path, version: str) -> bool:
    """Whether the complete environment whose ``env.json`` is ``info`` has Python ``version``."""
    if not (info.parent / COMPLETE).exists():
        return False
    try:
        return json.loads(info.read_text()).get("python") == version
    except (OSError, ValueError, AttributeError):
        return False
