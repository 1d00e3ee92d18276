"""The whole engine on the sample benchmark: gold, empty, crafted, artifacts, resume, failures."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from swegreen.core.classify import Reason, Status
from swegreen.core.dataset import Instance, load_dataset, select_instances
from swegreen.core.eval_script import PHASE_BREAK
from swegreen.core.ports import PatchResult, ProgressEvent
from swegreen.core.recipes import Recipe, RecipeBook
from swegreen.core.results import InstanceResult
from swegreen.core.sources import GoldPatches
from swegreen.evaluation.engine import LocalSettings, build_engine
from swegreen.sample import SampleBenchmark
from swegreen.sandbox.isolation import Isolation
from swegreen.stores import artifacts as art

from .conftest import RunSample, sample_config
from .helpers import git, read_jsonl


def test_gold_patches_resolve_every_sample_task(
    run_sample: RunSample, settings: LocalSettings, sample: SampleBenchmark, isolation: Isolation
) -> None:
    outcome = run_sample("gold", run_id="gold")
    assert len(outcome.results) == 8
    assert {r.status for r in outcome.results} == {Status.RESOLVED}
    assert outcome.result_row["resolved_pct"] == 1.0
    assert outcome.result_row["fail_to_pass_passed_pct"] == 1.0
    assert outcome.result_row["pass_to_pass_passed_pct"] == 1.0
    # every instance keeps its artifacts, report.json in the official shape
    run_dir = settings.output_dir / "gold"
    for r in outcome.results:
        d = run_dir / "instances" / r.instance_id
        assert (d / art.PATCH).read_text().startswith("diff --git")
        log = (d / art.TEST_OUTPUT).read_text()
        assert ">>>>> Start Test Output" in log and ">>>>> Test Exit Code: 0" in log
        # an honest row's log carries no error of the engine's own making
        assert not re.findall(r"^(?:error|fatal): .*", log, re.M), r.instance_id
        report = json.loads((d / art.REPORT).read_text())[r.instance_id]
        assert report["resolved"] is True and report["patch_successfully_applied"] is True
        assert set(report["tests_status"]) == {
            "FAIL_TO_PASS",
            "PASS_TO_PASS",
            "FAIL_TO_FAIL",
            "PASS_TO_FAIL",
        }
        assert json.loads((d / art.RESULT).read_text())["status"] == "resolved"
        # one sandbox where the first phase runs nothing of the project's (no install, or
        # one skipped), two where the eval-time install runs: the stored script says which
        script = (d / art.EVAL_SCRIPT).read_text()
        installed = r.environment.get("eval_install") == "ran"
        assert (PHASE_BREAK in script) == installed, (r.instance_id, r.environment)
        assert "git status" in script and "git status" in log
        # the sandbox's own steps (the network namespace, the tests' read-only binds) run
        # before the clock starts, outside the region the grader reads
        graded = log.split(">>>>> Start Test Output", 1)[1].split(">>>>> End Test Output")[0]
        if isolation.mode == "bwrap":
            assert "link set lo up" in log.split(">>>>> Start Test Output", 1)[0], r.instance_id
            assert "link set lo up" not in graded and "mount --bind" not in graded, r.instance_id
    published = json.loads((run_dir / art.RESULTS).read_text())
    assert published["participants"] == {"agent": "gold"}
    [row] = published["results"]
    assert row["total_instances"] == 8 and len(row["instances"]) == 8
    assert row["provenance"]["grader"].startswith("swebench ")
    assert row["provenance"]["dataset_digest"] == outcome.record.dataset_digest
    assert len(read_jsonl(run_dir / art.INSTANCES)) == 8


def test_empty_patches_are_no_op_everywhere(run_sample: RunSample) -> None:
    outcome = run_sample("empty", run_id="empty")
    assert {(r.status, r.reason) for r in outcome.results} == {(Status.NO_OP, Reason.EMPTY_PATCH)}
    assert outcome.result_row["no_op_pct"] == 1.0
    assert outcome.result_row["fail_to_pass_passed_pct"] == 0.0
    assert outcome.result_row["pass_to_pass_passed_pct"] == 1.0


def test_crafted_predictions_reach_every_status_of_the_tree(
    run_sample: RunSample, sample: SampleBenchmark
) -> None:
    outcome = run_sample(str(sample.crafted), run_id="crafted", max_concurrent_rows=2)
    got = {r.instance_id: (r.status.value, r.reason) for r in outcome.results}
    want = {iid: (e["status"], e["reason"]) for iid, e in sample.expected.items()}
    assert got == want
    assert {s for s, _ in got.values()} == {s.value for s in Status}
    timeout = next(r for r in outcome.results if r.status is Status.ERROR)
    assert timeout.error_kind == "evaluation" and timeout.attempts == 1  # not retried
    assert outcome.metrics.infrastructure_errors == 0


class InFlight:
    """Counts rows between their "started" and "finished" events."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.peak = 0

    def __call__(self, event: ProgressEvent) -> None:
        if event.kind == "started":
            self.running.add(event.instance_id)
            self.peak = max(self.peak, len(self.running))
        elif event.kind == "finished":
            self.running.discard(event.instance_id)


