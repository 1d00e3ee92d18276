"""Evaluating one instance: checkout, environment, apply, run tests, grade, classify.

``Evaluator.evaluate`` returns a row for every outcome the participant is responsible
for (including a patch that does not apply) and raises ``EvaluationFailure`` for the
ones it is not (repository unreachable, environment build failed, time limit). The
runner decides about retries and turns the final failure into an ``error`` row.
"""

from __future__ import annotations

import asyncio
import functools
import json
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from swegreen import artifacts as art
from swegreen.apply import apply_patch
from swegreen.classify import Reason, Status, TestCounts, classify
from swegreen.dataset import Instance
from swegreen.environments import Environment, EnvManager
from swegreen.errors import EnvironmentFault, EnvSetupFailed, EvaluationFailure, TestTimeout
from swegreen.eval_script import make_eval_script
from swegreen.grading import FULL, PARTIAL, grade_log, unapplied_report
from swegreen.patches import (
    PatchInfo,
    PatchRejected,
    check_against_tree,
    check_patch,
    inspect_patch,
    is_blank,
)
from swegreen.ports import ArtifactStore, PatchResult
from swegreen.procs import run_process
from swegreen.recipes import Recipe, RecipeBook
from swegreen.repo_cache import RepoCache, git_env
from swegreen.results import Durations, InstanceResult, unapplied_counts, utcnow
from swegreen.sandbox import LocalSandbox, SandboxPolicy, sandbox_env

DEFAULT_EVAL_TIMEOUT = 1800.0
SETUP_TIMEOUT = 3600.0


@dataclass(frozen=True)
class EvalOptions:
    work_root: Path
    eval_timeout: float | None = None  # None: the recipe's limit, else the official 1800 s
    memory_mb: int | None = 16384
    max_processes: int | None = 4096
    keep_workspaces: bool = False


