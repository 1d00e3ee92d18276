"""A per-repository git cache and the per-instance checkouts made from it.

Each repository is cloned once (bare) from ``repo_url_template`` and fetched again only
when a base commit is missing. An instance's workspace is a ``--shared`` clone of that
cache put in the state of the official images: the default branch reset to the base
commit, no remote, and no tags dated after the base commit (so setuptools_scm versions
match).
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from swegreen.core.config import repo_url
from swegreen.core.errors import RepoUnavailable
from swegreen.processes.locks import file_lock
from swegreen.processes.procs import CommandFailed, run_checked, run_process
from swegreen.repositories.history import Cut, HistoryStores

CLONE_TIMEOUT = 3600.0
# What git says when the source lacks an object (a partial or pruned mirror): no retry
# brings it back, unlike a network failure.
MISSING_OBJECT = re.compile(
    r"missing (blob|tree|commit|object)|unable to read [0-9a-f]{7,}|"
    r"unable to read sha1 file of|bad object|"
    r"not our ref|could not read .* from the source|fatal: reference is not a tree",
    re.IGNORECASE,
)


def missing_object(output: str) -> bool:
    return MISSING_OBJECT.search(output) is not None


_GITHUB = re.compile(
    r"^(?:https?://|git://|ssh://git@|git@)github\.com[/:]([^/]+)/([^/]+?)(?:\.git)?/?$"
)


def github_repo(url: str, parent: str) -> str | None:
    """``owner/name`` of a submodule URL on GitHub (relative URLs resolve against the
    parent repository's owner), else None."""
    if url.startswith("../"):
        owner = parent.partition("/")[0]
        name = url.removeprefix("../").removesuffix(".git").strip("/")
        return f"{owner}/{name}" if name and "/" not in name else None
    m = _GITHUB.match(url.strip())
    return f"{m.group(1)}/{m.group(2)}" if m else None


def git_env(home: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A git environment that never prompts and ignores the host's git configuration."""
    env = {
        "PATH": (base or os.environ).get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LC_ALL": "C",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "swegreen",
        "GIT_AUTHOR_EMAIL": "swegreen@localhost",
        "GIT_COMMITTER_NAME": "swegreen",
        "GIT_COMMITTER_EMAIL": "swegreen@localhost",
    }
    for key in ("SSL_CERT_FILE", "GIT_SSL_CAINFO", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"):
        if base and key in base:
            env[key] = base[key]
    return env


class RepoCache:
    def __init__(self, root: Path, url_template: str, env: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.url_template = url_template
        home = root / ".git-home"
        home.mkdir(parents=True, exist_ok=True)
        self.env = git_env(home, env)
        self.history = HistoryStores(root.with_name("history"), self.env)

    def mirror_path(self, repo: str) -> Path:
        return self.root / (repo.replace("/", "__") + ".git")

    async def ensure_commit(self, repo: str, commit: str, url: str | None = None) -> Path:
        """The cached clone of ``repo`` (from ``url``, else the template), containing ``commit``."""
        mirror = self.mirror_path(repo)
        url = url or repo_url(self.url_template, repo)
        if mirror.exists() and await self._has_commit(mirror, commit):
            return mirror
        async with file_lock(self.root / ".locks" / f"{mirror.name}.lock"):
            if not mirror.exists():
                await self._clone(repo, url, mirror)
            if not await self._has_commit(mirror, commit):
                await self._fetch(repo, url, mirror, commit)
            if not await self._has_commit(mirror, commit):
                raise RepoUnavailable(
                    f"{repo}: commit {commit} is not in {url} (fetched all branches and "
                    "tags); point repo_url_template at a source that has it",
                    permanent=True,
                )
        return mirror

    def read_file(self, repo: str, commit: str, path: str) -> str | None:
        """A file of ``repo`` at ``commit`` from the cache (blocking: call from a thread)."""
        proc = subprocess.run(
            ["git", "-C", str(self.mirror_path(repo)), "show", f"{commit}:{path}"],
            env=self.env,
            capture_output=True,
            timeout=60,
            check=False,
        )
        return proc.stdout.decode("utf-8", "replace") if proc.returncode == 0 else None

    def missing_objects(self, repo: str, commit: str, paths: Sequence[str] = ()) -> list[str]:
        """The objects of ``commit``'s tree (or of ``paths`` in it) the cache lacks: what a
        checkout or a read there would fail on (blocking: call from a thread). A source
        can hold a commit and still lack one of its files (a fork's partial history)."""
        git = ["git", "-C", str(self.mirror_path(repo))]
        listed = subprocess.run(
            [*git, "ls-tree", "-r", "-z", commit, "--", *paths],
            env=self.env,
            capture_output=True,
            timeout=300,
            check=False,
        )
        if listed.returncode != 0:  # a tree itself is missing
            found = MISSING_OBJECT.search(listed.stderr.decode("utf-8", "replace"))
            return [found.group(0) if found else f"a tree of {commit}"]
        entries = (e.partition("\t") for e in listed.stdout.decode().split("\0") if e)
        blobs = {meta.split()[2]: path for meta, _, path in entries if meta.split()[1] == "blob"}
        if not blobs:
            return []
        checked = subprocess.run(
            [*git, "cat-file", "--batch-check"],
            input=("\n".join(blobs) + "\n").encode(),
            env=self.env,
            capture_output=True,
            timeout=300,
            check=False,
        )
        lines = checked.stdout.decode().splitlines()
        gone = [ln.split()[0] for ln in lines if ln.endswith(" missing")]
        return [f"{sha} ({blobs[sha]})" for sha in gone]

    async def checkout(self, repo: str, commit: str, dest: Path, url: str | None = None) -> None:
        """Make ``dest`` a working tree of ``repo`` at ``commit``, as the official images are."""
        mirror = await self.ensure_commit(repo, commit, url)
        try:
            await run_checked(
                ["git", "clone", "--quiet", "--shared", "--no-checkout", str(mirror), str(dest)],
                env=self.env,
            )
            git = ["git", "-C", str(dest)]
            await run_checked(
                [*git, "-c", "advice.detachedHead=false", "reset", "--quiet", "--hard", commit],
                env=self.env,
            )
            await run_checked([*git, "remote", "remove", "origin"], env=self.env)
            await self._drop_future_tags(dest, commit)
            await self._submodules(repo, dest, commit)
        except CommandFailed as exc:
            raise RepoUnavailable(
                f"{repo}: could not check out {commit}: {exc}",
                permanent=missing_object(str(exc)),
            ) from exc

    async def checkout_isolated(self, repo: str, commit: str, dest: Path) -> Cut:
        """Make ``dest`` a working tree of ``repo`` at ``commit`` that holds no history after
        it: its objects are borrowed from ``commit``'s history stores (history.py) only,
        its one branch and its tags (those ``git describe`` could use upstream) end at or
        before ``commit``, and it has no remote, reflog or ORIG_HEAD. Submodules keep only
        their recorded commit's history. This is what runs participant code."""
        mirror = await self.ensure_commit(repo, commit)
        try:
            cut = await self.history.cut(repo, mirror, commit)
            branch = (
                await run_process(
                    ["git", "--git-dir", str(mirror), "symbolic-ref", "HEAD"], env=self.env
                )
            ).output.strip() or "refs/heads/main"
            git = ["git", "-C", str(dest)]
            await run_checked(["git", "init", "--quiet", str(dest)], env=self.env)
            alternates = dest / ".git" / "objects" / "info" / "alternates"
            alternates.write_text("".join(f"{p}\n" for p in cut.objects))
            await run_checked([*git, "symbolic-ref", "HEAD", branch], env=self.env)
            await run_checked([*git, "update-ref", "--no-deref", branch, commit], env=self.env)
            await run_checked([*git, "reset", "--quiet", "--hard", commit], env=self.env)
            if cut.tags:
                script = "".join(f"create {name} {oid}\n" for name, oid in cut.tags.items())
                await run_checked(
                    [*git, "update-ref", "--stdin"], env=self.env, stdin_data=script.encode()
                )
            await self._submodules(repo, dest, commit)
            await _expire_history(dest, self.env)
        except CommandFailed as exc:
            raise RepoUnavailable(
                f"{repo}: could not check out {commit}: {exc}",
                permanent=missing_object(str(exc)),
            ) from exc
        return cut

    async def _submodules(self, repo: str, dest: Path, commit: str) -> None:
        """Submodules initialized at their recorded commits from the same kind of source
        as the repository itself (``repo_url_template``), never from GitHub directly:
        astropy's ``astropy_helpers``, which its setup.py would otherwise fetch with ``git
        submodule update``. The checkout's config names the local copy for each, so a
        later ``git submodule update`` inside the sandbox finds it too."""
        if not (dest / ".gitmodules").is_file():
            return
        git = ["git", "-C", str(dest)]
        listed = await run_process(
            [*git, "config", "-f", ".gitmodules", "--get-regexp", r"^submodule\..*\.(path|url)$"],
            env=self.env,
            timeout=60,
        )
        modules: dict[str, dict[str, str]] = {}
        for line in listed.output.splitlines():
            key, _, value = line.partition(" ")
            name, _, field = key.removeprefix("submodule.").rpartition(".")
            modules.setdefault(name, {})[field] = value.strip()
        for name, entry in sorted(modules.items()):
            path, url = entry.get("path"), entry.get("url")
            if not path or not url:
                continue
            tree = await run_checked([*git, "ls-tree", commit, "--", path], env=self.env)
            fields = tree.output.split()
            if len(fields) < 3 or fields[1] != "commit":
                continue  # not a gitlink at this commit
            sub_repo = github_repo(url, repo)
            if sub_repo is None:
                raise RepoUnavailable(
                    f"{repo}: submodule {name} comes from {url}, which is not a GitHub "
                    "repository that repo_url_template can name",
                    permanent=True,
                )
            mirror = await self.ensure_commit(sub_repo, fields[2])
            # init copies the URL from .gitmodules; the checkout's own config then names
            # the local copy, which every later `git submodule update` uses
            await run_checked([*git, "submodule", "--quiet", "init", "--", path], env=self.env)
            await run_checked(
                [*git, "config", f"submodule.{name}.url", mirror.resolve().as_uri()],
                env=self.env,
            )
            await run_checked(
                [
                    *git,
                    "-c",
                    "protocol.file.allow=always",
                    "submodule",
                    "--quiet",
                    "update",
                    "--",
                    path,
                ],
                env=self.env,
                timeout=CLONE_TIMEOUT,
            )

    async def _has_commit(self, mirror: Path, commit: str) -> bool:
        result = await run_process(
            ["git", "-C", str(mirror), "cat-file", "-e", f"{commit}^{{commit}}"],
            env=self.env,
            timeout=60,
        )
        return result.ok

    @staticmethod
    def _trusting(url: str) -> tuple[list[str], list[str]]:
        """For a source on this machine that the user named: git's options to read it
        although another user owns it (a mirror made by root, read by a non-root engine),
        which git refuses by default, and this engine's git reads no global configuration
        where the user could say they trust it. ``safe.directory`` for this git and for the
        ``upload-pack`` it starts (which does not inherit ``-c``); the source is only read
        from (clone, fetch). (Options before the command, the command's own options.)"""
        path = url.removeprefix("file://")
        if "://" in path or not path.startswith("/"):
            return [], []
        found = dict.fromkeys(
            p for base in (path, os.path.realpath(path)) for p in (base, f"{base}/.git")
        )
        options = [part for p in found for part in ("-c", f"safe.directory={p}")]
        upload_pack = ["--upload-pack", shlex.join(["git", *options, "upload-pack"])]
        return options, upload_pack

    @staticmethod
    def _owned_by_another(url: str) -> bool:
        """Whether a source on this machine belongs to another user: its files are then
        read through git's protocol (``--no-local``), not copied, so that one it keeps
        unreadable to others (a ``.promisor`` file) does not end the clone."""
        path = url.removeprefix("file://")
        try:
            return "://" not in path and os.stat(path).st_uid != os.geteuid()
        except OSError:
            return False

    async def _clone(self, repo: str, url: str, mirror: Path) -> None:
        mirror.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{mirror.name}.", dir=mirror.parent))
        tmp.chmod(0o755)  # sandboxed checkouts read its objects (their git alternates)
        trust, upload_pack = self._trusting(url)
        try:
            local = ["--no-local"] if self._owned_by_another(url) else []
            clone = ["clone", *upload_pack, *local, "--quiet", "--bare", url, str(tmp)]
            result = await run_process(["git", *trust, *clone], env=self.env, timeout=CLONE_TIMEOUT)
            if not result.ok:
                raise RepoUnavailable(
                    f"cannot clone {repo} from {url}: {result.tail(5).strip()}. "
                    "Check the network, or set repo_url_template to a reachable mirror "
                    "(e.g. /mirrors/{owner}__{name}.git)",
                    log_tail=result.tail(),
                )
            os.replace(tmp, mirror)
        finally:
            await asyncio.to_thread(shutil.rmtree, tmp, True)

    async def _fetch(self, repo: str, url: str, mirror: Path, commit: str) -> None:
        trust, upload_pack = self._trusting(url)
        git = ["git", *trust, "-C", str(mirror), "fetch", *upload_pack, "--quiet", url]
        # A commit on no branch can still be fetched by id from hosts that allow it.
        await run_process([*git, commit], env=self.env, timeout=CLONE_TIMEOUT)
        result = await run_process(
            [*git, "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"],
            env=self.env,
            timeout=CLONE_TIMEOUT,
        )
        if not result.ok and not await self._has_commit(mirror, commit):
            raise RepoUnavailable(
                f"cannot fetch {repo} from {url}: {result.tail(5).strip()}", log_tail=result.tail()
            )

    async def _drop_future_tags(self, dest: Path, commit: str) -> None:
        git = ["git", "-C", str(dest)]
        base_time = int(
            (
                await run_checked([*git, "show", "-s", "--format=%ct", commit], env=self.env)
            ).output.strip()
        )
        refs = await run_checked(
            [
                *git,
                "for-each-ref",
                "--format=%(refname) %(*committerdate:unix)%(committerdate:unix)",
                "refs/tags",
            ],
            env=self.env,
        )
        doomed = []
        for line in refs.output.splitlines():
            name, _, stamp = line.partition(" ")
            if stamp.strip().isdigit() and int(stamp) > base_time:
                doomed.append(name)
        if doomed:
            script = "".join(f"delete {name}\n" for name in doomed).encode()
            await run_checked([*git, "update-ref", "--stdin"], env=self.env, stdin_data=script)


async def _expire_history(dest: Path, env: Mapping[str, str]) -> None:
    """No reflog or ORIG_HEAD in ``dest``, and in each submodule only what its checked-out
    commit reaches (a submodule is a full clone of its own mirror)."""
    top = dest / ".git"
    modules = [
        config.parent
        for config in (top / "modules").rglob("config")
        if (config.parent / "HEAD").is_file() and (config.parent / "objects").is_dir()
    ]
    for gitdir in [top, *modules]:
        for name in ("ORIG_HEAD", "FETCH_HEAD"):
            (gitdir / name).unlink(missing_ok=True)
        await asyncio.to_thread(shutil.rmtree, gitdir / "logs", True)
    for gitdir in modules:
        git = ["git", "--git-dir", str(gitdir)]
        refs = await run_checked([*git, "for-each-ref", "--format=%(refname)"], env=env)
        doomed = "".join(f"delete {r}\n" for r in refs.output.split())
        if doomed:
            await run_checked(
                [*git, "update-ref", "--no-deref", "--stdin"], env=env, stdin_data=doomed.encode()
            )
        # HEAD is detached at the recorded commit: it alone keeps objects alive
        await run_checked([*git, "repack", "-a", "-d", "-q"], env=env)
        await run_checked([*git, "prune", "--expire=now"], env=env)
        (gitdir / "objects" / "info" / "alternates").unlink(missing_ok=True)
