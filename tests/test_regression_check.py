"""--regression-check: a resolution whose patch breaks a test the row's lists do not name
is flagged (never re-graded); an honest one is not; the gold side is run once per row."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from swegreen.core.classify import Status
from swegreen.core.metrics import RunMetrics
from swegreen.core.related_tests import directives_for, is_test_path, related_test_files
from swegreen.evaluation.engine import LocalSettings, build_engine
from swegreen.reports.console import leaderboard_table
from swegreen.sample import SampleBenchmark

from .conftest import RunSample, sample_config

ROW = "sample__calculator-1"  # F2P/P2P: tests/test_stats.py only


def candidates(sample: SampleBenchmark, tmp_path: Path) -> Path:
    """Predictions: gold plus a change to calculator/ops.py that breaks tests/test_ops.py
    (which the row's lists never name), and the honest crafted fix."""
    row = next(
        json.loads(line)
        for line in sample.dataset.read_text().splitlines()
        if json.loads(line)["instance_id"] == ROW
    )
    breaking = row["patch"] + (
        "diff --git a/calculator/ops.py b/calculator/ops.py\n"
        "--- a/calculator/ops.py\n"
        "+++ b/calculator/ops.py\n"
        "@@ -8,4 +8,4 @@ def clamp(value, lo, hi):\n"
        " \n"
        " def percent(part, whole):\n"
        '     """``part`` as a percentage of ``whole``."""\n'
        "-    return 100.0 * part / whole\n"
        "+    return part / whole\n"
    )
    path = tmp_path / "predictions.jsonl"
    path.write_text(json.dumps({"instance_id": ROW, "model_patch": breaking}) + "\n")
    return path


def test_a_resolution_that_breaks_an_unlisted_test_is_flagged(
    sample: SampleBenchmark,
    settings: LocalSettings,
    host_env: dict[str, str],
    run_sample: RunSample,
    tmp_path: Path,
) -> None:
    config = {"instance_ids": (ROW,), "regression_check": True}
    engine = build_engine(settings, sample_config(sample, **config), host_env)
    try:
        (row,) = run_sample(
            str(candidates(sample, tmp_path)), run_id="rc-bad", engine=engine, **config
        ).results
        (gold,) = run_sample("gold", run_id="rc-gold", engine=engine, **config).results
        (again,) = run_sample(
            str(candidates(sample, tmp_path)), run_id="rc-again", engine=engine, **config
        ).results
    finally:
        engine.close()
    # the official verdict stands: the row's own tests all pass
    assert (row.status, row.f2p_passed, row.p2p_passed) == (Status.RESOLVED, 2, 4)
    check = row.regression_check
    assert check is not None and check["ran"], check
    assert check["test_files"] == ["tests/test_stats.py", "tests/test_ops.py"]
    assert check["regressions"] == ["tests/test_ops.py::test_percent"]
    assert check["regression_count"] == 1 and check["tests_gold_passes"] == 9
    assert row.resolved_with_regressions
    # gold against itself touches stats.py only: its own tests, nothing flagged
    assert gold.regression_check is not None
    assert gold.regression_check["test_files"] == ["tests/test_stats.py"]
    assert gold.regression_check["regressions"] == []
    assert not gold.resolved_with_regressions
    # the same selection again: gold's side comes from the cache, the flag is the same
    assert again.regression_check is not None
    assert check["gold_cached"] is False and again.regression_check["gold_cached"] is True
    assert again.regression_check["regressions"] == check["regressions"]
    wider = settings.output_dir / "rc-bad" / "instances" / ROW / "regression_output.txt"
    assert "FAILED tests/test_ops.py::test_percent" in wider.read_text()
    page = (settings.output_dir / "rc-bad" / "report.html").read_text()
    assert 'href="instances/sample__calculator-1/regression_output.txt">wider log' in page
    assert "resolved with regressions: 1 test(s) gold passes fail" in page
    assert "tests/test_ops.py::test_percent" in page
    metrics = RunMetrics.from_results([row, gold])
    console = Console(record=True, width=100)
    console.print(leaderboard_table(metrics, "t"))
    assert "resolved with regressions │ 1 of 2 checked" in console.export_text()
    assert (metrics.regression_checked, metrics.resolved_with_regressions) == (2, 1)
    published = metrics.result_row("m")
    assert published["resolved_with_regressions"] == 1
    assert RunMetrics.from_result_row(published) == metrics


def test_unresolved_rows_and_runs_without_the_flag_run_no_check(
    run_sample: RunSample,
) -> None:
    (empty,) = run_sample(
        "empty", run_id="rc-empty", instance_ids=(ROW,), regression_check=True
    ).results
    assert empty.status is Status.NO_OP and empty.regression_check is None
    (plain,) = run_sample("gold", run_id="rc-off", instance_ids=(ROW,)).results
    assert plain.status is Status.RESOLVED and plain.regression_check is None


def test_related_test_files_are_found_the_way_projects_name_them() -> None:
    tracked = [
        "sympy/core/tests/test_expr.py",
        "sympy/polys/tests/test_expr.py",  # same name, another package
        "sympy/core/tests/test_basic.py",
        "testing/test_pathlib.py",
        "tests/utils_tests/test_text.py",
        "sklearn/linear_model/tests/test_base.py",
        "sklearn/tests/test_base.py",
        "lib/matplotlib/tests/test_axes.py",
        "tests/auth_tests/test_management.py",
        "tests/contenttypes_tests/test_management.py",
        "astropy/cosmology/tests/test_core.py",
        "astropy/io/fits/tests/test_core.py",
        "docs/conf.py",
    ]
    changed = [
        "sympy/core/expr.py",
        "src/_pytest/pathlib.py",  # one test file of that name, wherever it is
        "django/utils/text.py",
        "sklearn/linear_model/_base.py",
        "lib/matplotlib/axes/__init__.py",
        "django/contrib/contenttypes/management/__init__.py",
        "astropy/timeseries/core.py",  # two test_core.py, neither its package's: none
        "django/db/models/query.py",  # no test file names it: nothing added
        "sympy/core/tests/test_basic.py",  # a test file itself is no module
        "README.rst",
    ]
    found = related_test_files(changed, tracked)
    assert found == [
        "sympy/core/tests/test_expr.py",
        "testing/test_pathlib.py",
        "tests/utils_tests/test_text.py",
        "sklearn/linear_model/tests/test_base.py",
        "lib/matplotlib/tests/test_axes.py",
        "tests/contenttypes_tests/test_management.py",
    ]
    assert related_test_files(changed, tracked, limit=2) == found[:2]
    assert is_test_path("tests/foo/helpers.py") and not is_test_path("sympy/core/expr.py")
    assert directives_for(["tests/utils_tests/test_text.py", "a.txt"], "django") == [
        "utils_tests.test_text"
    ]
