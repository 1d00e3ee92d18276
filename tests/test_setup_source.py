"""The environment_setup_commit is needed only where a recipe reads files there; where a
fork lacks it, reading them at the base commit is an explicit opt-in, recorded per row."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from swegreen.core.classify import Status
from swegreen.core.dataset import load_dataset
from swegreen.core.errors import RepoUnavailable
from swegreen.core.recipes import Recipe, RecipeBook
from swegreen.core.results import InstanceResult
from swegreen.evaluation.engine import LocalSettings, build_engine
from swegreen.sample import SampleBenchmark

from .conftest import RunSample, sample_config
from .helpers import commit, git

MISSING = "1234567890abcdef1234567890abcdef12345678"  # in no repository
INSTANCE = "sample__calculator-1"
TEST_CMD = "pytest --no-header -rA --tb=no -p no:cacheprovider"


def recipe(**fields: Any) -> Recipe:
    return Recipe(python="host", test_cmd=TEST_CMD, eval_timeout=120, **fields)


@pytest.fixture
def fork(sample: SampleBenchmark, tmp_path: Path) -> dict[str, str]:
    """A fork of the sample's calculator whose base commit adds a requirements file, and a
    dataset whose row names an environment_setup_commit the fork does not have."""
    forks = tmp_path / "forks"
    repo = forks / "sample__calculator"
    shutil.copytree(sample.repos_dir / "sample__calculator", repo, symlinks=True)
    row = next(
        json.loads(line)
        for line in sample.dataset.read_text().splitlines()
        if json.loads(line)["instance_id"] == INSTANCE
    )
    git(repo, "checkout", "-q", "-B", "fork", row["base_commit"])
    base = commit(repo, {"requirements.txt": "pytest==8.3.5\n"}, "test requirements")
    row.update(base_commit=base, environment_setup_commit=MISSING)
    dataset = tmp_path / "fork.jsonl"
    dataset.write_text(json.dumps(row) + "\n")
    return {
        "dataset": str(dataset),
        "repo_url_template": str(forks / "{owner}__{name}"),
        "base": base,
    }


@pytest.fixture
def evaluate(
    run_sample: RunSample,
    settings: LocalSettings,
    sample: SampleBenchmark,
    host_env: dict[str, str],
    fork: dict[str, str],
) -> Callable[..., InstanceResult]:
    """Evaluate the fork's row with gold, ``book_recipe`` as its recipe, in run ``run_id``."""

    def run(book_recipe: Recipe, run_id: str, **config: Any) -> InstanceResult:
        values = {"dataset": fork["dataset"], "repo_url_template": fork["repo_url_template"]}
        values.update(config)
        book = RecipeBook({"sample/calculator": {"1.0": book_recipe}})
        engine = build_engine(settings, sample_config(sample, **values), host_env, recipes=book)
        try:
            (row,) = run_sample("gold", run_id=run_id, engine=engine, **values).results
        finally:
            engine.close()
        return row

    return run


def test_requirements_at_a_missing_setup_commit_fail_clearly_unless_allowed(
    evaluate: Callable[..., InstanceResult], settings: LocalSettings, fork: dict[str, str]
) -> None:
    reads = recipe(requirements=("requirements.txt",))
    off = evaluate(reads, "off")
    assert (off.status, off.reason) == (Status.ERROR, "repo_unavailable")
    assert MISSING in off.detail and "--env-files-at-base" in off.detail
    assert "requirements.txt" in off.detail

    on = evaluate(reads, "on", env_files_at_base=True)
    assert on.status == Status.RESOLVED, on.detail
    assert {k: v for k, v in on.environment.items() if k != "interpreter"} == {
        "environment_setup_commit": MISSING,
        "files_read_at": fork["base"],
        "files": ["requirements.txt"],
        "why": "environment_setup_commit missing from the repository source",
    }
    # the requirements really were read, at the base commit, and installed from them
    logs = list((settings.cache_dir / "envs").glob("*/build.log"))
    assert any(
        f"# requirements from requirements.txt at {fork['base']}" in p.read_text() for p in logs
    )

    # the prepared workspace is found again (without the repository) and keeps its record
    again = evaluate(reads, "again", env_files_at_base=True)
    assert again.status == Status.RESOLVED
    assert again.durations.env_build == 0.0
    assert again.environment == on.environment


