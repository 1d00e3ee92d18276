"""Patch sources that need no participant: a predictions file, the gold patch, no patch.

A predictions file is SWE-bench's format: JSONL, or JSON holding a list or a dict keyed
by instance id (SWE-agent's), each entry with ``instance_id``, ``model_patch`` (a diff,
or null) and optionally ``model_name_or_path``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swegreen.core.classify import Reason
from swegreen.core.dataset import Instance
from swegreen.core.errors import PredictionsError
from swegreen.core.ids import check_id
from swegreen.core.ports import PatchResult


@dataclass(frozen=True)
class Prediction:
    instance_id: str
    model_patch: str | None
    model_name_or_path: str
    where: str  # file and line, for error messages


def load_predictions(path: Path) -> dict[str, Prediction]:
    """Read and validate a predictions file; every problem names the file and the line."""
    if not path.exists():
        raise PredictionsError(f"predictions file {path} does not exist")
    if path.suffix not in (".jsonl", ".json"):
        raise PredictionsError(f"{path}: predictions must be a .jsonl or .json file")
    return parse_predictions(path.read_text(encoding="utf-8", errors="surrogateescape"), str(path))


def parse_predictions(text: str, name: str) -> dict[str, Prediction]:
    """A predictions file's content (JSON if ``name`` ends in .json, else JSONL)."""
    entries: list[tuple[str, Any]] = []
    if not name.endswith(".json"):
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                entries.append((f"{name}:{lineno}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise PredictionsError(
                    f"{name}:{lineno}: not valid JSON ({exc.msg}); each line must be one "
                    "prediction object"
                ) from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PredictionsError(f"{name}:{exc.lineno}: not valid JSON ({exc.msg})") from None
        if isinstance(data, dict):
            data = list(data.values())  # SWE-agent: {instance_id: prediction}
        if not isinstance(data, list):
            raise PredictionsError(
                f"{name}: expected a list of predictions or a dict keyed by instance id"
            )
        entries = [(f"{name} entry {i + 1}", e) for i, e in enumerate(data)]
    return _validate(entries, default_model=Path(name).stem)


def _validate(entries: Iterable[tuple[str, Any]], default_model: str) -> dict[str, Prediction]:
    out: dict[str, Prediction] = {}
    for where, entry in entries:
        if not isinstance(entry, Mapping):
            raise PredictionsError(f"{where}: a prediction must be a JSON object")
        iid = entry.get("instance_id")
        if not isinstance(iid, str) or not iid:
            raise PredictionsError(f"{where}: missing or empty 'instance_id'")
        try:
            check_id(iid, "instance id")
        except ValueError as exc:
            raise PredictionsError(f"{where}: {exc}") from None
        if "model_patch" not in entry:
            raise PredictionsError(f"{where}: {iid} has no 'model_patch' (use null for no patch)")
        patch = entry["model_patch"]
        if patch is not None and not isinstance(patch, str):
            raise PredictionsError(
                f"{where}: {iid}'s model_patch must be a string (a diff) or null"
            )
        model = entry.get("model_name_or_path") or default_model
        if not isinstance(model, str):
            raise PredictionsError(f"{where}: {iid}'s model_name_or_path must be a string")
        if iid in out:
            raise PredictionsError(
                f"{where}: a second prediction for {iid} (first at {out[iid].where})"
            )
        out[iid] = Prediction(iid, patch, model, where)
    if not out:
        raise PredictionsError("the predictions file holds no predictions")
    return out


class PredictionsSource:
    deterministic = True

    def __init__(self, path: Path) -> None:
        self.path = path
        self.predictions = load_predictions(path)
        self.name = f"predictions:{path.name}"

    def check_against(self, known_ids: Iterable[str]) -> None:
        """Predictions for instances the dataset does not have are an error, as upstream."""
        known = set(known_ids)
        unknown = sorted(set(self.predictions) - known)
        if unknown:
            shown = ", ".join(unknown[:5]) + (
                f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            )
            raise PredictionsError(
                f"{self.path}: predictions for instance ids not in the dataset: {shown}"
            )

    async def get_patch(self, instance: Instance) -> PatchResult:
        pred = self.predictions.get(instance.instance_id)
        if pred is None:
            return PatchResult(
                None,
                self.path.stem,
                failure=Reason.NO_PATCH,
                detail=f"{self.path.name} has no prediction for {instance.instance_id}",
            )
        return PatchResult(pred.model_patch, pred.model_name_or_path)


class GoldPatches:
    """The dataset's own fix: validates the whole chain (every row should resolve)."""

    name = "gold"
    deterministic = True

    async def get_patch(self, instance: Instance) -> PatchResult:
        return PatchResult(instance.patch, "gold")


class EmptyPatches:
    """No change at all: every row should be no_op."""

    name = "empty"
    deterministic = True

    async def get_patch(self, instance: Instance) -> PatchResult:
        return PatchResult("", "empty")


def source_for(spec: str) -> GoldPatches | EmptyPatches | PredictionsSource:
    """``gold``, ``empty`` or the path of a predictions file."""
    if spec == "gold":
        return GoldPatches()
    if spec == "empty":
        return EmptyPatches()
    return PredictionsSource(Path(spec))
