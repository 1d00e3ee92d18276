"""95% intervals for the rates a run reports.

A resolved rate from 500 rows is an estimate: runs of one agent swing by 2-6 points on
Verified. Every rate gets Wilson's score interval (sensible at 0% and 100%, unlike the
normal one). The headline (resolved) also allows for rows not being independent: rows of
one repository share code, tests and difficulty, so its interval is the wider of Wilson's
and the repository-clustered one (Miller 2024, "Adding Error Bars to Evals", arXiv
2411.00640: a clustered standard error, here with the usual small-sample factor
C / (C - 1) for C repositories).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for ``k`` successes in ``n`` trials; (0, 1) when n = 0."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def clustered(clusters: Mapping[str, tuple[int, int]], z: float = Z95) -> tuple[float, float]:
    """The normal interval of the overall rate with a clustered standard error, from
    (successes, rows) per cluster; (0, 1) with fewer than two clusters (nothing to
    estimate the between-cluster spread from)."""
    n = sum(rows for _, rows in clusters.values())
    if n <= 0 or len(clusters) < 2:
        return 0.0, 1.0
    k = sum(hits for hits, _ in clusters.values())
    p = k / n
    c = len(clusters)
    spread = sum((hits - rows * p) ** 2 for hits, rows in clusters.values())
    se = math.sqrt(c / (c - 1) * spread) / n
    return max(0.0, p - z * se), min(1.0, p + z * se)


# Fewer repositories than this, and a clustered standard error says little: it is biased
# low with few clusters (Cameron & Miller 2015, "A Practitioner's Guide to Cluster-Robust
# Inference"), and its normal interval runs past 0 or 1, to be clipped. The headline is
# then Wilson's alone. SWE-bench Verified has 12 repositories; a run of a few has not.
MIN_CLUSTERS = 10


def headline(clusters: Mapping[str, tuple[int, int]]) -> tuple[float, float]:
    """The resolved rate's interval: the wider of Wilson's and the clustered one, where
    the rows span at least MIN_CLUSTERS repositories; else Wilson's."""
    k = sum(hits for hits, _ in clusters.values())
    n = sum(rows for _, rows in clusters.values())
    low, high = wilson(k, n)
    if len(clusters) >= MIN_CLUSTERS:
        c_low, c_high = clustered(clusters)
        low, high = min(low, c_low), max(high, c_high)
    return low, high


def headline_method(clusters: Mapping[str, tuple[int, int]]) -> str:
    """What ``headline`` computed for these clusters, in words (shown beside it)."""
    if len(clusters) >= MIN_CLUSTERS:
        return (
            "the wider of Wilson's score interval and the normal interval clustered by "
            f"repository ({len(clusters)} repositories)"
        )
    return (
        f"Wilson's score interval (rows of {len(clusters)} repositories: too few to "
        f"cluster by; {MIN_CLUSTERS} at least)"
    )


WILSON = "Wilson's score interval"


def as_text(interval: Sequence[float]) -> str:
    """An interval in percent, as the console and the report show it: [8.1-16.9]."""
    return f"[{interval[0] * 100:.1f}-{interval[1] * 100:.1f}]"