def test_a_recipe_that_reads_nothing_there_never_needs_the_setup_commit(
    evaluate: Callable[..., InstanceResult],
) -> None:
    row = evaluate(recipe(packages=("pytest==8.3.5",)), "plain")
    assert row.status == Status.RESOLVED, row.detail
    # upstream's way: nothing was read anywhere else (the row says only where its
    # interpreter came from)
    assert set(row.environment) == {"interpreter"}
    assert row.environment["interpreter"]["source"] == "the engine's own"


def test_the_project_lock_reads_the_project_at_the_base_commit_without_the_opt_in(
    settings: LocalSettings, sample: SampleBenchmark, host_env: dict[str, str], fork: dict[str, str]
) -> None:
    """Only the engine locks the project's own dependencies (upstream's install resolves
    them at the base commit): a missing setup commit reads them at the base, said so."""
    locks = recipe(exclude_newer="2024-08-01", install="python -m pip install -e .")
    book = RecipeBook({"sample/calculator": {"1.0": locks}})
    config = sample_config(
        sample, dataset=fork["dataset"], repo_url_template=fork["repo_url_template"]
    )
    engine = build_engine(settings, config, host_env, recipes=book)
    (instance,) = load_dataset(fork["dataset"]).instances
    try:
        commit_, provenance = asyncio.run(engine.testbeds.setup_source(instance, locks))
        # a recipe whose requirements are read there stays strict
        strict = recipe(requirements=("requirements.txt",), exclude_newer="2024-08-01")
        with pytest.raises(RepoUnavailable, match="env-files-at-base"):
            asyncio.run(engine.testbeds.setup_source(instance, strict))
    finally:
        engine.close()
    assert commit_ == fork["base"]
    assert provenance["files"] == ["the project's own dependencies"]
    assert provenance["files_read_at"] == fork["base"]


def test_a_setup_commit_missing_an_object_blocks_only_a_build_that_reads_it(
    settings: LocalSettings,
    sample: SampleBenchmark,
    host_env: dict[str, str],
    fork: dict[str, str],
    tmp_path: Path,
) -> None:
    """A source can hold the environment_setup_commit and lack one of its files (a fork's
    partial history). A build that reads only the requirements file there still uses it;
    a build that locks the project (a checkout of the whole tree) reads at the base
    commit instead and records why, naming the object; nothing is needed otherwise."""
    repo = Path(fork["repo_url_template"].replace("{owner}__{name}", "sample__calculator"))
    setup = commit(repo, {"docs/only-here.txt": "in no other commit\n"}, "setup commit")
    blob = git(repo, "rev-parse", f"{setup}:docs/only-here.txt").stdout.strip()
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    git(repo, "checkout", "-q", fork["base"])
    row = json.loads(Path(fork["dataset"]).read_text())
    row["environment_setup_commit"] = setup
    dataset = tmp_path / "partial.jsonl"
    dataset.write_text(json.dumps(row) + "\n")
    (instance,) = load_dataset(str(dataset)).instances

    config = sample_config(
        sample, dataset=str(dataset), repo_url_template=fork["repo_url_template"]
    )
    # a cache of its own: its mirror is cloned from the partial fork, as a real one is
    local = settings.model_copy(update={"cache_dir": tmp_path / "cache"})
    engine = build_engine(local, config, host_env)
    locks = recipe(exclude_newer="2024-08-01", install="python -m pip install -e .")
    reads = recipe(requirements=("requirements.txt",), exclude_newer="2024-08-01")
    plain = recipe(packages=("pytest==8.3.5",))
    try:
        answers = {
            name: asyncio.run(engine.testbeds.setup_source(instance, r))
            for name, r in (("locks", locks), ("reads", reads), ("plain", plain))
        }
    finally:
        engine.close()
    assert answers["reads"] == (setup, {})  # requirements.txt is whole there
    assert answers["plain"] == (setup, {})  # nothing read there, nothing checked
    at, provenance = answers["locks"]
    assert at == fork["base"]
    assert provenance["files"] == ["the project's own dependencies"]
    assert provenance["environment_setup_commit"] == setup
    assert "lacks 1 object(s)" in provenance["why"] and blob in provenance["why"]
