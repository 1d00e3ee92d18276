"""The build phase's two tasks: trusted, they run no participant code, and they alone may
write the prebuilt artifacts (``prebuilt``).

``build`` makes one git mirror, or one environment (with the services' environments its
tests call), with the local engine on the task's own disk, and uploads it. An environment
whose requirements lock the same as one stored before is that one: the build stops at its
lock, fetches it, and stores only a link to it (``S3Locks``: what the engine's
``envs/by-lock/`` does on one machine, by the same lock key). A build that
fails for the recipe's own reason is remembered (``envs/<key>.failed.json``): later runs
do not build it again and its rows end at once with the build's reason, until a run asks
for a rebuild. ``prepare`` makes the prepared workspaces of a few instances (checkout,
environment view, the recipe's install, compiled once with the compiler cache) and their
base runs, from the mirrors and environments the build task uploaded.

Exit status: 0 when the task did what it could (what it could not make, the rows report
with its reason), ``EXIT_TEMPFAIL`` when a failure of the moment (the network) may go
away on a retry, anything else a crash.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from swegreen.aws import prebuilt
from swegreen.aws.pipeline import EXIT_TEMPFAIL, INSTANCE, missing_key
from swegreen.core.dataset import Instance
from swegreen.core.errors import EvaluationFailure
from swegreen.environments.services import SERVICES
from swegreen.evaluation.base_validation import BaseValidator
from swegreen.evaluation.prepared import history_stores
from swegreen.evaluation.testbeds import Testbeds


class ArtifactBucket:
    """The build tasks' S3: the artifacts (read-write) and the rows' ``instance.json``."""

    def __init__(self, s3: Any, bucket: str, runs_prefix: str = "runs/") -> None:
        self.s3 = s3
        self.bucket = bucket
        self.runs_prefix = runs_prefix

    def exists(self, key: str) -> bool:
        try:
            self.s3.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if missing_key(exc):
                return False
            raise
        return True

    def get_text(self, key: str) -> str | None:
        try:
            body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if missing_key(exc):
                return None
            raise
        return body.decode()

    def mirror(self, repo: str) -> str | None:
        """The key of ``repo``'s current mirror, as its pointer names it."""
        pointer = prebuilt.MirrorPointer.read(repo, self.get_text)
        return pointer.key if pointer else None

    def put_text(self, key: str, text: str) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=text.encode())

    def instance(self, run_id: str, instance_id: str) -> Instance:
        text = self.get_text(f"{self.runs_prefix}{run_id}/instances/{instance_id}/{INSTANCE}")
        if text is None:
            raise ValueError(f"no {INSTANCE} for {run_id}/{instance_id} in s3://{self.bucket}")
        return Instance.model_validate_json(text)

    def fetch(self, key: str, cache: Path) -> bool:
        """Unpack the artifact ``key`` into ``cache``; False when there is none."""
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            archive = Path(tmp) / "artifact.tar.zst"
            try:
                self.s3.download_file(self.bucket, key, str(archive))
            except ClientError as exc:
                if missing_key(exc):
                    return False
                raise
            prebuilt.unpack(archive, cache)
        return True

    def store_addressed(self, cache: Path, paths: list[str], key_of: Callable[[str], str]) -> str:
        """Pack ``paths`` and upload them under the key ``key_of`` gives their archive's
        sha256, unless it is there already; returns the key. Such an object never
        changes: a reader that was given its key gets what was built."""
        with self._packed(cache, paths) as archive:
            with archive.open("rb") as fh:
                key = key_of(hashlib.file_digest(fh, "sha256").hexdigest())
            if not self.exists(key):
                self.s3.upload_file(str(archive), self.bucket, key)
        return key

    def store(self, cache: Path, paths: list[str], key: str) -> None:
        """Pack ``paths`` (relative to ``cache``) and upload them as ``key``; a reader
        sees the whole artifact or none (S3 replaces an object whole)."""
        with self._packed(cache, paths) as archive:
            self.s3.upload_file(str(archive), self.bucket, key)

    @staticmethod
    @contextlib.contextmanager
    def _packed(cache: Path, paths: list[str]) -> Iterator[Path]:
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            archive = Path(tmp) / "artifact.tar.zst"
            prebuilt.pack(cache, paths, archive)
            yield archive


class S3Locks:
    """The environments earlier builds stored, by lock (``envs/by-lock/``): a build whose
    requirements lock the same as one of them fetches that one and links to it instead
    of building it again (EnvManager.same_lock)."""

    def __init__(self, bucket: ArtifactBucket, cache: Path) -> None:
        self.bucket = bucket
        self.cache = cache

    def find(self, lock_key: str) -> str | None:
        text = self.bucket.get_text(prebuilt.lock_pointer_key(lock_key))
        if text is None:
            return None
        key = str(json.loads(text)["env"])
        return key if self.bucket.fetch(prebuilt.env_key(key), self.cache) else None


