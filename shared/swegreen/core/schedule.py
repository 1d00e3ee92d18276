"""The order rows start in when many run at once: slowest first.

With N slots, a run ends when its last row does; a slow row started last stretches the run
by its whole length (longest-processing-time-first scheduling bounds that tail). The
figures are per repository, measured (data/row_seconds.json); within a repository, and for
repositories without a figure (the median), the dataset's order is kept.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from importlib import resources

from swegreen.core.dataset import Instance


def expected_seconds() -> dict[str, float]:
    entry = resources.files("swegreen") / "data" / "row_seconds.json"
    data = json.loads(entry.read_text())
    return {k: float(v) for k, v in data.items() if not k.startswith("_")}


def slowest_first(
    instances: Sequence[Instance], seconds: dict[str, float] | None = None
) -> list[Instance]:
    figures = expected_seconds() if seconds is None else seconds
    default = statistics.median(figures.values()) if figures else 0.0
    return sorted(instances, key=lambda inst: -figures.get(inst.repo, default))
