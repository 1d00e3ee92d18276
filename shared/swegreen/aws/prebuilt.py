"""Prebuilt artifacts: what a row's task on AWS starts from in seconds.

The build phase's trusted tasks (they run no participant code) make each git mirror,
environment and prepared workspace a run needs once, and keep each in S3 as a zstd
tarball under ``artifacts/``. A row's evaluate task downloads the four or five it needs
(through pre-signed URLs: it holds no credentials), unpacks them on its own disk at the
paths where they were built (environments hold absolute paths) and evaluates there with
the local engine. Nothing is shared and writable between rows, and nothing a patch writes
outlives its task.

Layout under ``artifacts/`` (names are the local cache's):

    repos/<owner>__<name>/<sha256>.tar.zst  a bare git mirror (``repos/<owner>__<name>.git``),
                                    named by its content: never overwritten
    repos/<owner>__<name>.json      the pointer: which mirror is current and the commits it
                                    holds, replaced whole (one object) when a build adds
                                    commits (``repos/<owner>__<name>.tar.zst``: the
                                    mirror of stacks before, which the pointer was a list)
    envs/<env key>.tar.zst          an environment (``envs/<key>``)
    envs/<env key>.failed.json      a build that failed for the recipe's own reason:
                                    remembered, never built again unless asked
    envs/<env key>.same.json        the environment is another's, made of the same lock
                                    (``{"env": <that key>}``); its tarball holds only the
                                    link to it, and a task unpacks both
    envs/by-lock/<lock key>.json    the environment first stored of that lock, for later
                                    builds to use instead of building it again
    prepared/<name>.tar.zst         a prepared workspace (``prepared/<name>``) and its
                                    base run (``base-validation/<instance id>-*.json``)

A prepared workspace's environment view is mostly hard links into its environment; the
tarball keeps only what differs (``links`` lists the rest) and ``unpack`` links them again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from swegreen.core.dataset import Instance
from swegreen.core.errors import EvaluationFailure
from swegreen.core.recipes import RecipeBook, prepared_name
from swegreen.environments.services import SERVICES
from swegreen.sandbox import seal

PREFIX = "artifacts/"
SUFFIX = ".tar.zst"
LINKS = ".swegreen-links.json"  # in a prepared workspace's tarball
# zstd level 3 with every core: a few hundred MB/s each way, a third of the size.
COMPRESS = "zstd -T0 -3 -q"


def repo_slug(repo: str) -> str:
    return repo.replace("/", "__")


def repo_key(repo: str) -> str:
    return f"{PREFIX}repos/{repo_slug(repo)}{SUFFIX}"


def repo_commits_key(repo: str) -> str:
    """The repository's mirror pointer (MirrorPointer)."""
    return f"{PREFIX}repos/{repo_slug(repo)}.json"


def mirror_key(repo: str, digest: str) -> str:
    return f"{PREFIX}repos/{repo_slug(repo)}/{digest}{SUFFIX}"


class MirrorPointer(BaseModel):
    """Which mirror of a repository is current, and the commits it holds: one object, so
    a reader sees the two of one build, never one build's mirror with another's list."""

    key: str
    commits: list[str]

    @classmethod
    def read(cls, repo: str, get_text: Callable[[str], str | None]) -> MirrorPointer | None:
        """``repo``'s pointer as ``get_text`` (an S3 read) finds it; None: no mirror yet."""
        text = get_text(repo_commits_key(repo))
        return cls.parse(repo, text) if text else None

    @classmethod
    def parse(cls, repo: str, text: str) -> MirrorPointer:
        data = json.loads(text)
        if isinstance(data, list):  # written before mirrors were content-addressed
            return cls(key=repo_key(repo), commits=data)
        return cls.model_validate(data)


def env_key(key: str) -> str:
    return f"{PREFIX}envs/{key}{SUFFIX}"


def env_same_key(key: str) -> str:
    return f"{PREFIX}envs/{key}.same.json"


def lock_pointer_key(lock_key: str) -> str:
    return f"{PREFIX}envs/by-lock/{lock_key}.json"


def env_failed_key(key: str) -> str:
    return f"{PREFIX}envs/{key}.failed.json"


def prepared_key(name: str) -> str:
    return f"{PREFIX}prepared/{name}{SUFFIX}"


class RowNeeds(BaseModel):
    """The artifacts one instance's evaluation starts from."""

    instance_id: str
    repo: str
    commits: tuple[str, ...]  # base and environment setup commits
    env: str
    services: dict[str, str] = Field(default_factory=dict)  # service name -> env key
    prepared: str

    def keys(
        self, mirror: str | None = None, get_text: Callable[[str], str | None] | None = None
    ) -> dict[str, str]:
        """Artifact name (what it unpacks as) -> S3 key, in unpacking order; ``mirror``:
        the current mirror's key, as the repository's pointer names it (MirrorPointer).
        With ``get_text`` (an S3 read), an environment that is another's (the same lock)
        is followed by that other's tarball (``env-same``): the link and what it links to."""
        keys = {"repo": mirror or repo_key(self.repo), "env": env_key(self.env)}
        if get_text is not None and (same := get_text(env_same_key(self.env))):
            keys["env-same"] = env_key(json.loads(same)["env"])
        keys.update({f"service-{n}": env_key(k) for n, k in sorted(self.services.items())})
        keys["prepared"] = prepared_key(self.prepared)
        return keys


