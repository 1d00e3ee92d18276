"""Evaluating one instance: refuse bad patches, apply, run the tests, grade, classify.

``Evaluator.evaluate`` returns a row for every outcome the participant is responsible
for (including a patch that does not apply) and raises ``EvaluationFailure`` for the
ones it is not (repository unreachable, environment build failed, time limit). The
runner decides about retries and turns the final failure into an ``error`` row.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from swegreen.core.classify import Reason, Status, TestCounts, classify
from swegreen.core.config import DEFAULT_MAX_PATCH_BYTES
from swegreen.core.dataset import Instance
from swegreen.core.errors import EnvironmentFault, EvaluationFailure, TestTimeout, unevaluated
from swegreen.core.eval_script import test_command_seconds
from swegreen.core.grading import (
    FULL,
    PARTIAL,
    Grade,
    grade_log,
    skipped_against_base,
    unapplied_report,
    with_failing,
)
from swegreen.core.patches import (
    EMPTY_PATCH_DETAIL,
    OversizedPatch,
    PatchRejected,
    check_against_tree,
    check_applied,
    check_patch,
    inspect_patch,
    is_blank,
    oversized_patch,
)
from swegreen.core.ports import ArtifactStore, PatchResult
from swegreen.core.recipes import Recipe, RecipeBook
from swegreen.core.results import GRADED_FIELDS, InstanceResult, utcnow
from swegreen.core.rows import RowBuilder
from swegreen.core.scrub import NO_SCRUBBING, Scrub
from swegreen.evaluation.apply import apply_patch
from swegreen.evaluation.base_validation import BaseValidator
from swegreen.evaluation.regression_check import RegressionCheck
from swegreen.evaluation.testbed import Testbed
from swegreen.evaluation.testbeds import Testbeds
from swegreen.sandbox.recorder import (
    Recorded,
    census_changes,
    contradictions,
    forced_outcomes,
    pytest_recorder_digest,
    runner_kind,
    unrecorded_passes,
)
from swegreen.sandbox.tamper import protected_reason
from swegreen.stores import artifacts as art

Key = Callable[[str], str]


class PatchEvaluator:
    """What every evaluation backend shares: the patch refused before anything runs,
    the log graded by the official grader, the row built the same way. A backend says
    where the patch is applied and the eval script runs (``_run_patch``)."""

    backend = ""

    def __init__(
        self,
        *,
        recipes: RecipeBook,
        artifacts: ArtifactStore,
        base_validator: BaseValidator | None = None,
        max_patch_bytes: int = DEFAULT_MAX_PATCH_BYTES,
        scrub: Scrub = NO_SCRUBBING,
    ) -> None:
        self.recipes = recipes
        self.artifacts = artifacts
        self.base_validator = base_validator
        self.max_patch_bytes = max_patch_bytes
        self.scrub = scrub  # host secrets out of failure details (artifacts scrub themselves)

    def plan(self, instances: Sequence[Instance]) -> list[Instance]:
        return list(instances)

    async def evaluate(self, run_id: str, instance: Instance, patch: PatchResult) -> InstanceResult:
        key: Key = functools.partial(art.instance_key, run_id, instance.instance_id)
        row = RowBuilder(instance, patch, utcnow(), time.monotonic())
        if (oversized := oversized_patch(patch.patch, self.max_patch_bytes)) is not None:
            return self._too_large(key, row, oversized)
        row.begin("setup")  # from here on: base validation and waits included
        self.artifacts.write_text(key(art.PATCH), patch.patch or "")
        if self.base_validator is not None:
            row.base_validation = await self.base_validator.validate(instance)
            if not row.base_validation.get("cached"):
                row.durations.env_build += float(
                    row.base_validation.get("env_build_seconds") or 0.0
                )
        return await self._evaluate(run_id, key, row)

    async def _evaluate(self, run_id: str, key: Key, row: RowBuilder) -> InstanceResult:
        instance, text = row.instance, row.patch.patch
        if row.patch.failure is not None or text is None:
            detail = self.scrub(row.patch.detail) or "no patch was provided"
            if (never := unevaluated(row.patch.failure, detail)) is not None:
                raise never  # an error row: the participant was never evaluated
            return self._finish(
                key,
                row.unapplied(row.patch.failure or Reason.NO_PATCH, detail),
                unapplied_report(instance, None),
            )
        if is_blank(text):
            return self._finish(
                key,
                row.unapplied(Reason.EMPTY_PATCH, EMPTY_PATCH_DETAIL),
                unapplied_report(instance, text),
            )
        row.info = inspect_patch(text)
        try:
            check_patch(row.info)
        except PatchRejected as exc:
            return self._finish(
                key, row.unapplied(exc.reason, str(exc)), unapplied_report(instance, text)
            )

        notes: list[str] = []
        try:
            return await self._run_patch(run_id, key, row, text, notes)
        except EvaluationFailure as exc:
            exc.spent, exc.test_command_seconds = row.spent(), row.test_command_seconds
            notes.append(f"FAILED: {exc}\n{exc.log_tail}")
            exc.args, exc.log_tail = (self.scrub(str(exc)),), self.scrub(exc.log_tail)
            raise
        finally:
            self.artifacts.write_text(key(art.INSTANCE_LOG), "\n".join(notes))

    async def _run_patch(
        self, run_id: str, key: Key, row: RowBuilder, text: str, notes: list[str]
    ) -> InstanceResult:
        """Apply ``text`` where this backend runs tests, run the eval script, grade."""
        raise NotImplementedError

    def _keep_census(
        self, key: Key, census: dict[str, object] | None, notes: list[str], seconds: float
    ) -> None:
        """Stored beside the row's record, so that a regrade compares the same two."""
        if census is None:
            return
        self.artifacts.write_text(key(art.BASE_CENSUS), json.dumps(census, indent=1))
        plugins = census.get("plugins")
        notes.append(
            f"pytest's session on the base commit: "
            f"{len(plugins) if isinstance(plugins, list) else 0} plugins, configuration file "
            f"{census.get('inifile')} (census {seconds:.2f}s)"
        )

    def _does_not_apply(self, key: Key, row: RowBuilder, text: str) -> InstanceResult:
        detail = (
            "the patch does not apply to the base commit "
            "(git apply, --3way, --reject and patch --fuzz=5 all failed)"
        )
        return self._finish(
            key,
            row.unapplied(Reason.PATCH_DOES_NOT_APPLY, detail),
            unapplied_report(row.instance, text),
        )

    def _too_large(self, key: Key, row: RowBuilder, oversized: OversizedPatch) -> InstanceResult:
        """Never applied, parsed or stored whole: the row keeps its size and hash."""
        row.info = oversized.info
        self.artifacts.write_text(key(art.PATCH), oversized.stub)
        result = row.unapplied(Reason.PATCH_TOO_LARGE, oversized.detail)
        return self._finish(key, result, unapplied_report(row.instance, ""))

    def regrade(
        self, run_id: str, instance: Instance, stored: InstanceResult, work: Path
    ) -> InstanceResult:
        """Grade a finished row again from its saved test log, running nothing."""
        key: Key = functools.partial(art.instance_key, run_id, instance.instance_id)
        log = self.artifacts.read_text(key(art.TEST_OUTPUT))
        if stored.status is Status.ERROR or not stored.tests_ran or log is None:
            return stored
        patch = self.artifacts.read_text(key(art.PATCH)) or ""
        scratch = work / f".regrade-{uuid.uuid4().hex[:8]}.log"
        scratch.parent.mkdir(parents=True, exist_ok=True)
        try:
            scratch.write_text(log)
            row = RowBuilder(
                instance,
                PatchResult(patch, stored.model_name_or_path),
                stored.started_at,
                time.monotonic(),
                info=inspect_patch(patch),
                apply_method=stored.apply_method,
                base_validation=stored.base_validation,
                tampered_files=list(stored.tampered_files),
                isolation=stored.isolation,
                test_exit_code=stored.test_exit_code,
            )
            record = self.artifacts.read_text(key(art.TEST_RECORD))
            census = self.artifacts.read_text(key(art.BASE_CENSUS))
            fresh = self._grade(
                key,
                row,
                self.recipes.for_instance(instance),
                scratch,
                patch,
                Recorded.parse(record) if record is not None else None,
                stored.test_exit_code,
                json.loads(census) if census is not None else None,
            )
        finally:
            scratch.unlink(missing_ok=True)
        # Only what the grader decides changes; what the run measured and recorded (times,
        # environment, checks, conversation) stays as the run saw it.
        update = {f: getattr(fresh, f) for f in GRADED_FIELDS}
        if not stored.test_command_seconds and (measured := test_command_seconds(log)):
            # a row regraded before regrades kept it lost it; its log's clock stamps have it
            update["test_command_seconds"] = measured
        return stored.model_copy(update=update)

    def _grade(
        self,
        key: Key,
        row: RowBuilder,
        recipe: Recipe,
        log_path: Path,
        patch: str,
        recorded: Recorded | None = None,
        exit_code: int | None = None,
        base_census: dict[str, object] | None = None,
    ) -> InstanceResult:
        grade = grade_log(
            row.instance,
            log_path,
            recipe.log_parser,
            row.patch.model_name_or_path,
            patch,
            recipe.eval_type,
        )
        if not grade.log_ok and grade.environment_fault:
            raise EnvironmentFault(
                f"the test log shows an environment fault: {grade.environment_fault}"
            )
        forced: dict[str, str] = {}
        if recorded is not None:
            runner = runner_kind(recipe.log_parser)
            found = contradictions(recorded, grade.status_map, exit_code, runner)
            if base_census is not None and recorded.census is not None:
                found += census_changes(base_census, recorded.census)
            if found:
                return self._tampered_log(key, row, grade, found)
            instance = row.instance
            forced = forced_outcomes(
                recorded,
                grade.status_map,
                list(instance.FAIL_TO_PASS),
                list(instance.PASS_TO_PASS),
                frozenset(p for c in inspect_patch(patch).files for p in c.paths),
                lambda path: protected_reason(path) is not None,
            )
            graded = [*instance.FAIL_TO_PASS, *instance.PASS_TO_PASS]
            forced.update(unrecorded_passes(recorded, grade.status_map, graded))
        base = (row.base_validation or {}).get("statuses")
        if isinstance(base, dict) and grade.log_ok:
            forced.update(skipped_against_base(grade.status_map, base, row.instance.PASS_TO_PASS))
        grade = with_failing(grade, row.instance, forced)
        status, reason = classify(True, grade.counts)
        # The tree refines the official verdict; it must never contradict it (where
        # ``forced`` counts tests failing, the verdict is the official one on that view).
        assert (status is Status.RESOLVED) == (grade.resolution == FULL), (status, grade.resolution)
        assert (status is Status.PARTIALLY_RESOLVED) == (grade.resolution == PARTIAL)
        detail = (
            ""
            if grade.log_ok
            else (
                "the grader rejected the test log (tests did not run, or the "
                "exit code contradicts the log): every test counts as failed"
            )
        )
        if forced:
            shown = [f"{name}: {why}" for name, why in sorted(forced.items())[:20]]
            detail = "\n".join(filter(None, [detail, *shown]))
        result = row.result(
            status,
            reason,
            detail,
            counts=grade.counts,
            applied=True,
            tests_ran=True,
            f2p_failing=grade.f2p_failing,
            p2p_failing=grade.p2p_failing,
        )
        return self._finish(key, result, grade.report)

    def _tampered_log(
        self, key: Key, row: RowBuilder, grade: Grade, found: list[str]
    ) -> InstanceResult:
        """The log says what pytest did not see: an error row, never a silent pass."""
        shown = found[:20] + ([f"... and {len(found) - 20} more"] if len(found) > 20 else [])
        result = row.result(
            Status.ERROR,
            Reason.LOG_TAMPERING,
            "the test log contradicts what the test runner itself recorded (something in "
            "the test process printed results, forced its exit code or changed the "
            "runner):\n" + "\n".join(shown),
            counts=TestCounts(0, len(row.instance.FAIL_TO_PASS), 0, len(row.instance.PASS_TO_PASS)),
            applied=True,
            tests_ran=True,
        )
        report = {
            iid: {**entry, "resolved": False, "log_tampering": found}
            for iid, entry in grade.report.items()
        }
        return self._finish(key, result.model_copy(update={"error_kind": "evaluation"}), report)

    def _finish(self, key: Key, result: InstanceResult, report: dict[str, Any]) -> InstanceResult:
        self.artifacts.write_text(key(art.REPORT), json.dumps(report, indent=4))
        return result