class Evaluator:
    def __init__(
        self,
        *,
        repos: RepoCache,
        recipes: RecipeBook,
        envs: EnvManager,
        sandbox: LocalSandbox,
        artifacts: ArtifactStore,
        options: EvalOptions,
        host_env: Mapping[str, str],
    ) -> None:
        self.repos = repos
        self.recipes = recipes
        self.envs = envs
        self.sandbox = sandbox
        self.artifacts = artifacts
        self.options = options
        self.host_env = dict(host_env)

    def timeout_for(self, recipe: Recipe) -> float:
        return self.options.eval_timeout or recipe.eval_timeout or DEFAULT_EVAL_TIMEOUT

    async def evaluate(self, run_id: str, instance: Instance, patch: PatchResult) -> InstanceResult:
        started, t0 = utcnow(), time.monotonic()
        key = functools.partial(art.instance_key, run_id, instance.instance_id)
        text = patch.patch
        self.artifacts.write_text(key(art.PATCH), text or "")
        base = _RowBase(instance, patch, started, t0)

        if patch.failure is not None or text is None:
            reason = patch.failure or Reason.NO_PATCH
            return self._finish(
                key,
                base.unapplied(reason, patch.detail or "no patch was provided"),
                unapplied_report(instance, None),
            )
        if is_blank(text):
            return self._finish(
                key,
                base.unapplied(Reason.EMPTY_PATCH, "the patch is empty"),
                unapplied_report(instance, text),
            )
        info = inspect_patch(text)
        base.info = info
        try:
            check_patch(info)
        except PatchRejected as exc:
            return self._finish(
                key, base.unapplied(exc.reason, str(exc)), unapplied_report(instance, text)
            )

        recipe = self.recipes.for_instance(instance)
        workspace = (
            self.options.work_root / run_id / f"{instance.instance_id}.{uuid.uuid4().hex[:8]}"
        )
        repo = workspace / "repo"
        notes: list[str] = []
        try:
            t_setup = time.monotonic()
            workspace.mkdir(parents=True)
            # The checkout first: an unreachable repository should not cost an env build.
            await self.repos.checkout(instance.repo, instance.base_commit, repo)
            await self.repos.ensure_commit(instance.repo, instance.environment_setup_commit)
            read = functools.partial(
                self.repos.read_file, instance.repo, instance.environment_setup_commit
            )
            built = await self.envs.ensure(recipe, instance, read)
            how = "reused" if built.reused else f"built in {built.build_seconds:.1f}s"
            notes.append(f"environment {built.key} ({how})")
            env = await self.envs.view(built, workspace / "env")
            await self._setup_repo(recipe, env, workspace, repo)
            base.durations.setup = time.monotonic() - t_setup

            t_apply = time.monotonic()
            try:
                check_against_tree(info, repo)
            except PatchRejected as exc:
                return self._finish(
                    key, base.unapplied(exc.reason, str(exc)), unapplied_report(instance, text)
                )
            patch_file = workspace / art.PATCH
            patch_file.write_text(text, encoding="utf-8", errors="surrogateescape")
            applied = await apply_patch(
                repo, patch_file, git_env(workspace / "home", self.host_env)
            )
            base.durations.apply = time.monotonic() - t_apply
            notes.append(applied.log)
            if not applied.applied:
                detail = (
                    "the patch does not apply to the base commit "
                    "(git apply, --3way, --reject and patch --fuzz=5 all failed)"
                )
                if info.has_binary_without_data:
                    detail += "; it holds a binary diff without data (use `git diff --binary`)"
                return self._finish(
                    key,
                    base.unapplied(Reason.PATCH_DOES_NOT_APPLY, detail),
                    unapplied_report(instance, text),
                )
            base.apply_method = applied.method

            t_tests = time.monotonic()
            policy = SandboxPolicy(
                timeout=self.timeout_for(recipe),
                network=recipe.network,
                memory_mb=self.options.memory_mb,
                max_processes=self.options.max_processes,
            )
            script = make_eval_script(
                instance, recipe, str(repo), self.sandbox.test_wrapper(policy)
            )
            script_path = workspace / art.EVAL_SCRIPT
            script_path.write_text(script)
            self.artifacts.write_text(key(art.EVAL_SCRIPT), script)
            log_path = workspace / art.TEST_OUTPUT
            run = await self.sandbox.run_script(
                script_path,
                cwd=repo,
                env=self._test_env(env, workspace, recipe),
                policy=policy,
                log_path=log_path,
            )
            base.durations.tests = time.monotonic() - t_tests
            if run.timed_out:
                with log_path.open("a") as fh:  # the official harness's timeout line
                    fh.write(f"\n\nTimeout error: {policy.timeout:g} seconds exceeded.")
            self.artifacts.write_text(key(art.TEST_OUTPUT), log_path.read_text(errors="replace"))
            if run.timed_out:
                raise TestTimeout(f"the eval script ran past its {policy.timeout:g} s time limit")
            return self._grade(key, base, instance, recipe, log_path, text)
        except EvaluationFailure as exc:
            notes.append(f"FAILED: {exc}\n{exc.log_tail}")
            raise
        finally:
            self.artifacts.write_text(key(art.INSTANCE_LOG), "\n".join(notes))
            if not self.options.keep_workspaces:
                await asyncio.to_thread(shutil.rmtree, workspace, True)

    def regrade(self, run_id: str, instance: Instance, stored: InstanceResult) -> InstanceResult:
        """Grade a finished row again from its saved test log, running nothing."""
        if stored.status is Status.ERROR or not stored.tests_ran:
            return stored
        key = functools.partial(art.instance_key, run_id, instance.instance_id)
        log = self.artifacts.read_text(key(art.TEST_OUTPUT))
        patch = self.artifacts.read_text(key(art.PATCH)) or ""
        if log is None:
            return stored
        recipe = self.recipes.for_instance(instance)
        scratch = self.options.work_root / run_id / f".regrade-{uuid.uuid4().hex[:8]}.log"
        scratch.parent.mkdir(parents=True, exist_ok=True)
        try:
            scratch.write_text(log)
            base = _RowBase(
                instance,
                PatchResult(patch, stored.model_name_or_path),
                stored.started_at,
                time.monotonic(),
            )
            base.info = inspect_patch(patch)
            base.apply_method = stored.apply_method
            base.durations = stored.durations.model_copy()
            row = self._grade(key, base, instance, recipe, scratch, patch)
        finally:
            scratch.unlink(missing_ok=True)
        return row.model_copy(
            update={
                "durations": stored.durations,
                "attempts": stored.attempts,
                "finished_at": stored.finished_at,
                "participant_usage": stored.participant_usage,
            }
        )

    def _grade(
        self,
        key: Callable[[str], str],
        base: _RowBase,
        instance: Instance,
        recipe: Recipe,
        log_path: Path,
        patch: str,
    ) -> InstanceResult:
        grade = grade_log(
            instance,
            log_path,
            recipe.log_parser,
            base.patch.model_name_or_path,
            patch,
            recipe.eval_type,
        )
        if not grade.log_ok and grade.environment_fault:
            raise EnvironmentFault(
                f"the test log shows an environment fault: {grade.environment_fault}"
            )
        status, reason = classify(True, grade.counts)
        # The tree refines the official verdict; it must never contradict it.
        assert (status is Status.RESOLVED) == (grade.resolution == FULL), (status, grade.resolution)
        assert (status is Status.PARTIALLY_RESOLVED) == (grade.resolution == PARTIAL), (
            status,
            grade.resolution,
        )
        detail = (
            ""
            if grade.log_ok
            else "the grader rejected the test log (tests did not run, or "
            "the exit code contradicts the log): every test counts as failed"
        )
        row = base.row(
            status,
            reason,
            detail,
            counts=grade.counts,
            applied=True,
            tests_ran=True,
            f2p_failing=grade.f2p_failing,
            p2p_failing=grade.p2p_failing,
        )
        return self._finish(key, row, grade.report)

    def _finish(
        self, key: Callable[[str], str], row: InstanceResult, report: dict
    ) -> InstanceResult:
        self.artifacts.write_text(key(art.REPORT), json.dumps(report, indent=4))
        return row

    def _test_env(self, env: Environment, workspace: Path, recipe: Recipe) -> dict[str, str]:
        extra = {
            **env.runtime_env,
            "SWEGREEN_REPO": str(workspace / "repo"),
            **dict(recipe.env_vars),
        }
        return sandbox_env(
            bin_dirs=env.bin_dirs,
            virtual_env=None,
            workspace=workspace,
            host_env=self.host_env,
            pip_cache=self.envs.root / ".pip-cache",
            extra=extra,
        )

    async def _setup_repo(
        self, recipe: Recipe, env: Environment, workspace: Path, repo: Path
    ) -> None:
        """What the official instance image does after cloning: pre-install, install, and
        one commit of the result, so that ``git diff`` shows only the patch."""
        steps = [*recipe.pre_install, *([recipe.install] if recipe.install else [])]
        environ = self._test_env(env, workspace, recipe)
        environ.update(
            {k: v for k, v in git_env(workspace / "home").items() if k.startswith("GIT_")}
        )
        script = "\n".join(
            ["set -euxo pipefail", *steps, "git commit --quiet --allow-empty -am SWE-bench"]
        )
        result = await run_process(
            ["bash", "-c", script], cwd=repo, env=environ, timeout=SETUP_TIMEOUT
        )
        if not result.ok:
            raise EnvSetupFailed(
                f"repository setup (pre_install/install) failed for {recipe.install or 'commit'}",
                log_tail=result.tail(),
            )