def row_needs(instance: Instance, recipes: RecipeBook) -> RowNeeds:
    """Raises ``NoRecipe`` for an instance nothing can be built for."""
    recipe = recipes.for_instance(instance)
    return RowNeeds(
        instance_id=instance.instance_id,
        repo=instance.repo,
        commits=tuple(dict.fromkeys((instance.base_commit, instance.environment_setup_commit))),
        env=recipe.env_key(instance.environment_setup_commit),
        services={name: SERVICES[name].recipe().env_key("") for name in recipe.services},
        # every row on AWS installs offline (its tests may have no network at all)
        prepared=prepared_name(instance, recipe, offline_installs=True),
    )


class BuildItem(BaseModel):
    """One task of the build phase: a git mirror, or an environment (with the services'
    environments its tests need), built from ``instance_id``'s recipe."""

    run_id: str
    kind: Literal["repo", "env"]
    repo: str
    commits: list[str] = Field(default_factory=list)  # repo: what the mirror must hold
    env: str | None = None
    instance_id: str | None = None
    services: list[str] = Field(default_factory=list)


class PrepareItem(BaseModel):
    """One task of the prepare phase: the prepared workspaces of a few instances (of one
    environment where it can: they download it once)."""

    run_id: str
    instance_ids: list[str]


class Plan(BaseModel):
    builds: list[BuildItem]
    prepares: list[PrepareItem]
    failed_envs: list[str]  # remembered failures: their rows end at once, with the reason
    unbuildable: list[str]  # instances without a recipe (their rows say so)


def plan(
    run_id: str,
    instances: Iterable[Instance],
    recipes: RecipeBook,
    existing: set[str],
    repo_commits: Mapping[str, set[str]],
    *,
    rebuild_failed: bool = False,
    prepare_batch: int = 4,
) -> Plan:
    """What the build phase must make for ``instances``, given the artifact keys that
    ``existing`` holds and the commits each stored mirror was asked for. Everything
    present is reused; an environment whose failure is remembered is not built again
    (unless ``rebuild_failed``), and neither are its instances prepared."""
    from swegreen.core.errors import NoRecipe

    needs: list[RowNeeds] = []
    unbuildable: list[str] = []
    for instance in instances:
        try:
            needs.append(row_needs(instance, recipes))
        except NoRecipe:
            unbuildable.append(instance.instance_id)
    builds: list[BuildItem] = []
    commits: dict[str, set[str]] = {}
    for need in needs:
        commits.setdefault(need.repo, set()).update(need.commits)
    for repo, wanted in sorted(commits.items()):
        held = repo_commits.get(repo, set()) if repo_commits_key(repo) in existing else set()
        if not wanted <= held:
            builds.append(
                BuildItem(run_id=run_id, kind="repo", repo=repo, commits=sorted(wanted | held))
            )
    failed = {n.env for n in needs if env_failed_key(n.env) in existing and not rebuild_failed}
    building: dict[str, BuildItem] = {}
    services_built: set[str] = set()
    for need in needs:
        missing_services = [
            name
            for name, key in sorted(need.services.items())
            if env_key(key) not in existing and name not in services_built
        ]
        if need.env in failed:
            continue
        if env_key(need.env) not in existing and need.env not in building:
            building[need.env] = BuildItem(
                run_id=run_id,
                kind="env",
                repo=need.repo,
                env=need.env,
                instance_id=need.instance_id,
            )
        item = building.get(need.env)
        if missing_services and item is not None:
            item.services.extend(missing_services)
            services_built.update(missing_services)
        elif missing_services:  # the environment exists: a build of the services alone
            builds.append(
                BuildItem(
                    run_id=run_id,
                    kind="env",
                    repo=need.repo,
                    instance_id=need.instance_id,
                    services=missing_services,
                )
            )
            services_built.update(missing_services)
    builds += building.values()
    todo = sorted(
        (n for n in needs if n.env not in failed and prepared_key(n.prepared) not in existing),
        key=lambda n: (n.env, n.instance_id),
    )
    prepares: list[PrepareItem] = []
    env_of = {n.instance_id: n.env for n in needs}  # a lookup: 10,000 rows, not 10,000^2
    for need in todo:  # batches of one environment each, at most prepare_batch long
        last = prepares[-1] if prepares else None
        if (
            last is not None
            and len(last.instance_ids) < prepare_batch
            and last.instance_ids
            and env_of[last.instance_ids[0]] == need.env
        ):
            last.instance_ids.append(need.instance_id)
        else:
            prepares.append(PrepareItem(run_id=run_id, instance_ids=[need.instance_id]))
    return Plan(
        builds=builds, prepares=prepares, failed_envs=sorted(failed), unbuildable=unbuildable
    )


