"""Comparing runs: the exact McNemar test, the paired difference's interval, repeated-run
statistics, checked on constructed runs; the command on runs the engine stored."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from swegreen.core.compare import compare, mcnemar_exact, paired_interval, pass_at, repeated

from .test_cli import cli


def test_mcnemar_exact_matches_the_binomial_tail() -> None:
    # 10 flips split 9:1: 2 * P(X <= 1), X ~ Bin(10, 1/2) = 2 * 11/1024
    assert mcnemar_exact(9, 1) == pytest.approx(22 / 1024)
    assert mcnemar_exact(1, 9) == mcnemar_exact(9, 1)
    assert mcnemar_exact(5, 5) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(6, 0) == pytest.approx(2 / 64)  # 0.03125
    assert mcnemar_exact(20, 0) < 1e-5


def _multinomial(n: int, probabilities: tuple[float, ...], counts: tuple[int, ...]) -> float:
    ways = math.factorial(n)
    for c in counts:
        ways //= math.factorial(c)
    return ways * math.prod(p**c for p, c in zip(probabilities, counts, strict=True))


def test_the_paired_interval_keeps_its_coverage_on_eight_rows() -> None:
    """Exact coverage (every outcome of 8 rows enumerated) of the true difference, over
    settings from all-discordant to one-way flips: close to 95% on average, never far
    below (a bootstrap percentile interval's mean here is 83%, its worst 53%)."""
    n = 8
    settings = [
        (0.3, 0.1, 0.1), (0.1, 0.05, 0.3), (0.4, 0.2, 0.05), (0.0, 0.0, 0.5),
        (0.2, 0.3, 0.3), (0.6, 0.1, 0.0), (0.05, 0.02, 0.02), (0.25, 0.05, 0.1),
    ]  # fmt: skip
    covered = []
    for both, gained, lost in settings:
        probabilities = (both, gained, lost, 1 - both - gained - lost)
        total = 0.0
        for e in range(n + 1):
            for g in range(n + 1 - e):
                for lo in range(n + 1 - e - g):
                    low, high = paired_interval(e, g, lo, n - e - g - lo)
                    if low - 1e-12 <= gained - lost <= high + 1e-12:
                        total += _multinomial(n, probabilities, (e, g, lo, n - e - g - lo))
        covered.append(total)
    assert sum(covered) / len(covered) >= 0.91 and min(covered) >= 0.77, covered


def test_the_paired_interval_never_collapses_and_holds_its_estimate() -> None:
    # 8 rows, all flipped one way (B lost every one): not [-100%, -100%]
    low, high = paired_interval(0, 0, 8, 0)
    assert low == -1.0 and high == pytest.approx(-0.5412, abs=1e-4)
    # nothing flipped on 100 rows: an interval around 0, not the point 0
    low, high = paired_interval(40, 0, 0, 60)
    assert low < 0 < high and high == pytest.approx(-low)
    # 500 rows, 40 gained, 20 lost: about the normal interval of the paired difference
    low, high = paired_interval(400, 40, 20, 40)
    sd = math.sqrt(60 / 500 - (20 / 500) ** 2) / math.sqrt(500)
    assert low == pytest.approx(0.04 - 1.96 * sd, abs=0.004)
    assert high == pytest.approx(0.04 + 1.96 * sd, abs=0.004)


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
    # resolved by 3, 1, 0 and 2 of the 3 runs: pass@k over every k, without bias
    assert r.pass_at_k == pytest.approx({1: 0.5, 2: (1 + 2 / 3 + 0 + 1) / 4, 3: 0.75})
    assert r.pass_all_k == pytest.approx({1: 0.5, 2: (1 + 0 + 0 + 1 / 3) / 4, 3: 0.25})
    assert pass_at(1, 5, 2) == pytest.approx(0.4) and pass_at(4, 5, 2) == 1.0


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
    assert "(Newcombe's hybrid score interval for paired proportions)" in text
    # gold against empty are two participants: no pass@k as if they were one
    assert "pass@2" not in text and "these runs' rows name different ones: empty, gold" in text
    # the same, as a section of the second run's report.html, kept when it is rendered again
    out = cli("compare", "e", "g", "--html", cwd=tmp_path, cache=session_cache)
    page = (tmp_path / "results" / "g" / "report.html").read_text()
    assert "<h2>Against run e</h2>" in page and "<b>+100.0%</b>" in page
    assert "McNemar exact p = 0.25" in page and "sample__calculator-1" in page
    again = cli("report", "--run-id", "g", "--html", cwd=tmp_path, cache=session_cache)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "<h2>Against run e</h2>" in (tmp_path / "results" / "g" / "report.html").read_text()
    # a third run: each later run against the first; two runs of one participant: pass@k
    third = cli(
        "run", "--sample", "--patches", "gold", "--max-rows", "3", "--run-id", "g2",
        "--no-progress", cwd=tmp_path, cache=session_cache,
    )  # fmt: skip
    assert third.returncode == 0, third.stderr
    text = " ".join(
        cli("compare", "e", "g", "g2", cwd=tmp_path, cache=session_cache).stdout.split()
    )
    assert "g against e on the 3 rows" in text and "g2 against e on the 3 rows" in text
    same = " ".join(cli("compare", "g", "g2", cwd=tmp_path, cache=session_cache).stdout.split())
    assert "as 2 runs of one participant (gold)" in same
    assert "pass@1 100.0%, pass@2 100.0%; pass^1 100.0%, pass^2 100.0%" in same
    missing = cli("compare", "e", "nope", cwd=tmp_path, cache=session_cache)
    assert missing.returncode == 2 and "no run 'nope'" in missing.stdout
