"""Prebuilt artifacts (swegreen.aws.prebuilt, swegreen.aws.build_phase): the plan of the
build phase, the build and prepare tasks against S3 (moto, in process), and a row's
evaluation from nothing but the unpacked artifacts, on the sample's real repositories."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from swegreen.aws import prebuilt
from swegreen.aws.build_phase import ArtifactBucket, build, prepare
from swegreen.aws.pipeline import INSTANCE
from swegreen.core.classify import Status
from swegreen.core.config import EvalConfig
from swegreen.core.dataset import Instance, load_dataset
from swegreen.core.ports import PatchResult
from swegreen.environments.catalog import builtin_recipes
from swegreen.evaluation.base_validation import BaseValidator
from swegreen.evaluation.engine import LocalSettings, build_evaluator, build_testbeds
from swegreen.evaluation.runner import evaluate_with_retries
from swegreen.sample import SampleBenchmark
from tests.helpers import commit

BUCKET = "artifacts-test"


def instances(sample: SampleBenchmark) -> list[Instance]:
    return list(load_dataset(str(sample.dataset)).instances)


def test_the_plan_builds_only_what_is_missing_and_never_a_remembered_failure(
    sample: SampleBenchmark,
) -> None:
    rows = instances(sample)
    recipes = builtin_recipes()
    needs = {i.instance_id: prebuilt.row_needs(i, recipes) for i in rows}
    # nothing stored: one mirror per repository, one build per environment, every row
    # prepared, in batches of one environment at most 3 long
    cold = prebuilt.plan("r", rows, recipes, set(), {}, prepare_batch=3)
    assert sorted(b.repo for b in cold.builds if b.kind == "repo") == [
        "sample/calculator",
        "sample/ledger",
        "sample/textkit",
    ]
    envs = {n.env for n in needs.values()}
    assert sorted(b.env for b in cold.builds if b.kind == "env") == sorted(envs)
    prepared = [i for p in cold.prepares for i in p.instance_ids]
    assert sorted(prepared) == sorted(needs)
    for batch in cold.prepares:
        assert 1 <= len(batch.instance_ids) <= 3
        assert len({needs[i].env for i in batch.instance_ids}) == 1
    # everything stored: nothing to do
    stored = {k for n in needs.values() for k in n.keys().values()}
    stored |= {prebuilt.repo_commits_key(i.repo) for i in rows}  # the mirrors' pointers
    held: dict[str, set[str]] = {}
    for i in rows:
        held.setdefault(i.repo, set()).update((i.base_commit, i.environment_setup_commit))
    warm = prebuilt.plan("r", rows, recipes, stored, held)
    assert (warm.builds, warm.prepares) == ([], [])
    # a mirror that lacks a commit of the selection is built again, with the union
    lacking = {**held, "sample/ledger": set(list(held["sample/ledger"])[:1])}
    (again,) = prebuilt.plan("r", rows, recipes, stored, lacking).builds
    assert (again.kind, again.repo) == ("repo", "sample/ledger")
    assert set(again.commits) == held["sample/ledger"]
    # a remembered failure: neither built nor prepared, until a rebuild is asked for
    env = next(iter(envs))
    failed = (stored - {prebuilt.env_key(env)}) | {prebuilt.env_failed_key(env)}
    failed -= {prebuilt.prepared_key(n.prepared) for n in needs.values() if n.env == env}
    remembered = prebuilt.plan("r", rows, recipes, failed, held)
    assert remembered.failed_envs == [env]
    assert (remembered.builds, remembered.prepares) == ([], [])
    rebuilt = prebuilt.plan("r", rows, recipes, failed, held, rebuild_failed=True)
    assert [b.env for b in rebuilt.builds] == [env]
    assert rebuilt.prepares


@pytest.fixture
def s3(mocked_s3: Any) -> Any:
    mocked_s3.create_bucket(Bucket=BUCKET)
    return mocked_s3


def test_a_row_evaluates_from_the_artifacts_alone(
    s3, sample: SampleBenchmark, tmp_path: Path, host_env: dict[str, str]
) -> None:
    """The build and prepare tasks fill S3 from an empty cache; a fresh cache at the same
    path, holding nothing but the unpacked artifacts, then evaluates a gold patch (and
    finds its base run) without building, fetching or preparing anything."""
    rows = [i for i in instances(sample) if i.repo == "sample/calculator"][:2]
    # as every task of the pipeline runs (sandbox_task.sandbox_config)
    config = EvalConfig(
        repo_url_template=sample.url_template, base_validation=True, offline_installs=True
    )
    bucket = ArtifactBucket(s3, BUCKET)
    for inst in rows:
        bucket.put_text(f"runs/r/instances/{inst.instance_id}/{INSTANCE}", inst.model_dump_json())
    plan = prebuilt.plan("r", rows, builtin_recipes(), set(), {})
    cache = tmp_path / "cache"
    settings = LocalSettings(output_dir=tmp_path / "out", cache_dir=cache)

    def fresh() -> None:
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir()

    for item in plan.builds:  # each task on an empty disk, as on Fargate
        fresh()
        testbeds = build_testbeds(settings, config, host_env)
        try:
            assert asyncio.run(build(item, bucket, testbeds)) == 0
        finally:
            testbeds.close()
    (batch,) = plan.prepares
    fresh()
    testbeds = build_testbeds(settings, config, host_env)
    try:
        validator = BaseValidator(testbeds, cache / "base-validation")
        assert asyncio.run(prepare(batch, bucket, testbeds, validator)) == 0
    finally:
        testbeds.close()
    needs = prebuilt.row_needs(rows[0], builtin_recipes())
    mirror = bucket.mirror(needs.repo)
    assert mirror is not None and mirror.startswith("artifacts/repos/sample__calculator/")
    keys = needs.keys(mirror)
    stored = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert set(keys.values()) <= stored
    # The prepared workspace's tarball leaves out what its environment view hard-links.
    sizes = {n: s3.head_object(Bucket=BUCKET, Key=k)["ContentLength"] for n, k in keys.items()}
    assert sizes["prepared"] < sizes["env"] / 2, sizes

    fresh()  # the evaluate task: nothing but the artifacts
    for key in keys.values():
        assert bucket.fetch(key, cache)
    view = cache / "prepared" / needs.prepared / "env"
    linked = [p for p in view.rglob("*") if p.is_file() and not p.is_symlink()]
    assert any(os.stat(p).st_nlink > 1 for p in linked)  # hard links again, not copies
    assert not (cache / "repos" / "sample__calculator.git" / "FETCH_HEAD").exists()
    evaluator = build_evaluator(
        settings,
        config.model_copy(update={"repo_url_template": "/nonexistent/{repo}"}),
        host_env,
        _NoArtifacts(),
    )
    try:
        result = asyncio.run(
            evaluate_with_retries(evaluator, "r", rows[0], PatchResult(rows[0].patch, "gold"), 1)
        )
    finally:
        evaluator.testbeds.close()
    assert (result.status, result.durations.env_build) == (Status.RESOLVED, 0.0), result.detail
    assert "seal_broken" not in result.environment  # sealed again as unpacked
    assert result.base_validation and result.base_validation["cached"] is True


class _NoArtifacts:
    """An ArtifactStore that keeps what it is given in memory."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}

    def write_text(self, key: str, text: str) -> None:
        self.files[key] = text

    def read_text(self, key: str) -> str | None:
        return self.files.get(key)

    def exists(self, key: str) -> bool:
        return key in self.files

    def location(self, key: str) -> str:
        return f"memory:{key}"