class FailedBuild(BaseModel):
    """What ``envs/<key>.failed.json`` remembers of a build that failed for good."""

    env: str
    label: str
    reason: str
    message: str
    log_tail: str = ""

    def failure(self) -> EvaluationFailure:
        from swegreen.core.errors import EnvSetupFailed, InterpreterNotFound

        cls = InterpreterNotFound if self.reason == "interpreter_not_found" else EnvSetupFailed
        return cls(
            f"environment {self.env} for {self.label} failed to build in an earlier build "
            f"phase, and is not built again until a run asks for it (rebuild_envs): "
            f"{self.message}",
            log_tail=self.log_tail,
            permanent=True,
        )


# ---------------------------------------------------------------------- tarballs
def pack(cache: Path, paths: Iterable[str], archive: Path) -> None:
    """``archive``: a zstd tarball of ``paths`` (relative to ``cache``), with everything
    under a prepared workspace that is a hard link into its environment left out and
    listed in its ``LINKS`` file instead."""
    members: list[str] = []
    for rel in paths:
        root = cache / rel
        if rel.startswith("prepared/") and (root / "prepared.json").exists():
            members += _prepared_members(cache, rel)
        else:
            members += _members(cache, rel)
    with tempfile.NamedTemporaryFile("wb", suffix=".list", delete=False) as listing:
        listing.write(b"".join(m.encode("utf-8", "surrogateescape") + b"\0" for m in members))
    try:
        subprocess.run(
            [
                "tar",
                "-C",
                str(cache),
                f"--use-compress-program={COMPRESS}",
                "--no-recursion",  # every member is listed (directories, then their files)
                "--null",
                "-T",
                listing.name,
                "-cf",
                str(archive),
            ],
            check=True,
            capture_output=True,
        )
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"packing {archive.name} failed: {exc.stderr.decode()[-2000:]}") from exc
    finally:
        os.unlink(listing.name)


def _members(cache: Path, rel: str) -> list[str]:
    """``rel`` and everything under it (a file, or a link, is its own only member)."""
    members = [rel]
    if (cache / rel).is_symlink():  # an environment that is another's: the link alone
        return members
    for dirpath, dirnames, filenames in os.walk(cache / rel):
        here = Path(dirpath).relative_to(cache).as_posix()
        members += [f"{here}/{name}" for name in (*dirnames, *filenames)]
    return members


def _prepared_members(cache: Path, rel: str) -> list[str]:
    """Every entry of the prepared workspace ``rel`` but the files hard-linked into its
    environment, whose pairs it writes to ``rel/LINKS`` (itself a member). A directory
    symlink is listed, never followed."""
    root = cache / rel
    info = json.loads((root / "prepared.json").read_text())
    env_rel = f"envs/{info['env_key']}"
    inodes: dict[tuple[int, int], str] = {}
    for dirpath, _, filenames in os.walk(cache / env_rel):
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_nlink > 1:
                path = Path(dirpath, name).relative_to(cache).as_posix()
                inodes.setdefault((st.st_dev, st.st_ino), path)
    links: list[list[str]] = []
    members = [rel]
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        for name in dirnames:
            path = here / name
            members.append(path.relative_to(cache).as_posix())
        for name in filenames:
            path = here / name
            st = path.lstat()
            linked = inodes.get((st.st_dev, st.st_ino)) if st.st_nlink > 1 else None
            if linked is not None:
                links.append([path.relative_to(cache).as_posix(), linked])
            elif name != LINKS:
                members.append(path.relative_to(cache).as_posix())
    (root / LINKS).write_text(json.dumps(links))
    members.append(f"{rel}/{LINKS}")
    return members


def unpack(archive: Path, cache: Path) -> None:
    """Unpack ``archive`` into ``cache`` and link again what ``pack`` left out."""
    cache.mkdir(parents=True, exist_ok=True)
    listing = subprocess.run(
        ["tar", f"--use-compress-program={COMPRESS}", "-tf", str(archive)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    subprocess.run(
        ["tar", "-C", str(cache), f"--use-compress-program={COMPRESS}", "-xf", str(archive)],
        check=True,
        capture_output=True,
    )
    for member in listing:
        if member.rstrip("/").endswith("/" + LINKS):
            for path, target in json.loads((cache / member).read_text()):
                dest = cache / path
                dest.unlink(missing_ok=True)
                os.link(cache / target, dest)
    # a prepared workspace's seal names its entries' inodes and change times, which
    # unpacking makes anew: seal it again as unpacked (the archive is the build phase's)
    for member in listing:
        parts = member.rstrip("/").split("/")
        if len(parts) == 3 and parts[0] == "prepared" and parts[2] == seal.SEAL:
            seal.seal(cache / "prepared" / parts[1])


def remove(cache: Path, paths: Iterable[str]) -> None:
    for rel in paths:
        shutil.rmtree(cache / rel, ignore_errors=True)