async def build(item: prebuilt.BuildItem, bucket: ArtifactBucket, testbeds: Testbeds) -> int:
    cache = testbeds.envs.root.parent
    repos = testbeds.repos
    mirror = repos.mirror_path(item.repo).relative_to(cache).as_posix()
    current = bucket.mirror(item.repo)
    if current is not None:  # a head start
        bucket.fetch(current, cache)
    if item.kind == "repo":
        try:
            for commit in item.commits:
                await repos.ensure_commit(item.repo, commit)
        except EvaluationFailure as exc:
            print(f"{item.repo}: {exc}", file=sys.stderr)
            return 0 if exc.permanent else EXIT_TEMPFAIL
        key = bucket.store_addressed(
            cache, [mirror], lambda digest: prebuilt.mirror_key(item.repo, digest)
        )
        pointer = prebuilt.MirrorPointer(key=key, commits=sorted(item.commits))
        bucket.put_text(prebuilt.repo_commits_key(item.repo), pointer.model_dump_json())
        print(f"{item.repo}: mirror {key} stored with {len(item.commits)} commit(s)")
        return 0
    assert item.instance_id is not None
    instance = bucket.instance(item.run_id, item.instance_id)
    recipe = testbeds.recipes.for_instance(instance)
    label = f"{instance.repo} {instance.version}"
    wanted: list[tuple[str, Any, str, str]] = []  # (key, recipe, label, setup commit)
    if item.env is not None:
        wanted.append((item.env, recipe, label, instance.environment_setup_commit))
    for name in item.services:
        wanted.append((SERVICES[name].recipe().env_key(""), SERVICES[name].recipe(), name, ""))
    status = 0
    testbeds.envs.shared_locks = S3Locks(bucket, cache)
    for key, env_recipe, env_label, setup in wanted:
        try:
            if setup:
                await repos.ensure_commit(instance.repo, setup)
                built = await testbeds.envs.ensure(
                    env_recipe,
                    env_label,
                    setup,
                    functools.partial(repos.read_file, instance.repo, setup),
                    functools.partial(repos.checkout, instance.repo, setup),
                )
            else:
                built = await testbeds.envs.ensure(env_recipe, f"service {env_label}")
        except EvaluationFailure as exc:
            print(f"environment {key} ({env_label}): {exc.reason}: {exc}", file=sys.stderr)
            if exc.permanent:
                failed = prebuilt.FailedBuild(
                    env=key,
                    label=env_label,
                    reason=exc.reason,
                    message=str(exc),
                    log_tail=exc.log_tail[-4000:],
                )
                bucket.put_text(prebuilt.env_failed_key(key), failed.model_dump_json(indent=2))
            else:
                status = EXIT_TEMPFAIL
            continue
        local = cache / "envs" / key
        if local.is_symlink():  # made of the same lock as an environment stored before
            same = Path(os.readlink(local)).name
            # the pointer first: a tarball's presence is what "built" means to a row
            bucket.put_text(prebuilt.env_same_key(key), json.dumps({"env": same}))
            bucket.store(cache, [f"envs/{key}"], prebuilt.env_key(key))  # the link alone
            print(f"environment {key} ({env_label}): the same lock as {same}, linked")
            continue
        if built.key != key:
            raise RuntimeError(f"planned environment {key}, built {built.key} (recipe drift?)")
        bucket.store(cache, [f"envs/{key}"], prebuilt.env_key(key))
        lock = testbeds.envs.lock_of(key)
        if lock is not None and not bucket.exists(prebuilt.lock_pointer_key(lock)):
            bucket.put_text(prebuilt.lock_pointer_key(lock), json.dumps({"env": key}))
        print(f"environment {key} ({env_label}): stored")
    return status


async def prepare(
    item: prebuilt.PrepareItem,
    bucket: ArtifactBucket,
    testbeds: Testbeds,
    validator: BaseValidator | None,
) -> int:
    cache = testbeds.envs.root.parent
    fetched: set[str] = set()
    status = 0
    for instance_id in item.instance_ids:
        instance = bucket.instance(item.run_id, instance_id)
        try:
            needs = prebuilt.row_needs(instance, testbeds.recipes)
        except EvaluationFailure as exc:
            print(f"{instance_id}: {exc}", file=sys.stderr)
            continue
        keys = needs.keys(bucket.mirror(needs.repo), bucket.get_text)
        keys.pop("prepared")
        missing = []
        for key in keys.values():
            if key not in fetched:
                if bucket.fetch(key, cache):
                    fetched.add(key)
                else:
                    missing.append(key)
        if missing:
            print(f"{instance_id}: not prepared, no artifact {', '.join(missing)}", file=sys.stderr)
            continue
        recipe = testbeds.recipes.for_instance(instance)
        try:
            prepared = await testbeds.prepared(instance, recipe, [])
            if validator is not None:
                await validator.validate(instance)
        except EvaluationFailure as exc:
            print(f"{instance_id}: {exc.reason}: {exc}\n{exc.log_tail}", file=sys.stderr)
            status = status if exc.permanent else EXIT_TEMPFAIL
            continue
        if prepared.workspace.name != needs.prepared:  # the rows would never find it
            raise RuntimeError(
                f"{instance_id}: this task prepared {prepared.workspace.name}, the run's plan "
                f"names {needs.prepared}: the build phase must run with offline_installs "
                "(sandbox_task.sandbox_config sets it)"
            )
        paths = [prepared.workspace.relative_to(cache).as_posix()]
        # the history its checkout borrows objects from (history.py), and nothing later
        paths += [
            p.relative_to(cache).as_posix() for p in history_stores(prepared.workspace / "repo")
        ]
        if validator is not None:
            paths += [
                p.relative_to(cache).as_posix()
                for p in sorted(validator.cache_dir.glob(f"{instance_id}-*"))
            ]
        bucket.store(cache, paths, prebuilt.prepared_key(needs.prepared))
        print(f"{instance_id}: prepared workspace {needs.prepared} stored")
    return status