def test_a_failed_build_is_remembered_with_its_reason(
    s3, sample: SampleBenchmark, tmp_path: Path, host_env: dict[str, str]
) -> None:
    from swegreen.core.recipes import Recipe, RecipeBook

    (inst,) = [i for i in instances(sample) if i.instance_id == "sample__ledger-1"]
    broken = Recipe(python="host", packages=("no-such-package-swegreen==1",), test_cmd="true")
    book = RecipeBook({"sample/ledger": {inst.version: broken}})
    bucket = ArtifactBucket(s3, BUCKET)
    bucket.put_text(f"runs/r/instances/{inst.instance_id}/{INSTANCE}", inst.model_dump_json())
    (env_item,) = [b for b in prebuilt.plan("r", [inst], book, set(), {}).builds if b.env]
    settings = LocalSettings(output_dir=tmp_path / "out", cache_dir=tmp_path / "cache")
    testbeds = build_testbeds(
        settings, EvalConfig(repo_url_template=sample.url_template), host_env, recipes=book
    )
    try:
        assert asyncio.run(build(env_item, bucket, testbeds)) == 0  # done: nothing to retry
    finally:
        testbeds.close()
    assert env_item.env is not None
    failed = prebuilt.FailedBuild.model_validate_json(
        bucket.get_text(prebuilt.env_failed_key(env_item.env)) or "{}"
    )
    assert failed.reason == "env_setup_failed" and "no-such-package-swegreen" in failed.log_tail
    assert not bucket.exists(prebuilt.env_key(env_item.env))
    failure = failed.failure()
    assert failure.permanent and "rebuild_envs" in str(failure)
    replan = prebuilt.plan("r", [inst], book, {prebuilt.env_failed_key(env_item.env)}, {})
    assert replan.failed_envs == [env_item.env] and not [b for b in replan.builds if b.env]
    assert json.loads(json.dumps(replan.model_dump()))  # what Resolve writes to S3