def test_concurrency_limit_is_real_and_respected(
    run_sample: RunSample, settings: LocalSettings, sample: SampleBenchmark, isolation, host_env
) -> None:
    for limit in (1, 2):
        tracker = InFlight()
        engine = build_engine(
            settings,
            sample_config(sample),
            host_env,
            progress=tracker,
            isolation=isolation,
        )
        try:
            run_sample(
                "gold",
                run_id=f"limit-{limit}",
                engine=engine,
                max_concurrent_rows=limit,
                max_rows=4,
            )
        finally:
            engine.close()
        assert tracker.peak == limit


class ExplodingSource:
    """A patch source that fails for one instance: that row errors, the others do not."""

    name = "exploding"
    deterministic = False

    async def get_patch(self, instance: Instance) -> PatchResult:
        if instance.instance_id == "sample__textkit-1":
            raise RuntimeError("boom")
        return PatchResult(instance.patch, "exploding")


def test_a_failing_row_never_stops_the_others(run_sample: RunSample) -> None:
    ids = ("sample__calculator-1", "sample__ledger-1", "sample__textkit-1", "sample__textkit-2")
    outcome = run_sample(ExplodingSource(), run_id="explode", instance_ids=ids)
    by_id = {r.instance_id: r for r in outcome.results}
    assert by_id["sample__textkit-1"].status is Status.ERROR
    assert by_id["sample__textkit-1"].reason == Reason.INTERNAL_ERROR
    assert "boom" in by_id["sample__textkit-1"].detail
    assert sum(r.status is Status.RESOLVED for r in outcome.results) == 3


def test_unreachable_repositories_are_retried_then_recorded_as_infrastructure_errors(
    run_sample: RunSample, settings: LocalSettings, sample, isolation, host_env, tmp_path: Path
) -> None:
    nowhere = {"repo_url_template": str(tmp_path / "nowhere" / "{owner}__{name}")}
    fresh = settings.model_copy(update={"cache_dir": tmp_path / "fresh-cache"})
    engine = build_engine(fresh, sample_config(sample, **nowhere), host_env, isolation=isolation)
    try:
        outcome = run_sample(
            "gold", engine=engine, run_id="noreach", max_rows=3, max_attempts=2, **nowhere
        )
    finally:
        engine.close()
    assert len(outcome.results) == 3
    for r in outcome.results:
        assert (r.status, r.reason, r.error_kind, r.attempts) == (
            Status.ERROR,
            Reason.REPO_UNAVAILABLE,
            "infrastructure",
            2,
        )
        assert "cannot clone" in r.detail
    assert outcome.result_row["infrastructure_errors"] == 3
    assert not (tmp_path / "fresh-cache" / "envs").exists()  # nothing built for unreachable repos


def test_resume_evaluates_only_missing_rows_and_changed_patches(
    run_sample: RunSample, tmp_path: Path, sample
) -> None:
    first = run_sample("gold", run_id="resume", max_rows=4)
    stamps = {r.instance_id: r.finished_at for r in first.results}
    second = run_sample("gold", run_id="resume", max_rows=-1)
    assert (second.evaluated, second.resumed) == (4, 4)
    assert {
        r.instance_id: r.finished_at for r in second.results if r.instance_id in stamps
    } == stamps
    assert len(second.results) == 8
    # a predictions file whose entry for one row changed: only that row is evaluated again
    preds = [json.loads(line) for line in sample.crafted.read_text().splitlines()]
    path = tmp_path / "preds.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in preds))
    run_sample(str(path), run_id="resume-preds", max_rows=3)
    preds[0]["model_patch"] = next(
        line for line in sample.dataset.read_text().splitlines() if preds[0]["instance_id"] in line
    )
    preds[0]["model_patch"] = json.loads(preds[0]["model_patch"])["patch"]
    path.write_text("".join(json.dumps(p) + "\n" for p in preds))
    third = run_sample(str(path), run_id="resume-preds", max_rows=3)
    assert (third.evaluated, third.resumed) == (1, 2)


