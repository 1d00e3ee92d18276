"""The order rows start in when many run at once: slowest first.

With N slots, a run ends when its last row does; a slow row started last stretches the run
by its whole length (longest-processing-time-first scheduling bounds that tail). The
figures are per repository, measured (data/row_seconds.json); within a repository, and for
repositories without a figure (the median), the dataset's order is kept.
"""

from __future__ import annotations

import heapq
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


def balanced(
    instances: Sequence[Instance],
    groups: int,
    seconds: dict[str, float] | None = None,
    max_size: int | None = None,
) -> list[list[Instance]]:
    """``instances`` in groups of about equal expected time, the slowest group first: each
    instance, slowest first, joins the group with the least so far that is not full
    (longest-processing-time first; within 4/3 of the best split). At most ``groups``
    groups, or more where ``max_size`` asks for them."""
    figures = expected_seconds() if seconds is None else seconds
    default = statistics.median(figures.values()) if figures else 1.0
    count = max(1, min(groups, len(instances)))
    if max_size:
        count = max(count, -(-len(instances) // max_size))
    loads = [(0.0, n) for n in range(count)]  # a heap of (expected seconds, group)
    members: list[list[Instance]] = [[] for _ in range(count)]
    total: dict[int, float] = {}
    for inst in slowest_first(instances, figures):
        load, n = heapq.heappop(loads)
        members[n].append(inst)
        load += figures.get(inst.repo, default)
        if max_size and len(members[n]) >= max_size:
            total[n] = load  # full: out of the heap
        else:
            heapq.heappush(loads, (load, n))
    total.update({n: load for load, n in loads})
    order = sorted(range(count), key=lambda n: -total[n])
    return [members[n] for n in order if members[n]]