def test_a_mirror_is_never_overwritten_a_pointer_names_the_current_one(
    s3, sample: SampleBenchmark, tmp_path: Path, host_env: dict[str, str]
) -> None:
    """A later build that adds commits uploads a new mirror under its content's name and
    replaces the pointer (one object: the key and the commits of one build); the mirror a
    row was given stays as it was."""
    rows = [i for i in instances(sample) if i.repo == "sample/calculator"]
    upstream = tmp_path / "upstream" / "sample__calculator"
    shutil.copytree(sample.repos_dir / "sample__calculator", upstream)
    config = EvalConfig(repo_url_template=str(upstream.parent / "{owner}__{name}"))
    bucket = ArtifactBucket(s3, BUCKET)
    settings = LocalSettings(output_dir=tmp_path / "out", cache_dir=tmp_path / "cache")
    pointer_key = prebuilt.repo_commits_key("sample/calculator")
    seen = []
    first = [rows[0].base_commit]
    for commits in (first, None):
        if commits is None:  # upstream moved on; the next run needs its new commit
            commits = sorted([*first, commit(upstream, {"NEWS": "later\n"}, "later")])
        shutil.rmtree(settings.cache_dir, ignore_errors=True)
        settings.cache_dir.mkdir()
        item = prebuilt.BuildItem(
            run_id="r", kind="repo", repo="sample/calculator", commits=commits
        )
        testbeds = build_testbeds(settings, config, host_env)
        try:
            assert asyncio.run(build(item, bucket, testbeds)) == 0
        finally:
            testbeds.close()
        pointer = prebuilt.MirrorPointer.parse("sample/calculator", bucket.get_text(pointer_key))
        assert pointer.commits == commits
        seen.append((pointer.key, s3.head_object(Bucket=BUCKET, Key=pointer.key)["ETag"]))
    (first, first_etag), (second, _) = seen
    assert first != second  # more commits: another mirror
    assert s3.head_object(Bucket=BUCKET, Key=first)["ETag"] == first_etag  # untouched
    # a pointer written before mirrors were named by content: a list of commits
    legacy = prebuilt.MirrorPointer.parse("o/r", json.dumps(["abc"]))
    assert (legacy.key, legacy.commits) == ("artifacts/repos/o__r.tar.zst", ["abc"])