def test_a_commit_missing_from_the_source_is_not_retried(
    run_sample: RunSample, sample: SampleBenchmark, tmp_path: Path
) -> None:
    """Fetching cannot bring back an object the source lacks: one attempt, not three."""
    rows = [json.loads(line) for line in sample.dataset.read_text().splitlines()][:2]
    rows[0]["base_commit"] = "0123456789abcdef0123456789abcdef01234567"
    dataset = tmp_path / "missing.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    outcome = run_sample("gold", run_id="missing-commit", dataset=str(dataset), max_attempts=3)
    by_id = {r.instance_id: r for r in outcome.results}
    missing = by_id[rows[0]["instance_id"]]
    assert (missing.status, missing.reason, missing.attempts) == (
        Status.ERROR,
        Reason.REPO_UNAVAILABLE,
        1,
    )
    assert "is not in" in missing.detail and "repo_url_template" in missing.detail
    assert by_id[rows[1]["instance_id"]].status is Status.RESOLVED


def test_a_failed_environment_build_is_an_error_with_its_log(
    run_sample: RunSample, settings: LocalSettings, sample, isolation, tmp_path: Path, host_env
) -> None:
    broken = Recipe(
        python="host",
        packages=("this-package-does-not-exist-swegreen==0.0.1",),
        test_cmd="pytest -rA",
    )
    book = RecipeBook({"sample/ledger": {"2.0": broken}})
    local = settings.model_copy(update={"cache_dir": tmp_path / "cache"})
    engine = build_engine(local, sample_config(sample), host_env, recipes=book, isolation=isolation)
    try:
        outcome = run_sample(
            "gold", run_id="broken-env", engine=engine, max_attempts=1, repos=("sample/ledger",)
        )
    finally:
        engine.close()
    assert {(r.status, r.reason) for r in outcome.results} == {
        (Status.ERROR, Reason.ENV_SETUP_FAILED)
    }
    assert all("this-package-does-not-exist" in r.detail for r in outcome.results)
    failed_logs = list((tmp_path / "cache" / "envs").glob("*.failed.log"))
    assert failed_logs and "installing the recipe's packages" in failed_logs[0].read_text()
    assert not [p for p in (tmp_path / "cache" / "envs").iterdir() if (p / ".complete").exists()]


def test_an_instance_without_a_recipe_is_an_error_that_is_not_retried(
    run_sample: RunSample, settings, sample, isolation, host_env
) -> None:
    engine = build_engine(
        settings,
        sample_config(sample),
        host_env,
        recipes=RecipeBook({}),
        isolation=isolation,
    )
    try:
        outcome = run_sample("gold", run_id="no-recipe", engine=engine, max_rows=1)
    finally:
        engine.close()
    [row] = outcome.results
    assert (row.status, row.reason, row.attempts) == (Status.ERROR, Reason.NO_RECIPE, 1)
    assert "no environment recipe for repo sample/calculator" in row.detail


def test_regrade_reproduces_verdicts_from_saved_logs(
    run_sample: RunSample, settings, sample, isolation, host_env
) -> None:
    outcome = run_sample(str(sample.crafted), run_id="regrade", max_rows=7)
    engine = build_engine(settings, sample_config(sample), host_env, isolation=isolation)
    try:
        by_id = load_dataset(str(sample.dataset)).by_id()
        for r in outcome.results:
            again = engine.evaluator.regrade(
                "regrade", by_id[r.instance_id], r, settings.cache_dir / "work"
            )
            assert (again.status, again.reason, again.counts) == (r.status, r.reason, r.counts)
            # nothing ran again, and what the run measured survives the regrade
            assert again == r
            if r.tests_ran:  # a row an older regrade stripped of it gets it back from its log
                stripped = r.model_copy(update={"test_command_seconds": 0.0})
                healed = engine.evaluator.regrade(
                    "regrade", by_id[r.instance_id], stripped, settings.cache_dir / "work"
                )
                assert abs(healed.test_command_seconds - r.test_command_seconds) < 1e-6
        assert any(r.tests_ran and r.test_command_seconds > 0 for r in outcome.results)
    finally:
        engine.close()


