"""What a run publishes: the result row (leaderboard + per-instance rows + provenance).

Free of the grader's imports, so that the AWS aggregation Lambda publishes exactly what a
local run does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from swegreen import __version__
from swegreen.config import EvalConfig
from swegreen.dataset import Dataset
from swegreen.metrics import RunMetrics
from swegreen.ports import RunRecord
from swegreen.results import InstanceResult, utcnow

PUBLIC_FIELDS = frozenset(
    {
        "instance_id",
        "repo",
        "status",
        "reason",
        "error_kind",
        "patch_applied",
        "tests_ran",
        "f2p_passed",
        "f2p_total",
        "p2p_passed",
        "p2p_total",
        "patch_bytes",
        "attempts",
        "durations",
        "test_command_seconds",
        "participant_usage",
        "diagnosis",
        "base_validation",
        "model_name_or_path",
    }
)


def base_provenance(dataset: Dataset, config: EvalConfig, grader: str) -> dict[str, Any]:
    """What a published run says of its making; no host paths (see ``Dataset.provenance``
    and ``EvalConfig.public``)."""
    return {
        **dataset.provenance(),
        "grader": grader,
        "green_agent": f"swegreen {__version__}",
        "config": config.public(),
        "started_at": utcnow(),
    }


def public_row(result: InstanceResult) -> dict[str, Any]:
    """The per-instance row published with the leaderboard (details stay in artifacts)."""
    return result.model_dump(mode="json", include=set(PUBLIC_FIELDS))


def result_row(
    record: RunRecord,
    metrics: RunMetrics,
    results: Sequence[InstanceResult],
    model: str,
    participants: dict[str, str],
) -> dict[str, Any]:
    row = metrics.result_row(model)
    if len(participants) == 1:
        row["participant"] = next(iter(participants))
    row["run_id"] = record.run_id
    row["instances"] = [public_row(r) for r in results]
    row["provenance"] = record.provenance
    return row
