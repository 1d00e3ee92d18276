"""Comparing runs on the rows they share: is a difference more than noise?

Two runs of one agent on Verified differ by 2-6 points; a leaderboard gap of that size
says little unless it is tested on the same rows. For two runs: the paired difference in
resolved rate with a paired bootstrap interval, the exact McNemar test on the rows that
flipped, and the flipped rows themselves, per repository. For several runs of one
participant: mean resolved rate and its spread, pass@k (resolved in at least one of the
k runs) and pass^k (in all of them).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

BOOTSTRAP_ROUNDS = 10_000


def mcnemar_exact(gained: int, lost: int) -> float:
    """Two-sided exact McNemar p-value: under no difference each flipped row is as likely
    to flip either way (binomial, p = 1/2)."""
    n = gained + lost
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(gained, lost) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_bootstrap(
    gained: int, lost: int, rows: int, rounds: int = BOOTSTRAP_ROUNDS, seed: int = 0
) -> tuple[float, float]:
    """95% percentile interval of the paired difference (B - A) in resolved rate, rows
    resampled with replacement. A row's difference is +1, -1 or 0, so a resample is a
    multinomial draw of the three counts: the same distribution as resampling rows."""
    if rows == 0:
        return 0.0, 0.0
    import numpy as np  # here only: the Lambdas import this module's types, not numpy

    rng = np.random.default_rng(seed)
    shares = [gained / rows, lost / rows, 1 - (gained + lost) / rows]
    draws = rng.multinomial(rows, shares, size=rounds)
    diffs = (draws[:, 0] - draws[:, 1]) / rows
    low, high = np.percentile(diffs, [2.5, 97.5])
    return float(low), float(high)


@dataclass(frozen=True)
class RepoFlips:
    rows: int
    gained: list[str]
    lost: list[str]


@dataclass(frozen=True)
class Comparison:
    """Run B against run A on the rows both ran."""

    a: str
    b: str
    rows: int
    a_resolved: int
    b_resolved: int
    gained: list[str]  # resolved by B, not by A
    lost: list[str]  # resolved by A, not by B
    difference: float  # B's resolved rate minus A's
    interval: tuple[float, float]
    mcnemar_p: float
    by_repo: dict[str, RepoFlips] = field(default_factory=dict)
    only_a: int = 0  # rows one run has and the other not (left out)
    only_b: int = 0


def compare(
    a: str,
    b: str,
    resolved_a: Mapping[str, bool],
    resolved_b: Mapping[str, bool],
    repo_of: Mapping[str, str],
    rounds: int = BOOTSTRAP_ROUNDS,
) -> Comparison:
    """``resolved_*``: per instance id, whether the run resolved it (its rows)."""
    shared = sorted(set(resolved_a) & set(resolved_b))
    gained = [i for i in shared if resolved_b[i] and not resolved_a[i]]
    lost = [i for i in shared if resolved_a[i] and not resolved_b[i]]
    by_repo: dict[str, RepoFlips] = {}
    for repo in sorted({repo_of.get(i, "?") for i in shared}):
        mine = {i for i in shared if repo_of.get(i, "?") == repo}
        by_repo[repo] = RepoFlips(
            len(mine), [i for i in gained if i in mine], [i for i in lost if i in mine]
        )
    n = len(shared)
    return Comparison(
        a=a,
        b=b,
        rows=n,
        a_resolved=sum(resolved_a[i] for i in shared),
        b_resolved=sum(resolved_b[i] for i in shared),
        gained=gained,
        lost=lost,
        difference=(len(gained) - len(lost)) / n if n else 0.0,
        interval=paired_bootstrap(len(gained), len(lost), n, rounds),
        mcnemar_p=mcnemar_exact(len(gained), len(lost)),
        by_repo=by_repo,
        only_a=len(set(resolved_a) - set(resolved_b)),
        only_b=len(set(resolved_b) - set(resolved_a)),
    )


@dataclass(frozen=True)
class Repeated:
    """Several runs of one participant on the rows all of them ran."""

    runs: list[str]
    rows: int
    rates: list[float]
    mean: float
    stdev: float
    pass_at_k: float  # resolved in at least one run
    pass_all_k: float  # resolved in every run (pass^k)


def repeated(runs: Sequence[tuple[str, Mapping[str, bool]]]) -> Repeated:
    shared = sorted(set.intersection(*(set(r) for _, r in runs))) if runs else []
    n = len(shared)
    rates = [sum(r[i] for i in shared) / n if n else 0.0 for _, r in runs]
    any_ = sum(any(r[i] for _, r in runs) for i in shared)
    all_ = sum(all(r[i] for _, r in runs) for i in shared)
    return Repeated(
        runs=[name for name, _ in runs],
        rows=n,
        rates=rates,
        mean=statistics.fmean(rates) if rates else 0.0,
        stdev=statistics.stdev(rates) if len(rates) > 1 else 0.0,
        pass_at_k=any_ / n if n else 0.0,
        pass_all_k=all_ / n if n else 0.0,
    )