def test_patch_outside_the_repo_and_malformed_patches_are_no_op(
    run_sample: RunSample, tmp_path: Path
) -> None:
    preds = [
        {
            "instance_id": "sample__calculator-1",
            "model_patch": "--- a/../../etc/passwd\n+++ b/../../etc/passwd\n"
            "@@ -1 +1 @@\n-root\n+pwned\n",
        },
        {"instance_id": "sample__calculator-2", "model_patch": "I am sorry, I cannot help."},
        {"instance_id": "sample__calculator-3", "model_patch": None},
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in preds))
    outcome = run_sample(str(path), run_id="bad-patches", max_rows=3)
    got = {r.instance_id: (r.status, r.reason) for r in outcome.results}
    assert got == {
        "sample__calculator-1": (Status.NO_OP, Reason.PATCH_OUTSIDE_REPO),
        "sample__calculator-2": (Status.NO_OP, Reason.PATCH_MALFORMED),
        "sample__calculator-3": (Status.NO_OP, Reason.NO_PATCH),
    }


def test_many_rows_share_one_environment(settings: LocalSettings, run_sample: RunSample) -> None:
    run_sample("gold", run_id="envs", max_rows=-1)
    # the builds for the sample's rows (the session's cache also holds what other tests
    # built there, a service's environment say, whichever ran first)
    envs = [
        p
        for p in (settings.cache_dir / "envs").iterdir()
        if (p / ".complete").exists()
        and json.loads((p / "env.json").read_text())["for"].startswith("sample/")
    ]
    # 5 (repo, version) pairs, two recipes (ledger's installs the project): two builds
    assert len(envs) == 2
    locks = sorted((env / "lock.txt").read_text() for env in envs)
    assert all("pytest==8.3.5" in lock for lock in locks)
    assert ["setuptools==75.8.0" in lock for lock in locks].count(True) == 1


def test_an_event_loop_stays_responsive_during_a_run(
    run_sample: RunSample, settings, sample, isolation, host_env, monkeypatch
) -> None:
    """No call that blocks on a process, sleeps or walks a tree runs on the event loop's
    thread (the green agent answers A2A on the same loop as its rows): every wait happens
    in a worker thread or through asyncio (checked by what is called where, not by timing,
    so a loaded machine cannot make it fail or pass)."""
    on_loop: list[str] = []

    def watch(owner: object, name: str) -> None:
        real = getattr(owner, name)

        def wrapper(*args, **kwargs):
            if asyncio._get_running_loop() is not None:
                on_loop.append(f"{getattr(owner, '__name__', owner)}.{name}")
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)

    for owner, name in [
        (subprocess, "run"),
        (subprocess, "check_output"),
        (subprocess, "check_call"),
        (subprocess.Popen, "wait"),
        (subprocess.Popen, "communicate"),
        (time, "sleep"),
        # tree walks (a workspace handed to the sandbox, a checkout deleted) take as long
        # as the tree is big: django's environment view alone is 7,000 files
        (os, "walk"),
        (shutil, "rmtree"),
        (shutil, "copytree"),
    ]:
        watch(owner, name)

    cfg = sample_config(sample, max_rows=4)
    engine = build_engine(settings, cfg, host_env, isolation=isolation)

    async def main() -> None:
        ds = load_dataset(cfg.dataset)
        outcome = await engine.runner.run(
            run_id="loop",
            dataset=ds,
            instances=select_instances(ds, cfg.selection()),
            source=GoldPatches(),
            config=cfg,
        )
        assert {r.status for r in outcome.results} == {Status.RESOLVED}

    try:
        asyncio.run(main())
    finally:
        engine.close()
    assert on_loop == []


