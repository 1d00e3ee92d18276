"""What a run publishes: the result row (leaderboard + per-instance rows + provenance).

Free of the grader's imports, so that the AWS aggregation Lambda publishes exactly what a
local run does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from swegreen import __version__
from swegreen.core.config import EvalConfig
from swegreen.core.dataset import Dataset, Instance
from swegreen.core.labels import check_labels
from swegreen.core.metrics import RunMetrics
from swegreen.core.ports import RunRecord
from swegreen.core.results import InstanceResult, utcnow

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
        "interaction",
        "conversation",
        "diagnosis",
        "base_validation",
        "model_name_or_path",
    }
)


def base_provenance(
    dataset: Dataset,
    config: EvalConfig,
    grader: str,
    instances: Sequence[Instance] | None = None,
) -> dict[str, Any]:
    """What a published run says of its making; no host paths (see ``Dataset.provenance``
    and ``EvalConfig.public``); and how its rows' labels compare with the pinned ones."""
    found = {
        **dataset.provenance(),
        "grader": grader,
        "green_agent": f"swegreen {__version__}",
        "config": config.public(),
        "started_at": utcnow(),
    }
    check = check_labels(dataset.instances if instances is None else instances)
    if check is not None:
        found["labels"] = check.provenance()
    return found


# How much of a row's detail travels with the published row (the whole stays in artifacts):
# enough to say why a participant failed where only the results file reaches its author.
PUBLIC_DETAIL_CHARS = 500


def public_row(result: InstanceResult) -> dict[str, Any]:
    """The per-instance row published with the leaderboard. Its ``detail`` is cut short;
    it was scrubbed of host secrets where it was made (evaluate.py)."""
    row = result.model_dump(mode="json", include=set(PUBLIC_FIELDS))
    detail = result.detail
    if len(detail) > PUBLIC_DETAIL_CHARS:
        detail = detail[: PUBLIC_DETAIL_CHARS - 20] + f" ... [{len(detail)} chars]"
    row["detail"] = detail
    return row


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


# A page of results stays well under API Gateway's 10 MB response.
PAGE_BYTES = 4 * 1024 * 1024


def pages(document: dict[str, Any], max_bytes: int = PAGE_BYTES) -> list[dict[str, Any]]:
    """``document`` (results.json: one result row) as pages of its instances, each a
    results.json of its own with ``page`` and ``pages`` added and at most ``max_bytes``
    of instances (one instance bigger than that is a page alone). Page 1 of a run that fits
    is the whole document, so a reader of one page reads what it always did."""
    (row,) = document["results"]
    chunks: list[list[dict[str, Any]]] = [[]]
    size = 0
    for instance in row["instances"]:
        n = len(json.dumps(instance)) + 2
        if chunks[-1] and size + n > max_bytes:
            chunks.append([])
            size = 0
        chunks[-1].append(instance)
        size += n
    return [
        {**document, "results": [{**row, "instances": chunk}], "page": i, "pages": len(chunks)}
        for i, chunk in enumerate(chunks, start=1)
    ]


def joined(pages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The results.json that ``pages`` (all of them, in order) were cut from."""
    first = {k: v for k, v in pages[0].items() if k not in ("page", "pages")}
    (row,) = first["results"]
    instances = [i for p in pages for i in p["results"][0]["instances"]]
    return {**first, "results": [{**row, "instances": instances}]}


# Rows whose prediction had no patch at all (upstream: ``model_patch`` empty or None).
NO_MODEL_PATCH = frozenset(
    {"empty_patch", "no_patch", "participant_error", "participant_timeout", "budget_exhausted"}
)


def run_report(instance_ids: Sequence[str], results: Sequence[InstanceResult]) -> dict[str, Any]:
    """The official harness's run-level report (``make_run_report``, schema 2) for the run's
    selection, so that tools written for upstream's ``<model>.<run id>.json`` read ours.

    Mapped as upstream decides: an empty patch (or none: a participant that failed) is not
    run; a row whose tests ran is
    completed (resolved or not); anything else that was submitted is an error, a patch that
    does not apply included (upstream writes no report for it); a selected instance
    without a row is incomplete. Infrastructure errors are its ``infra_failure_ids``.
    """
    by_id = {r.instance_id: r for r in results}
    empty = {i for i, r in by_id.items() if r.reason in NO_MODEL_PATCH}
    submitted = set(by_id)
    completed = {i for i, r in by_id.items() if r.tests_ran}
    resolved = {i for i in completed if by_id[i].status.value == "resolved"}
    errors = set(by_id) - completed - empty
    infra = {i for i in errors if by_id[i].is_infrastructure_error}
    incomplete = [i for i in instance_ids if i not in by_id]
    return {
        "total_instances": len(instance_ids),
        "submitted_instances": len(submitted),
        "completed_instances": len(completed),
        "resolved_instances": len(resolved),
        "unresolved_instances": len(completed - resolved),
        "infra_failure_instances": len(infra),
        "ambiguous_failure_instances": 0,
        "empty_patch_instances": len(empty),
        "error_instances": len(errors),
        "completed_ids": sorted(completed),
        "incomplete_ids": sorted(incomplete),
        "empty_patch_ids": sorted(empty),
        "submitted_ids": sorted(submitted),
        "resolved_ids": sorted(resolved),
        "unresolved_ids": sorted(completed - resolved),
        "infra_failure_ids": sorted(infra),
        "ambiguous_failure_ids": [],
        "failure_reasons": {i: by_id[i].reason for i in sorted(errors)},
        "error_ids": sorted(errors),
        "schema_version": 2,
    }