@dataclass
class _RowBase:
    """The parts of a row known before the verdict."""

    instance: Instance
    patch: PatchResult
    started: str
    t0: float
    info: PatchInfo | None = None
    apply_method: str | None = None

    def __post_init__(self) -> None:
        self.durations = Durations(participant=self.patch.duration)

    def row(
        self,
        status: Status,
        reason: str,
        detail: str,
        *,
        counts,
        applied: bool,
        tests_ran: bool,
        f2p_failing: list[str] | None = None,
        p2p_failing: list[str] | None = None,
    ) -> InstanceResult:
        self.durations.total = time.monotonic() - self.t0 + self.patch.duration
        text = self.patch.patch or ""
        return InstanceResult(
            instance_id=self.instance.instance_id,
            repo=self.instance.repo,
            status=status,
            reason=str(reason),
            detail=detail,
            model_name_or_path=self.patch.model_name_or_path,
            patch_applied=applied,
            tests_ran=tests_ran,
            apply_method=self.apply_method,
            f2p_passed=counts.f2p_passed,
            f2p_total=counts.f2p_total,
            p2p_passed=counts.p2p_passed,
            p2p_total=counts.p2p_total,
            f2p_failing=f2p_failing or [],
            p2p_failing=p2p_failing or [],
            patch_sha256=self.info.sha256 if self.info else None,
            patch_bytes=len(text.encode("utf-8", "surrogateescape")),
            patch_files=self.info.paths if self.info else [],
            durations=self.durations.model_copy(),
            participant_usage=self.patch.usage,
            started_at=self.started,
            finished_at=utcnow(),
        )

    def unapplied(self, reason: str, detail: str) -> InstanceResult:
        counts = unapplied_counts(len(self.instance.FAIL_TO_PASS), len(self.instance.PASS_TO_PASS))
        return self.row(
            Status.NO_OP,
            reason,
            detail,
            counts=counts,
            applied=False,
            tests_ran=False,
            f2p_failing=list(self.instance.FAIL_TO_PASS),
        )


def error_row(
    instance: Instance,
    patch: PatchResult | None,
    failure: EvaluationFailure,
    attempts: int,
    started: str,
    t0: float,
) -> InstanceResult:
    """The ``error`` row for an evaluation that could not be completed."""
    patch = patch or PatchResult(None, "")
    base = _RowBase(instance, patch, started, t0)
    if patch.patch:
        base.info = inspect_patch(patch.patch)
    detail = str(failure)
    if failure.log_tail:
        detail += "\n--- log tail ---\n" + failure.log_tail[-2000:]
    row = base.row(
        Status.ERROR,
        failure.reason,
        detail,
        counts=TestCounts(0, 0, 0, 0),
        applied=False,
        tests_ran=False,
    )
    return row.model_copy(
        update={
            "error_kind": "infrastructure" if failure.infrastructure else "evaluation",
            "attempts": attempts,
        }
    )