def test_base_validation_is_reported_cached_and_tied_to_the_environment(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, host_env, monkeypatch
) -> None:
    """On the base commit with only the test patch, a sound task's F2P tests fail and its
    P2P tests pass (ok); the result is cached per instance, and a rebuilt environment
    (here: another recipe schema) is validated again, never served a report from an
    environment that no longer exists (sphinx 3.x after the schema 3 fix)."""
    from swegreen.core import recipes

    ids = ["sample__calculator-1", "sample__textkit-1"]
    # whatever ran before in this session (the cache is the session's): not yet validated
    for iid in ids:
        for report in (settings.cache_dir / "base-validation").glob(f"{iid}-*.json"):
            report.unlink()
    first = run_sample("gold", run_id="bv-1", base_validation=True, instance_ids=ids)
    for row in first.results:
        assert row.base_validation is not None
        assert row.base_validation["ok"] is True, row.base_validation
        assert row.base_validation["f2p_passing_on_base"] == []
        assert row.base_validation["p2p_failing_on_base"] == []
        assert row.base_validation["cached"] is False
    second = run_sample("empty", run_id="bv-2", base_validation=True, instance_ids=ids)
    assert all(r.base_validation and r.base_validation["cached"] for r in second.results)

    config = sample_config(sample, base_validation=True, instance_ids=ids[:1])
    engine = build_engine(settings, config, host_env)
    try:
        validator = engine.evaluator.base_validator
        assert validator is not None
        (instance,) = select_instances(load_dataset(config.dataset), config.selection())
        before = validator.key(instance)
        monkeypatch.setattr(recipes, "RECIPE_SCHEMA_VERSION", recipes.RECIPE_SCHEMA_VERSION + 1)
        assert validator.key(instance) != before
    finally:
        engine.close()


def test_a_row_records_the_environment_build_it_paid_for_even_in_base_validation(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, host_env, tmp_path
) -> None:
    """The first row of an environment records its build time, also when base validation
    (which runs first) is what built it; later rows record none."""
    fresh = settings.model_copy(update={"cache_dir": tmp_path / "cache"})
    ids = ["sample__calculator-1"]
    engine = build_engine(fresh, sample_config(sample, base_validation=True), host_env)
    try:
        first = run_sample(
            "gold", run_id="build-1", engine=engine, base_validation=True, instance_ids=ids
        )
        (row,) = first.results
        assert row.status is Status.RESOLVED
        assert row.base_validation and row.base_validation["env_build_seconds"] > 0
        assert row.durations.env_build == row.base_validation["env_build_seconds"]
        (again,) = run_sample("gold", run_id="build-2", engine=engine, instance_ids=ids).results
        assert again.durations.env_build == 0.0
    finally:
        engine.close()


def test_the_network_is_on_only_for_instances_that_need_it(
    sample: SampleBenchmark, settings: LocalSettings, host_env, tmp_path: Path
) -> None:
    """Upstream's containers have the network; a few Verified tests reach real hosts. Those
    instances (known ones, plus the config's) keep it; every other test command runs
    without it."""
    from swegreen.core.recipes import known_network_instances
    from swegreen.evaluation.testbed import Testbed

    assert "sphinx-doc__sphinx-8269" in known_network_instances()
    config = sample_config(sample, network_instances="sample__ledger-1, sample__textkit-2")
    assert config.network_instances == ("sample__ledger-1", "sample__textkit-2")
    engine = build_engine(settings, config, host_env)
    try:
        instances = {i.instance_id: i for i in load_dataset(config.dataset).instances}

        def network(iid: str) -> bool:
            instance = instances[iid]
            recipe = engine.testbeds.recipes.for_instance(instance)
            testbed = Testbed(instance, recipe, tmp_path, None, [])  # type: ignore[arg-type]
            return engine.testbeds.policy_for(testbed).network

        assert network("sample__ledger-1") and network("sample__textkit-2")
        assert not network("sample__calculator-1")
    finally:
        engine.close()


def test_every_sample_task_is_valid_on_its_base_commit(run_sample: RunSample) -> None:
    """The sample is a correct fixture: on each base commit, with only the test patch, every
    F2P test fails and every P2P test passes (sample__calculator-3 once had F2P tests that
    Python's int() passed by itself, so a README-only patch resolved it)."""
    outcome = run_sample("empty", run_id="base-check", base_validation=True)
    reports = {r.instance_id: r.base_validation for r in outcome.results}
    assert len(reports) == 8
    bad = {k: v for k, v in reports.items() if not (v and v.get("ok") is True)}
    assert bad == {}


