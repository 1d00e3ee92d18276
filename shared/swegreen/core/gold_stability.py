"""The validated denominator: rows whose gold patch resolves here every time it is graded.

A row whose gold patch does not resolve (a test that needs the network, an environment
this machine cannot build, a flaky test) cannot be resolved by any participant either;
its share of a rate is the harness's, not the participant's. ``data/gold_stability.json``
lists those rows with the evidence (each validation run's verdict; written by
scripts/gold_stability.py), and every result row carries the resolved rate over all rows
and over the validated ones (core/metrics.py).
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

STABILITY_FILE = "gold_stability.json"


@cache
def _packaged() -> dict:
    return json.loads((resources.files("swegreen") / "data" / STABILITY_FILE).read_text())


def not_validated() -> frozenset[str]:
    """The instance ids the packaged evidence does not validate."""
    return frozenset(_packaged()["rows"])


def source() -> str:
    """Where a run's validated rate comes from, said in its results: the packaged list and
    its evidence runs, never other runs in the same store."""
    data = _packaged()
    runs = ", ".join(str(e["name"]) for e in data.get("evidence", []))
    return (
        f"swegreen/data/{STABILITY_FILE} ({len(data['rows'])} rows not validated; evidence: {runs})"
    )
