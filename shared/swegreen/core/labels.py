"""Pinned labels: what each Verified row is graded against, so that a run against other
labels says so.

The hub's SWE-bench Verified has been relabelled after release (2026-08-10: the
PASS_TO_PASS of astropy-7606 and django-10097, the eval scripts of astropy-8707 and
-8872; docs/fidelity.md). Two runs months apart could be graded against different labels
while both record only their dataset's digest. ``data/verified_labels.json`` pins one
labelling (a digest of each row's labels, not the rows); every run compares its rows with
it and records, and prints, the rows whose labels differ.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources

from swegreen.core.dataset import Instance

LABELS_FILE = "verified_labels.json"


def label_digest(instance: Instance) -> str:
    """What grading reads from a row beyond its id: F2P, P2P, the test patch, the row's
    own eval script (newer revisions) and its version (which picks the recipe)."""
    record = [
        instance.version,
        sorted(instance.FAIL_TO_PASS),
        sorted(instance.PASS_TO_PASS),
        hashlib.sha256(instance.test_patch.encode()).hexdigest(),
        hashlib.sha256((instance.eval_script or "").encode()).hexdigest(),
    ]
    return hashlib.sha256(json.dumps(record, separators=(",", ":")).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Pinned:
    """One labelling of Verified: its name, where it came from, a digest per row."""

    name: str
    source: str
    labels: dict[str, str]


@cache
def pinned() -> Pinned:
    data = json.loads((resources.files("swegreen") / "data" / LABELS_FILE).read_text())
    return Pinned(data["name"], data["source"], dict(data["labels"]))


@dataclass(frozen=True)
class LabelCheck:
    """How a run's rows compare with the pinned labels."""

    pinned: str
    checked: int  # rows the pin knows
    differ: tuple[str, ...]  # of those, the rows whose labels are not the pinned ones

    def provenance(self) -> dict[str, object]:
        return {"pinned": self.pinned, "rows_checked": self.checked, "differ": list(self.differ)}

    def warning(self) -> str | None:
        if not self.differ:
            return None
        shown = ", ".join(self.differ[:8]) + (" ..." if len(self.differ) > 8 else "")
        return (
            f"the labels (F2P/P2P, test patch, eval script) of {len(self.differ)} row(s) "
            f"differ from the pinned ones ({self.pinned}): {shown}. Their verdicts are not "
            "comparable with runs on the pinned labels; the run records which rows "
            "(provenance.labels.differ; docs/fidelity.md)"
        )


def check_labels(instances: Iterable[Instance], pin: Pinned | None = None) -> LabelCheck | None:
    """Compare ``instances`` with the pinned labels; None when the pin knows none of them
    (another dataset: the sample, a user's own)."""
    pin = pin or pinned()
    known = [i for i in instances if i.instance_id in pin.labels]
    if not known:
        return None
    differ = tuple(
        sorted(i.instance_id for i in known if label_digest(i) != pin.labels[i.instance_id])
    )
    return LabelCheck(pin.name, len(known), differ)


def pin_file(instances: Iterable[Instance], name: str, source: str) -> str:
    """The contents of ``data/verified_labels.json`` for ``instances``
    (scripts/pin_labels.py)."""
    rows = sorted(instances, key=lambda i: i.instance_id)
    labels = {i.instance_id: label_digest(i) for i in rows}
    return json.dumps({"name": name, "source": source, "labels": labels}, indent=1) + "\n"
