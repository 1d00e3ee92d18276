"""Comparing runs: the exact McNemar test, the paired bootstrap, repeated-run statistics,
checked on constructed runs; the command on runs the engine stored."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from swegreen.core.compare import compare, mcnemar_exact, paired_bootstrap, repeated

from .test_cli import cli


def test_mcnemar_exact_matches_the_binomial_tail() -> None:
    # 10 flips split 9:1: 2 * P(X <= 1), X ~ Bin(10, 1/2) = 2 * 11/1024
    assert mcnemar_exact(9, 1) == pytest.approx(22 / 1024)
    assert mcnemar_exact(1, 9) == mcnemar_exact(9, 1)
    assert mcnemar_exact(5, 5) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(6, 0) == pytest.approx(2 / 64)  # 0.03125
    assert mcnemar_exact(20, 0) < 1e-5


def test_the_paired_bootstrap_is_centred_on_the_difference_with_the_right_width() -> None:
    # 500 rows, 40 gained, 20 lost: difference +4 points; the normal approximation of the
    # paired difference's sd: sqrt((g + l)/n - ((g - l)/n)^2) / sqrt(n)
    low, high = paired_bootstrap(40, 20, 500, rounds=20_000)
    sd = math.sqrt(60 / 500 - (20 / 500) ** 2) / math.sqrt(500)
    assert low == pytest.approx(0.04 - 1.96 * sd, abs=0.004)
    assert high == pytest.approx(0.04 + 1.96 * sd, abs=0.004)
    assert paired_bootstrap(0, 0, 100) == (0.0, 0.0)  # nothing flipped: no difference
    assert paired_bootstrap(40, 20, 500) == paired_bootstrap(40, 20, 500)  # seeded


def test_a_comparison_lists_the_flips_per_repository_and_leaves_out_unshared_rows() -> None:
    a = {"x1": True, "x2": False, "y1": True, "y2": True, "z9": True}
    b = {"x1": True, "x2": True, "y1": False, "y2": True, "w1": False}
    repos = {"x1": "o/x", "x2": "o/x", "y1": "o/y", "y2": "o/y", "z9": "o/z", "w1": "o/w"}
    c = compare("A", "B", a, b, repos)
    assert c.rows == 4 and (c.only_a, c.only_b) == (1, 1)
    assert c.gained == ["x2"] and c.lost == ["y1"] and c.difference == 0.0
    assert c.by_repo["o/x"].gained == ["x2"] and c.by_repo["o/y"].lost == ["y1"]
    assert c.mcnemar_p == 1.0


def test_repeated_runs_give_mean_spread_pass_at_k_and_pass_all_k() -> None:
    runs = [
        ("r1", {"a": True, "b": False, "c": False, "d": True}),
        ("r2", {"a": True, "b": True, "c": False, "d": False}),
        ("r3", {"a": True, "b": False, "c": False, "d": True, "e": True}),
    ]
    r = repeated(runs)
    assert r.rows == 4  # e: one run only
    assert r.rates == [0.5, 0.5, 0.5] and r.mean == 0.5 and r.stdev == 0.0
    assert r.pass_at_k == 0.75  # a, b, d in some run
    assert r.pass_all_k == 0.25  # a in every run


def test_the_command_compares_stored_runs(tmp_path: Path, session_cache: Path) -> None:
    for run_id, patches in (("g", "gold"), ("e", "empty")):
        out = cli(
            "run", "--sample", "--patches", patches, "--max-rows", "3", "--run-id", run_id,
            "--no-progress", cwd=tmp_path, cache=session_cache,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
    out = cli("compare", "e", "g", cwd=tmp_path, cache=session_cache)
    assert out.returncode == 0, out.stdout + out.stderr
    text = " ".join(out.stdout.split())
    assert "g against e on the 3 rows both ran" in text
    assert "difference (g - e): +100.0%" in text
    assert "McNemar exact p = 0.25" in text  # 3 flips, all one way: 2 / 8
    assert "resolved by g only: 3" in text and "resolved by e only: 0" in text
    assert "pass@2 100.0%, pass^2 0.0%" in text
    # the same, as a section of the second run's report.html
    out = cli("compare", "e", "g", "--html", cwd=tmp_path, cache=session_cache)
    page = (tmp_path / "results" / "g" / "report.html").read_text()
    assert "<h2>Against run e</h2>" in page and "<b>+100.0%</b>" in page
    assert "McNemar exact p = 0.25" in page and "sample__calculator-1" in page
    missing = cli("compare", "e", "nope", cwd=tmp_path, cache=session_cache)
    assert missing.returncode == 2 and "no run 'nope'" in missing.stdout
