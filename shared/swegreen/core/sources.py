"""Patch sources that need no participant: a predictions file, the gold patch, no patch.

A predictions file is SWE-bench's format: JSONL, or JSON holding a list or a dict keyed
by instance id (SWE-agent's), each entry with ``instance_id``, ``model_patch`` (a diff,
or null) and optionally ``model_name_or_path``. A file the green agent writes for the
pipeline (the exchange done beside the participants, the grading on AWS) also carries each
row's account of its exchange under ``swegreen`` (``exchange_entry``): why there is no
patch, how long the participant took, what it used; other tools' files need none of it.
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
    # the green agent's account of the exchange (EXCHANGE_FIELDS), when it wrote the file
    exchange: dict[str, Any] | None = None

    def patch_result(self) -> PatchResult:
        """The row's patch as its exchange ended, or the file's patch alone."""
        ex = self.exchange or {}
        return PatchResult(
            self.model_patch,
            self.model_name_or_path,
            failure=ex.get("failure"),
            detail=ex.get("detail", ""),
            duration=ex.get("duration", 0.0),
            usage=ex.get("usage"),
            interaction=ex.get("interaction"),
            conversation=ex.get("conversation"),
        )


# What a predictions entry's ``swegreen`` object may hold, and the reasons it may give
# for a missing patch: the participant's side only. A file cannot claim that the evaluator
# failed, nor a verdict.
EXCHANGE_FIELDS = frozenset(
    {"failure", "detail", "duration", "usage", "interaction", "conversation"}
)
EXCHANGE_FAILURES = frozenset(
    {
        Reason.NO_PATCH,
        Reason.PARTICIPANT_ERROR,
        Reason.PARTICIPANT_TIMEOUT,
        Reason.BUDGET_EXHAUSTED,
        Reason.PARTICIPANT_PROTOCOL,
    }
)


def exchange_entry(instance_id: str, result: PatchResult) -> dict[str, Any]:
    """A predictions entry for a row whose patch came from an A2A exchange: SWE-bench's
    fields, and the exchange's account under ``swegreen``."""
    exchange: dict[str, Any] = {"duration": round(result.duration, 3)}
    if result.failure is not None:
        exchange["failure"] = str(result.failure)
    for name in ("detail", "usage", "interaction", "conversation"):
        value = getattr(result, name)
        if value:
            exchange[name] = value
    return {
        "instance_id": instance_id,
        "model_name_or_path": result.model_name_or_path,
        "model_patch": result.patch,
        "swegreen": exchange,
    }


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
        out[iid] = Prediction(iid, patch, model, where, _exchange(entry.get("swegreen"), where))
    if not out:
        raise PredictionsError("the predictions file holds no predictions")
    return out


def _exchange(value: Any, where: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise PredictionsError(f"{where}: 'swegreen' must be an object (the exchange's account)")
    unknown = sorted(set(value) - EXCHANGE_FIELDS)
    if unknown:
        raise PredictionsError(
            f"{where}: 'swegreen' holds {', '.join(unknown)}; it may hold "
            f"{', '.join(sorted(EXCHANGE_FIELDS))}"
        )
    failure = value.get("failure")
    if failure is not None and failure not in EXCHANGE_FAILURES:
        raise PredictionsError(
            f"{where}: 'swegreen.failure' {failure!r} is not a participant's reason; "
            f"one of {', '.join(sorted(EXCHANGE_FAILURES))}"
        )
    duration = value.get("duration", 0.0)
    if not isinstance(duration, int | float) or isinstance(duration, bool) or duration < 0:
        raise PredictionsError(f"{where}: 'swegreen.duration' must be seconds (>= 0)")
    if not isinstance(value.get("detail", ""), str):
        raise PredictionsError(f"{where}: 'swegreen.detail' must be a string")
    for name in ("usage", "interaction", "conversation"):
        if value.get(name) is not None and not isinstance(value[name], Mapping):
            raise PredictionsError(f"{where}: 'swegreen.{name}' must be an object")
    return dict(value)


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
        return pred.patch_result()


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
