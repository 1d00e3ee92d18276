"""The regression check (``--regression-check``): do a resolution's neighbours still pass?

A row is graded on its F2P and P2P lists; a patch can pass them all and break a test
the lists do not name. For a ``resolved`` row, the candidate patch and the gold patch
each run, in testbeds of their own, the whole test files of the modules the candidate
touched (core/related_tests.py) and the row's own test files. A test the gold patch
passes and the candidate does not is listed; the row carries the list as a flag
(``regression_check``), never as a verdict: the official one stays. The gold side is
cached per row and test selection, as base validation's run is.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from swegreen.core.dataset import Instance
from swegreen.core.errors import EvaluationFailure
from swegreen.core.eval_script import NotWidenable, files_of_test_patch
from swegreen.core.grading import grade_log
from swegreen.core.patches import inspect_patch
from swegreen.core.related_tests import directives_for, is_test_path, related_test_files
from swegreen.evaluation.apply import apply_patch
from swegreen.evaluation.base_validation import run_key
from swegreen.evaluation.testbed import Testbed
from swegreen.evaluation.testbeds import Testbeds
from swegreen.processes.locks import file_lock
from swegreen.processes.procs import run_process
from swegreen.repositories import trusted_git
from swegreen.sandbox.recorder import contradictions

SCHEMA = 1
PASSING = frozenset({"PASSED", "XFAIL"})  # upstream's test_passed
SHOWN = 50  # regressions listed on a row (the count is exact)


class CheckFailed(Exception):
    """The check could not compare (a run timed out, its log was refused): said on the
    row, which keeps its verdict."""


class RegressionCheck:
    def __init__(self, testbeds: Testbeds, cache_dir: Path) -> None:
        self.testbeds = testbeds
        self.cache_dir = cache_dir

    async def check(
        self, run_id: str, instance: Instance, candidate: str
    ) -> tuple[dict[str, Any], str]:
        """The row's ``regression_check`` record (what ran, and the tests the gold patch
        passes that the candidate does not), and the candidate's wider test log."""
        t0 = time.monotonic()
        log = ""
        try:
            async with self.testbeds.open(f"{run_id}-regression", instance) as testbed:
                files = await self.test_files(testbed, candidate)
                directives = directives_for(files, testbed.recipe.directive_style)
                mine, log = await self._statuses(testbed, candidate, directives)
            gold, cached = await self._gold(instance, directives)
        except (EvaluationFailure, CheckFailed, NotWidenable) as exc:
            seconds = round(time.monotonic() - t0, 1)
            return {"ran": False, "why": str(exc), "seconds": seconds}, log
        passing = sorted(t for t, s in gold.items() if s in PASSING)
        regressions = [t for t in passing if mine.get(t) not in PASSING]
        record = {
            "ran": True,
            "test_files": files,
            "tests_gold_passes": len(passing),
            "regression_count": len(regressions),
            "regressions": regressions[:SHOWN],
            "gold_cached": cached,
            "seconds": round(time.monotonic() - t0, 1),
        }
        return record, log

    async def test_files(self, testbed: Testbed, candidate: str) -> list[str]:
        """The row's own test files, then those of the modules the candidate touched."""
        own = [p for p in files_of_test_patch(testbed.instance) if p.endswith(".py")]
        source = testbed.prepared / "repo" if testbed.prepared is not None else testbed.repo
        listed = await run_process(
            trusted_git.argv(source, "ls-files", "-z"),
            env=self.testbeds.git_env(testbed),
            timeout=300,
        )
        if not listed.ok:
            raise CheckFailed(f"git ls-files failed in the prepared checkout: {listed.output}")
        tracked = [p for p in listed.output.split("\0") if p]
        touched = [p for p in inspect_patch(candidate).paths if not is_test_path(p)]
        related = related_test_files(touched, tracked)
        return list(dict.fromkeys([*own, *related]))

    async def _statuses(
        self, testbed: Testbed, patch: str, directives: Sequence[str]
    ) -> tuple[dict[str, str], str]:
        """Apply ``patch`` in ``testbed`` as the evaluation does (test files put back,
        the install where it can change something), run ``directives``, parse the log."""
        patch_file = testbed.workspace / "regression-check.diff"
        patch_file.write_text(patch, encoding="utf-8", errors="surrogateescape")
        top = testbed.top_names()
        applied = await apply_patch(testbed.repo, patch_file, self.testbeds.git_env(testbed))
        if not applied.applied:
            raise CheckFailed("the patch did not apply again in the check's testbed")
        paths = inspect_patch(patch).paths
        guard = self.testbeds.guard(testbed)
        await guard.revert(paths)
        skip = self.testbeds.reinstall_skip(testbed, paths, top)
        run = await self.testbeds.run_eval(testbed, guard, skip_install=skip, directives=directives)
        log = run.log_path.read_text(errors="replace")
        if run.timed_out:
            raise CheckFailed(f"the wider test run passed its {run.timeout:g} s time limit")
        grade = grade_log(
            testbed.instance,
            run.log_path,
            testbed.recipe.log_parser,
            "regression-check",
            patch,
            testbed.recipe.eval_type,
        )
        if run.recorded is not None and contradictions(
            run.recorded, grade.status_map, run.exit_code
        ):
            raise CheckFailed("the wider run's log contradicts what pytest recorded")
        return dict(grade.status_map), log

    def key(self, instance: Instance, directives: Sequence[str]) -> str:
        head = [
            SCHEMA,
            instance.instance_id,
            instance.base_commit,
            instance.patch,
            instance.test_patch,
            instance.eval_script,
            list(directives),
        ]
        return run_key(head, self.testbeds.recipes.for_instance(instance), instance)

    async def _gold(
        self, instance: Instance, directives: Sequence[str]
    ) -> tuple[dict[str, str], bool]:
        """The gold patch's statuses over ``directives``, and whether they were cached."""
        path = self.cache_dir / f"{instance.instance_id}-{self.key(instance, directives)}.json"
        if path.exists():
            return json.loads(path.read_text())["statuses"], True
        async with file_lock(self.cache_dir / ".locks" / f"{path.stem}.lock"):
            if path.exists():
                return json.loads(path.read_text())["statuses"], True
            async with self.testbeds.open("regression-gold", instance) as testbed:
                statuses, log = await self._statuses(testbed, instance.patch, directives)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.with_suffix(".log").write_text(log)
            path.parent.mkdir(parents=True, exist_ok=True)
            record = {"directives": list(directives), "statuses": statuses}
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(record, indent=1))
            tmp.replace(path)
            return statuses, False
