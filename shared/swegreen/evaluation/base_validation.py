"""Base validation: each instance's tests run once on the base commit with only the test
patch, and the outcome cached.

By the dataset's definition every F2P test fails there and every P2P test passes. Where
that does not hold here (a P2P test needs the internet, an F2P test passes without any
fix), no participant can be blamed for it: rows carry this report so a reader can tell
an environment limit from a participant's mistake. It never changes a verdict.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from swegreen.core.dataset import Instance
from swegreen.core.errors import EvaluationFailure
from swegreen.core.grading import grade_log, grader_version
from swegreen.core.recipes import Recipe
from swegreen.evaluation.testbeds import Testbeds
from swegreen.processes.locks import file_lock

SCHEMA = 2  # 2: the graded tests' statuses on the base commit


class BaseValidator:
    def __init__(self, testbeds: Testbeds, cache_dir: Path) -> None:
        self.testbeds = testbeds
        self.cache_dir = cache_dir

    def key(self, instance: Instance) -> str:
        head = [
            SCHEMA,
            instance.instance_id,
            instance.base_commit,
            instance.test_patch,
            instance.FAIL_TO_PASS,
            instance.PASS_TO_PASS,
            instance.eval_script,
        ]
        return run_key(head, self.testbeds.recipes.for_instance(instance), instance)

    async def validate(self, instance: Instance) -> dict[str, Any]:
        """The base run's report for ``instance``, from the cache when it has one. Rows
        publish it, so its ``log`` is the file's name in the cache, not a host path."""
        path = self.cache_dir / f"{instance.instance_id}-{self.key(instance)}.json"
        if path.exists():
            return _cached(path)
        async with file_lock(self.cache_dir / ".locks" / f"{path.stem}.lock"):
            if path.exists():
                return _cached(path)
            try:
                report = await self._run(instance, path.with_suffix(".log"))
            except EvaluationFailure as exc:
                return {"ok": None, "error": f"{exc.reason}: {exc}", "cached": False}
            path.write_text(json.dumps(report, indent=2))
            return {**report, "cached": False}

    async def _run(self, instance: Instance, log_copy: Path) -> dict[str, Any]:
        async with self.testbeds.open("base-validation", instance) as testbed:
            run = await self.testbeds.run_eval(testbed)
            log_copy.write_text(run.log_path.read_text(errors="replace"))
            if run.timed_out:
                return {
                    "ok": False,
                    "timed_out": True,
                    "env_build_seconds": testbed.env_build_seconds,
                    "log": log_copy.name,
                    "f2p_passing_on_base": [],
                    "p2p_failing_on_base": [],
                }
            grade = grade_log(
                instance,
                run.log_path,
                testbed.recipe.log_parser,
                "base",
                "",
                testbed.recipe.eval_type,
            )
        f2p_passing = [t for t in instance.FAIL_TO_PASS if t not in grade.f2p_failing]
        graded = [*instance.FAIL_TO_PASS, *instance.PASS_TO_PASS]
        return {
            "ok": grade.log_ok and not f2p_passing and not grade.p2p_failing,
            "log_ok": grade.log_ok,
            # what each graded test was on the base commit (grading compares: core/grading)
            "statuses": {t: grade.status_map[t] for t in graded if t in grade.status_map},
            "f2p_passing_on_base": f2p_passing,
            "p2p_failing_on_base": grade.p2p_failing,
            "log": log_copy.name,
            "env_build_seconds": testbed.env_build_seconds,
        }


def run_key(head: list[object], recipe: Recipe, instance: Instance) -> str:
    """The name of a cached test run: what it ran (``head``), the recipe, the environment
    it ran in (a rebuilt environment may pass other tests) and the grader."""
    parts = [*head, recipe.digest(), recipe.env_key(instance.environment_setup_commit)]
    blob = json.dumps([*parts, grader_version()])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _cached(path: Path) -> dict[str, Any]:
    report = json.loads(path.read_text())
    if isinstance(report.get("log"), str):  # older cached reports held the full path
        report["log"] = Path(report["log"]).name
    return {**report, "cached": True}