def test_participants_clone_repositories_that_end_at_the_base(sample: SampleBenchmark) -> None:
    """The full sample repositories hold the commits that fixed each task; the ones named in
    the task message hold nothing after the base commit, so no fix can be replayed."""
    from swegreen.core.config import EvalConfig
    from swegreen.core.task_message import task_data
    from swegreen.sample import resolve_sample

    config = resolve_sample(EvalConfig(dataset="swegreen:sample"), sample.root.parent)
    dataset = load_dataset(config.dataset)
    for inst in dataset.instances:
        url = task_data(inst, config.participant_url_template())["repo_url"]
        assert url.endswith(f"participant-repos/{inst.instance_id}.git")
        everything = set(git(Path(url), "rev-list", "--all").stdout.split())
        history = set(git(Path(url), "rev-list", inst.base_commit).stdout.split())
        assert everything == history and inst.base_commit in everything
        assert git(Path(url), "tag").stdout.strip() == ""
        full = sample.repos_dir / inst.repo.replace("/", "__")
        later = git(full, "rev-list", f"{inst.base_commit}..main").stdout.split()
        assert not set(later) & everything


def unaccounted(row: InstanceResult) -> float:
    """Seconds of a row's total in no phase (env_build is a part of setup)."""
    d = row.durations
    return d.total - (d.participant + d.setup + d.apply + d.tests + d.grading + d.waiting)


def test_error_and_timeout_rows_record_the_time_they_really_spent(
    run_sample: RunSample, settings: LocalSettings, sample, isolation, tmp_path: Path, host_env
) -> None:
    """An ``error`` row says where its time went: a failed build's setup, a timed-out
    eval script's seconds (the whole limit), never zeros."""
    broken = Recipe(
        python="host", packages=("this-package-does-not-exist-swegreen==0.0.1",), test_cmd="x"
    )
    slow = Recipe(python="host", test_cmd="sleep 120; pytest -rA", eval_timeout=3)
    book = RecipeBook({"sample/ledger": {"2.0": broken}, "sample/calculator": {"1.0": slow}})
    local = settings.model_copy(update={"cache_dir": tmp_path / "cache"})
    engine = build_engine(local, sample_config(sample), host_env, recipes=book, isolation=isolation)
    try:
        outcome = run_sample(
            "gold",
            run_id="spent",
            engine=engine,
            max_attempts=1,
            instance_ids=("sample__ledger-1", "sample__calculator-1"),
        )
    finally:
        engine.close()
    by_id = {r.instance_id: r for r in outcome.results}
    failed, timed_out = by_id["sample__ledger-1"], by_id["sample__calculator-1"]
    assert (failed.status, failed.reason) == (Status.ERROR, Reason.ENV_SETUP_FAILED)
    assert failed.durations.setup > 0 and failed.durations.total >= failed.durations.setup
    assert (timed_out.status, timed_out.reason) == (Status.ERROR, "test_timeout")
    assert timed_out.durations.setup > 0 and timed_out.durations.apply > 0
    # the eval script ran its whole limit; its test command, from its start until stopped
    assert timed_out.durations.tests >= 3
    assert 0 < timed_out.test_command_seconds <= timed_out.durations.tests
    assert timed_out.durations.total >= timed_out.durations.tests
    # every second of a row is in a named phase, error rows included
    for row in (failed, timed_out, *run_sample("gold", run_id="phases").results):
        assert unaccounted(row) < 0.05 + 0.02 * row.durations.total, row.durations


def test_a_retried_row_counts_its_wait_between_attempts(
    settings: LocalSettings, sample, isolation, tmp_path: Path, host_env
) -> None:
    """A clone that fails, tried twice with a pause between: the pause is the row's
    ``waiting``, and every second of its total is in a phase."""
    from .conftest import run_rows, sample_config

    cfg = sample_config(
        sample,
        repo_url_template=str(tmp_path / "nowhere" / "{name}.git"),
        instance_ids=["sample__calculator-1"],
        max_attempts=2,
    )
    local = settings.model_copy(update={"cache_dir": tmp_path / "cache"})
    engine = build_engine(local, cfg, host_env, isolation=isolation)
    engine.runner.retry_backoff = (1.0,)
    try:
        outcome = run_rows(engine, cfg, "waited")
    finally:
        engine.close()
    [row] = outcome.results
    assert (row.status, row.reason, row.attempts) == (Status.ERROR, "repo_unavailable", 2)
    assert row.durations.waiting >= 1.0
    assert unaccounted(row) < 0.05 + 0.02 * row.durations.total, row.durations
