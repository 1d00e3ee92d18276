"""The runner recorder in the Docker backend: django's and sympy's shapes
(``tests/runner_repos.py``) in instance images laid out like the official ones, through the
stand-in of AgentBeats' Docker gateway. The gold patches resolve; a patch that fixes nothing
and makes failures print as passes, from the package the tests import, ends
``error/log_tampering`` (before the runner recorder ran in containers, both ended
``resolved``: docs/security.md).

Needs a Docker daemon (``../shared/tools/docker-here.sh``); skipped with that message
elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from swegreen.containers.daemon import answers
from swegreen.core.config import EvalConfig
from swegreen.core.dataset import load_dataset
from swegreen.core.results import InstanceResult
from swegreen.evaluation.engine import build_engine
from swegreen.evaluation.settings import LocalSettings
from tests import runner_repos
from tests.conftest import open_to_sandbox, run_rows
from tests.docker_support.gateway import Gateway, running
from tests.docker_support.sample_images import TEMPLATE, build_instances
from tests.test_integrity import write
from tests.test_integrity_runners import (
    ORDINALS,
    REPORTER_IN_MEMORY,
    RESULT_CLASS,
    SYMCALC,
    patch_of,
)

WHY_NOT = answers(os.environ)
pytestmark = pytest.mark.skipif(
    WHY_NOT is not None,
    reason=f"{WHY_NOT}: run ../shared/tools/docker-here.sh as root to set up a daemon",
)


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> runner_repos.RunnerRepos:
    return runner_repos.build(tmp_path_factory.mktemp("runner-repos"))


@pytest.fixture(scope="module")
def gateway(repos: runner_repos.RunnerRepos) -> Iterator[Gateway]:
    client = docker.from_env()
    try:
        build_instances(
            client,
            repos.dataset.parent / "repos",
            load_dataset(str(repos.dataset)).instances,
            repos.recipes,
        )
    finally:
        client.close()
    upstream = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    folder = tempfile.mkdtemp(prefix="swg-gw-", dir="/tmp")  # socket paths are short
    try:
        with running(upstream, f"{folder}/docker.sock") as gw:
            yield gw
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def grade(
    repos: runner_repos.RunnerRepos, gateway: Gateway, tmp_path: Path, iid: str, patch: str
) -> InstanceResult:
    settings = LocalSettings(
        output_dir=tmp_path / "results",
        cache_dir=open_to_sandbox(tmp_path / "cache"),
        python_downloads=False,
    )
    cfg = EvalConfig(
        dataset=str(repos.dataset),
        repo_url_template=repos.url_template,
        max_rows=-1,
        instance_ids=[iid],
        environments="docker",
        docker_images=TEMPLATE,
    )
    if patch != "gold":
        predictions = tmp_path / "predictions.jsonl"
        predictions.write_text(
            json.dumps({"instance_id": iid, "model_name_or_path": "x", "model_patch": patch})
        )
        patch = str(predictions)
    env = {**os.environ, "DOCKER_HOST": f"unix://{gateway.listen}"}
    engine = build_engine(settings, cfg, env, recipes=repos.recipes)
    try:
        [row] = run_rows(engine, cfg, iid, patch).results
    finally:
        engine.close()
    return row


@pytest.mark.parametrize("iid", [ORDINALS, SYMCALC])
def test_gold_resolves_in_the_container(
    iid: str, repos: runner_repos.RunnerRepos, gateway: Gateway, tmp_path: Path
) -> None:
    row = grade(repos, gateway, tmp_path, iid, "gold")
    assert (row.status.value, row.reason) == ("resolved", "all_tests_pass"), row.detail


@pytest.mark.parametrize(
    ("iid", "path", "text"),
    [
        (ORDINALS, "ordinals/__init__.py", RESULT_CLASS),
        (SYMCALC, "symcalc/__init__.py", REPORTER_IN_MEMORY),
    ],
    ids=["django-result-class", "sympy-reporter"],
)
def test_a_forgery_of_each_runner_ends_log_tampering_in_the_container(
    iid: str,
    path: str,
    text: str,
    repos: runner_repos.RunnerRepos,
    gateway: Gateway,
    tmp_path: Path,
) -> None:
    patch = patch_of(repos, iid, tmp_path, lambda r: write(r / path, text, True))
    row = grade(repos, gateway, tmp_path, iid, patch)
    assert (row.status.value, row.reason) == ("error", "log_tampering"), row.detail


def test_the_official_harness_takes_each_forgery_that_the_recorder_refuses(
    repos: runner_repos.RunnerRepos, gateway: Gateway, tmp_path: Path
) -> None:
    """Every attack class of tests/test_integrity_runners.py, graded by swebench 5.0.2's
    own ``run_evaluation`` on the same images: it resolves the forgeries that read as a
    clean log (docs/security.md's table), where the Docker backend ends them not resolved.
    One harness run per pair of attacks (one on each shape's row)."""
    from swegreen.core.images import image_name
    from tests.docker_support.official_harness import eval_script_of, harness_rows, run_official
    from tests.test_integrity_runners import DJANGO_ATTACKS, SYMPY_ATTACKS

    rows = load_dataset(str(repos.dataset)).instances
    raw = [json.loads(line) for line in repos.dataset.read_text().splitlines()]
    scripts = {
        i.instance_id: {"eval_script": eval_script_of(i, repos.recipes.for_instance(i))}
        for i in rows
    }
    names = {i.instance_id: image_name(i.instance_id, TEMPLATE) for i in rows}
    parsers = {i.repo: repos.recipes.for_instance(i).log_parser for i in rows}
    dataset = tmp_path / "harness.jsonl"
    made = harness_rows(raw, scripts, names, parsers)
    dataset.write_text("".join(json.dumps(r) + "\n" for r in made))
    django, sympy = list(DJANGO_ATTACKS.items()), list(SYMPY_ATTACKS.items())
    seen: dict[str, tuple[bool, str]] = {}
    for n in range(max(len(django), len(sympy))):
        run = {
            iid: attacks[n]
            for iid, attacks in ((ORDINALS, django), (SYMCALC, sympy))
            if n < len(attacks)
        }
        patches = {
            iid: patch_of(repos, iid, tmp_path / f"{name}-patch", edit)
            for iid, (name, edit) in run.items()
        }
        official = run_official(tmp_path / "harness", dataset, f"a{n}", list(patches), patches)
        for iid, (name, _) in run.items():
            report = official[iid]["report"]
            work = tmp_path / f"{name}-ours"
            work.mkdir()
            ours = grade(repos, gateway, work, iid, patches[iid])
            seen[name] = (bool(report and report["resolved"]), ours.status.value)
            assert ours.status.value != "resolved", (name, ours.detail)
    print(json.dumps(seen, indent=1))
    expected_official = {"result", "asserts", "swap", "wrapped", "reporter-memory",
                         "instance-shadow", "code-swap", "reporter-file"}  # fmt: skip
    assert {name for name, (resolved, _) in seen.items() if resolved} == expected_official