class Evaluator(PatchEvaluator):
    """The engine's backend: a private testbed of the instance's prepared workspace, its
    own environment, the sandbox (testbeds.py)."""

    backend = "engine"

    def __init__(
        self,
        *,
        testbeds: Testbeds,
        artifacts: ArtifactStore,
        base_validator: BaseValidator | None = None,
        regression_check: RegressionCheck | None = None,
        max_patch_bytes: int = DEFAULT_MAX_PATCH_BYTES,
        scrub: Scrub = NO_SCRUBBING,
    ) -> None:
        super().__init__(
            recipes=testbeds.recipes,
            artifacts=artifacts,
            base_validator=base_validator,
            max_patch_bytes=max_patch_bytes,
            scrub=scrub,
        )
        self.testbeds = testbeds
        self.regression_check = regression_check

    async def evaluate(self, run_id: str, instance: Instance, patch: PatchResult) -> InstanceResult:
        result = await super().evaluate(run_id, instance, patch)
        if self.regression_check is None or result.status is not Status.RESOLVED:
            return result
        check, log = await self.regression_check.check(run_id, instance, patch.patch or "")
        if log:
            key = functools.partial(art.instance_key, run_id, instance.instance_id)
            self.artifacts.write_text(key(art.REGRESSION_OUTPUT), log)
        return result.model_copy(update={"regression_check": check})

    async def _base_census(self, run_id: str, testbed: Testbed) -> dict[str, object] | None:
        """The base commit's census (``take_census``), kept beside the prepared workspace
        it was taken from, under a digest of the recorder and of how the tests run: the
        same workspace, recorder and test command give the same census, and a sandbox
        start is not free (Landlock's, about 10 s on a real row)."""
        kept = None
        if testbed.prepared is not None:
            # what the census depends on besides the workspace: the recorder, and how the
            # tests are run (a recipe's test command, the row's test patch or script)
            inputs = (
                pytest_recorder_digest(),
                testbed.recipe.model_dump_json(),
                testbed.instance.test_patch,
                testbed.instance.eval_script or "",
            )
            digest = hashlib.sha256("\0".join(inputs).encode()).hexdigest()[:16]
            kept = testbed.prepared.with_name(f"{testbed.prepared.name}.census-{digest}.json")
            with contextlib.suppress(OSError, ValueError):
                return json.loads(kept.read_text())["census"]
        async with self.testbeds.open(run_id, testbed.instance) as pristine:
            census = await self.testbeds.take_census(pristine)
        if kept is not None and census is not None:
            scratch = kept.with_suffix(f".{uuid.uuid4().hex[:8]}")
            scratch.write_text(json.dumps({"census": census}))
            scratch.replace(kept)
        return census

    async def _run_patch(
        self, run_id: str, key: Key, row: RowBuilder, text: str, notes: list[str]
    ) -> InstanceResult:
        instance = row.instance
        row.begin("setup")
        async with self.testbeds.open(run_id, instance) as testbed:
            notes.extend(testbed.notes)
            testbed.notes = notes
            row.durations.env_build += testbed.env_build_seconds
            row.environment = dict(testbed.provenance)
            row.begin("apply")
            try:
                check_against_tree(row.info, testbed.repo)
            except PatchRejected as exc:
                return self._finish(
                    key, row.unapplied(exc.reason, str(exc)), unapplied_report(instance, text)
                )
            patch_file = testbed.workspace / art.PATCH
            patch_file.write_text(text, encoding="utf-8", errors="surrogateescape")
            top = testbed.top_names()
            applied = await apply_patch(testbed.repo, patch_file, self.testbeds.git_env(testbed))
            notes.append(applied.log)
            if not applied.applied:
                return self._does_not_apply(key, row, text)
            row.apply_method = applied.method
            try:
                check_applied(row.info, testbed.repo)
            except PatchRejected as exc:
                return self._finish(
                    key, row.unapplied(exc.reason, str(exc)), unapplied_report(instance, text)
                )
            # Test files and test configuration are the benchmark's: what the patch
            # changed of them is put back (tamper.py); so is what its code changes
            # during the eval-time install (run_eval, between the two phases).
            guard = self.testbeds.guard(testbed)
            row.tampered_files += await guard.revert(row.info.paths)
            if row.tampered_files:
                notes.append("put back before the tests: " + ", ".join(row.tampered_files))
            row.isolation = self.testbeds.sandbox.isolation.mode
            # what configures pytest on the base commit, in a copy no patch has touched
            t0 = time.monotonic()
            census = await self._base_census(run_id, testbed)
            self._keep_census(key, census, notes, time.monotonic() - t0)
            skip = self.testbeds.reinstall_skip(testbed, row.info.paths, top)
            if testbed.recipe.install:
                row.environment["eval_install"] = (
                    "skipped (no build input changed)" if skip else "ran"
                )
            row.begin("tests")
            run = await self.testbeds.run_eval(testbed, guard, skip_install=skip)
            row.begin("grading")
            row.tampered_files += run.reverted
            row.test_exit_code = run.exit_code
            # a timed-out command ran until it was stopped: that is its time
            row.test_command_seconds = run.test_seconds() or (
                row.durations.tests if run.timed_out else 0.0
            )
            self.artifacts.write_text(key(art.EVAL_SCRIPT), run.script)
            self.artifacts.write_text(
                key(art.TEST_OUTPUT), run.log_path.read_text(errors="replace")
            )
            if run.recorded is not None:
                self.artifacts.write_text(key(art.TEST_RECORD), run.recorded.text)
            if run.timed_out:
                raise TestTimeout(f"the eval script ran past its {run.timeout:g} s time limit")
            return self._grade(
                key, row, testbed.recipe, run.log_path, text, run.recorded, run.exit_code, census
            )