def test_environments_that_lock_the_same_are_built_once_and_linked(
    s3, sample: SampleBenchmark, tmp_path: Path, host_env: dict[str, str]
) -> None:
    """Two versions of a repository whose environments are made of the same (their
    setup commits differ, their requirements lock the same): the second build task, on an
    empty disk as on Fargate, stops at its lock, fetches the first's environment and
    stores only a link to it; a row of the second version evaluates from the link and the
    environment it links to, building nothing."""
    from swegreen.core.recipes import RecipeBook
    from swegreen.sample import sample_recipes

    # the sample's calculator with two later commits, each an environment setup commit
    # whose requirements file reads the same (as Verified's versions' often do)
    repos = tmp_path / "repos"
    clone = repos / "sample__calculator"
    subprocess.run(
        ["git", "clone", "-q", str(sample.repos_dir / "sample__calculator"), str(clone)],
        check=True,
    )
    setups = [
        commit(clone, {"requirements.txt": "iniconfig==2.0.0\n", "NOTES": n}, n)
        for n in ("one", "two")
    ]
    by_id = {i.instance_id: i for i in instances(sample)}
    rows = [
        by_id[iid].model_copy(update={"environment_setup_commit": setup, "version": version})
        for iid, setup, version in zip(
            ("sample__calculator-1", "sample__calculator-3"), setups, ("1.0", "1.1"), strict=True
        )
    ]
    # the sample's recipe, reading that file at the setup commit (as Verified's recipes do):
    # keyed by that commit, locked by what it reads
    base = sample_recipes().for_instance(rows[0])
    recipe = base.model_copy(
        update={"requirements": ("requirements.txt",), "exclude_newer": "2025-06-01"}
    )
    book = RecipeBook({"sample/calculator": {r.version: recipe for r in rows}})
    config = EvalConfig(repo_url_template=str(repos / "{owner}__{name}"), offline_installs=True)
    bucket = ArtifactBucket(s3, BUCKET)
    for inst in rows:
        bucket.put_text(f"runs/r/instances/{inst.instance_id}/{INSTANCE}", inst.model_dump_json())
    plan = prebuilt.plan("r", rows, book, set(), {})
    envs = [item for item in plan.builds if item.env]
    first, second = (item.env for item in envs)
    assert first != second
    cache = tmp_path / "cache"
    # keyed by commit, as every task of the pipeline keys them (sandbox_task.py)
    settings = LocalSettings(output_dir=tmp_path / "out", cache_dir=cache, content_keyed_envs=False)

    def fresh() -> None:
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir()

    for item in [*[b for b in plan.builds if not b.env], *envs]:  # mirrors, then in order
        fresh()
        testbeds = build_testbeds(settings, config, host_env, recipes=book)
        try:
            assert asyncio.run(build(item, bucket, testbeds)) == 0
        finally:
            testbeds.close()
    assert second is not None and first is not None
    assert json.loads(bucket.get_text(prebuilt.env_same_key(second)) or "{}") == {"env": first}
    assert bucket.get_text(prebuilt.env_same_key(first)) is None
    pointers = s3.list_objects_v2(Bucket=BUCKET, Prefix="artifacts/envs/by-lock/")["Contents"]
    assert [json.loads(bucket.get_text(p["Key"]) or "{}") for p in pointers] == [{"env": first}]
    size = {
        k: s3.head_object(Bucket=BUCKET, Key=prebuilt.env_key(k))["ContentLength"]
        for k in (first, second)
    }
    assert size[second] < 10_000 < size[first], size  # a link, not a second environment

    needs = prebuilt.row_needs(rows[1], book)
    keys = needs.keys(bucket.mirror(needs.repo), bucket.get_text)
    assert list(keys) == ["repo", "env", "env-same", "prepared"]
    assert keys["env-same"] == prebuilt.env_key(first)
    fresh()  # the evaluate task: the mirror, the link and the environment it links to
    for name, key in keys.items():
        if name != "prepared":  # none was made here: the task prepares it (offline)
            assert bucket.fetch(key, cache), key
    assert (cache / "envs" / second).is_symlink()
    evaluator = build_evaluator(
        settings,
        config.model_copy(update={"repo_url_template": "/nonexistent/{repo}"}),
        host_env,
        _NoArtifacts(),
        recipes=book,
    )
    try:
        result = asyncio.run(
            evaluate_with_retries(evaluator, "r", rows[1], PatchResult(rows[1].patch, "gold"), 1)
        )
    finally:
        evaluator.testbeds.close()
    assert result.status is Status.RESOLVED, result.detail
    # nothing built: the two environments it was given, the link still a link
    assert sorted(p.name for p in (cache / "envs").iterdir() if p.name[0] != ".") == sorted(
        [first, second]
    )
    assert (cache / "envs" / second).is_symlink()
