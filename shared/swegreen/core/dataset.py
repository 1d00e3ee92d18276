"""Dataset rows: loading SWE-bench-format rows and selecting the ones a run evaluates.

Rows come from the Hugging Face hub (through ``datasets``) or from a local .jsonl, .json
or .parquet file, with F2P/P2P as JSON strings (as on the hub) or lists. Selection is
deterministic so that shards of one run, started on different machines, partition the
same ordered list.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import mmap
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from swegreen.core.errors import DatasetError
from swegreen.core.ids import check_id

DEFAULT_DATASET = "SWE-bench/SWE-bench_Verified"
LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")
REQUIRED_COLUMNS = (
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "version",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
)


class Instance(BaseModel):
    """One SWE-bench task instance (a dataset row)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    instance_id: str
    repo: str
    base_commit: str
    patch: str
    test_patch: str
    problem_statement: str
    version: str
    FAIL_TO_PASS: tuple[str, ...]
    PASS_TO_PASS: tuple[str, ...]
    hints_text: str = ""
    created_at: str = ""
    environment_setup_commit: str = ""
    difficulty: str | None = None
    # Columns of the newer hub revision (SWE-bench/SWE-bench_Verified); absent in older copies.
    eval_script: str | None = None
    log_parser: str | None = None
    eval_type: str | None = None
    image: str | None = None

    @field_validator("instance_id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        return check_id(value, "instance id")  # it names directories and S3 keys

    @field_validator("repo")
    @classmethod
    def _owner_and_name(cls, value: str) -> str:
        # Both parts fill the clone URL template and name the git cache's directories.
        owner, slash, name = value.partition("/")
        if not slash:
            raise ValueError(f"repo {value!r} must be owner/name, e.g. astropy/astropy")
        check_id(owner, f"the owner of repo {value!r}")
        check_id(name, f"the name of repo {value!r}")
        return value

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _json_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else []
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON list of test ids: {exc}") from exc
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ValueError("must be a list of test ids (or a JSON string of one)")
        return tuple(value)

    @field_validator("version", mode="before")
    @classmethod
    def _version_str(cls, value: Any) -> Any:
        # Some exports store "0.12" as a float; versions are labels, not numbers.
        return str(value) if isinstance(value, int | float) else value

    @field_validator("hints_text", "created_at", "environment_setup_commit", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return "" if value is None else value

    @model_validator(mode="after")
    def _default_setup_commit(self) -> Instance:
        if not self.environment_setup_commit:
            object.__setattr__(self, "environment_setup_commit", self.base_commit)
        return self

    @property
    def owner(self) -> str:
        return self.repo.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.repo.split("/", 1)[-1]

    def to_row(self) -> dict[str, Any]:
        """The hub's row format (F2P/P2P as JSON strings), without absent optional columns."""
        row = self.model_dump(exclude_none=True)
        row["FAIL_TO_PASS"] = json.dumps(list(self.FAIL_TO_PASS))
        row["PASS_TO_PASS"] = json.dumps(list(self.PASS_TO_PASS))
        return row


@dataclass(frozen=True)
class Dataset:
    """Loaded rows plus what identifies them in a run's provenance."""

    name: str
    split: str
    revision: str | None
    instances: tuple[Instance, ...]
    digest: str
    file_sha256: str | None = None  # of the file, when the rows came from a local one
    snapshot: bool = False  # a hub dataset read from the image's snapshot (load_dataset)

    def by_id(self) -> dict[str, Instance]:
        return {i.instance_id: i for i in self.instances}

    def provenance(self) -> dict[str, object]:
        """What identifies the rows in a published run, without the host's paths."""
        found: dict[str, object] = {
            "dataset": public_dataset_name(self.name),
            "split": self.split,
            "dataset_revision": self.revision,
            "dataset_digest": self.digest,
        }
        if self.file_sha256 is not None:
            found["dataset_file_sha256"] = self.file_sha256
        if self.snapshot:
            found["dataset_read_from"] = "the image's snapshot"
        return found


def is_local_source(name: str) -> bool:
    return name.endswith(LOCAL_SUFFIXES) or Path(name).exists()


def public_dataset_name(name: str) -> str:
    """A dataset as published: a hub id or remote URL as given, a local file by its name
    alone (``local:tasks.jsonl``): where it lies on this host is nobody else's business."""
    if "://" in name and not name.startswith("file://"):
        return name
    if name.startswith("file://") or is_local_source(name):
        return "local:" + PurePosixPath(name.replace("\\", "/")).name
    return name


def load_dataset(
    name: str = DEFAULT_DATASET,
    split: str = "test",
    revision: str | None = None,
    *,
    parsed_cache: Path | None = None,
    snapshots: Path | None = None,
) -> Dataset:
    """Load and validate every row of a dataset (hub id or local file).

    With ``parsed_cache`` (a folder), a local file's validated rows and digest are kept
    there under a hash of the file's bytes and of this parser, so a command that loads the
    same file again skips parsing, validating and digesting its 500 rows (about 0.1 s of
    every command's start): a changed file or a changed parser is a new key.

    With ``snapshots`` (a folder with an ``index.json``: the green-docker image's), a hub
    id found there at the asked revision (any, when none is asked) is read from its file,
    checked against the sha256 the index records: every shard of an assessment that runs
    one image grades the same rows, and nothing is fetched from the hub.
    """
    if not is_local_source(name) and snapshots is not None:
        kept = find_snapshot(snapshots, name, split, revision)
        if kept is not None:
            path, kept_revision, sha256 = kept
            instances, digest, file_sha256 = _load_file(path, parsed_cache)
            if file_sha256 != sha256:
                raise DatasetError(
                    f"the dataset snapshot {path} does not hold what {snapshots}/"
                    f"{SNAPSHOT_INDEX} says (sha256 {file_sha256}, not {sha256}): the image "
                    "was changed after it was built; pull it again by its digest"
                )
            return Dataset(
                name, split, kept_revision, instances, digest, file_sha256, snapshot=True
            )
    if is_local_source(name):
        instances, digest, file_sha256 = _load_file(Path(name), parsed_cache)
        return Dataset(name, split, revision, instances, digest, file_sha256)
    instances = parse_rows(_read_hub(name, split, revision, snapshots), source=name)
    return Dataset(name, split, revision, instances, dataset_digest(instances))


SNAPSHOT_INDEX = "index.json"


def find_snapshot(
    folder: Path, name: str, split: str, revision: str | None
) -> tuple[Path, str | None, str] | None:
    """The snapshot of ``name``/``split`` in ``folder`` (path, hub revision, sha256), if
    one is there at ``revision`` (None: any)."""
    index = folder / SNAPSHOT_INDEX
    try:
        entries = json.loads(index.read_text())
        found = [
            (folder / e["file"], e.get("revision"), str(e["sha256"]))
            for e in entries
            if e["name"] == name and e["split"] == split
        ]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise DatasetError(
            f"{index} is not a dataset snapshot index ({type(exc).__name__}: {exc}); "
            "unset SWEGREEN_DATASET_SNAPSHOTS or rebuild the image"
        ) from None
    for path, kept_revision, sha256 in found:
        if revision is None or revision == kept_revision:
            return path, kept_revision, sha256
    return None


def _load_file(path: Path, parsed_cache: Path | None) -> tuple[tuple[Instance, ...], str, str]:
    """A local file's validated rows, their digest and the file's sha256."""
    if parsed_cache is not None:
        file_sha256 = _file_sha256(path)
        cached = _cached_parse(parsed_cache, _parse_key(file_sha256))
        if cached is not None:
            instances, digest = cached
            return instances, digest, file_sha256
    data = _local_bytes(path)
    file_sha256 = hashlib.sha256(data).hexdigest()  # of the bytes parsed
    instances = parse_rows(_rows_from_bytes(path, data), source=str(path))
    digest = dataset_digest(instances)
    if parsed_cache is not None:
        _keep_parse(parsed_cache, _parse_key(file_sha256), instances, digest)
    return instances, digest, file_sha256


PARSED_KEPT = 4  # parsed files kept in a parse cache: a few dataset versions side by side


def _parse_key(file_sha256: str) -> str:
    """The file's hash with this parser's own: its source and the model library's version."""
    import pydantic

    h = hashlib.sha256(file_sha256.encode())
    for module in (__file__, check_id.__code__.co_filename):
        h.update(Path(module).read_bytes())
    h.update(f"{pydantic.VERSION} {sys.version}".encode())
    return h.hexdigest()[:32]


def _cached_parse(folder: Path, key: str) -> tuple[tuple[Instance, ...], str] | None:
    """A parse kept by ``_keep_parse``, or None: a missing or unreadable one is parsed again.

    The folder is the cache's, trusted as its environments are (they run as the user)."""
    import pickle

    kept = folder / f"{key}.pickle"
    try:
        with kept.open("rb") as fh, _mapped(fh) as data:
            instances, digest = pickle.loads(data)
    except Exception:  # missing, truncated, from another library version: parse again
        return None
    if not isinstance(digest, str) or not all(isinstance(i, Instance) for i in instances):
        return None
    with contextlib.suppress(OSError):
        os.utime(kept)  # the least recently used are the ones dropped
    return tuple(instances), digest


def _keep_parse(folder: Path, key: str, instances: tuple[Instance, ...], digest: str) -> None:
    import pickle
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".part")
        with os.fdopen(fd, "wb") as out:
            pickle.dump((instances, digest), out, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, folder / f"{key}.pickle")
        kept = sorted(folder.glob("*.pickle"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[PARSED_KEPT:]:
            old.unlink(missing_ok=True)
    except OSError:  # a read-only or full cache: the rows were parsed, the run goes on
        return


def parse_rows(rows: Iterable[Mapping[str, Any]], source: str = "dataset") -> tuple[Instance, ...]:
    """Validate raw rows; a missing column or a bad value names the row and the column."""
    instances: list[Instance] = []
    seen: set[str] = set()
    for index, row in enumerate(rows):
        label = f"row {index + 1}"
        if isinstance(row, Mapping) and isinstance(row.get("instance_id"), str):
            label += f" ({row['instance_id']})"
        if not isinstance(row, Mapping):
            raise DatasetError(f"{source}: {label} is not a JSON object")
        missing = [c for c in REQUIRED_COLUMNS if c not in row]
        if missing:
            raise DatasetError(
                f"{source}: {label} lacks required column(s) {', '.join(missing)}; "
                f"SWE-bench rows need {', '.join(REQUIRED_COLUMNS)}"
            )
        try:
            instance = Instance.model_validate(dict(row))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise DatasetError(f"{source}: {label} has invalid values: {problems}") from None
        if instance.instance_id in seen:
            raise DatasetError(f"{source}: instance id {instance.instance_id} appears twice")
        seen.add(instance.instance_id)
        instances.append(instance)
    if not instances:
        raise DatasetError(f"{source}: the dataset has no rows")
    return tuple(instances)


def dataset_digest(instances: Sequence[Instance]) -> str:
    """A content hash of what grading depends on, so provenance pins the exact rows used."""
    h = hashlib.sha256()
    for inst in sorted(instances, key=lambda i: i.instance_id):
        record = [
            inst.instance_id,
            inst.repo,
            inst.base_commit,
            inst.version,
            _sha(inst.patch),
            _sha(inst.test_patch),
            list(inst.FAIL_TO_PASS),
            list(inst.PASS_TO_PASS),
            inst.eval_script or "",
        ]
        h.update(json.dumps(record, separators=(",", ":")).encode())
    return h.hexdigest()


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _file_sha256(path: Path) -> str:
    """The file's sha256, read through a mapping of it: a read of its 8 MB into a new
    buffer costs twice the hash on a machine where fresh memory is slow to fault in."""
    if not path.exists():
        raise DatasetError(f"dataset file {path} does not exist")
    try:
        with path.open("rb") as fh, _mapped(fh) as data:
            return hashlib.sha256(data).hexdigest()
    except OSError as exc:
        raise DatasetError(f"dataset file {path} cannot be read: {exc}") from None


def _mapped(fh: BinaryIO) -> contextlib.AbstractContextManager[bytes | mmap.mmap]:
    """The open file's bytes, mapped (an empty file cannot be)."""
    if os.fstat(fh.fileno()).st_size == 0:
        return contextlib.nullcontext(b"")
    return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)


def _local_bytes(path: Path) -> bytes:
    if not path.exists():
        raise DatasetError(f"dataset file {path} does not exist")
    return path.read_bytes()


def _rows_from_bytes(path: Path, data: bytes) -> list[Mapping[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow as pa  # datasets depends on pyarrow
        import pyarrow.parquet as pq

        try:
            return pq.read_table(pa.BufferReader(data)).to_pylist()
        except Exception as exc:  # pyarrow raises several unrelated types
            raise DatasetError(f"{path}: not a readable parquet file: {exc}") from exc
    return _parse_local_text(path, data.decode("utf-8"))


def _parse_local_text(path: Path, text: str) -> list[Mapping[str, Any]]:
    if path.suffix == ".jsonl":
        rows = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
        return rows
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if isinstance(data, dict) and isinstance(data.get("rows"), list):
        data = data["rows"]
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of rows")
    return data


def _read_hub(
    name: str, split: str, revision: str | None, snapshots: Path | None = None
) -> list[Mapping[str, Any]]:
    try:
        import datasets  # heavy import, only when the hub is used
    except ImportError:
        kept = ""
        if snapshots is not None and (snapshots / SNAPSHOT_INDEX).exists():
            entries = json.loads((snapshots / SNAPSHOT_INDEX).read_text())
            kept = (
                " It holds "
                + ", ".join(
                    f"{e['name']} ({e['split']}, revision {e.get('revision') or 'unrecorded'})"
                    for e in entries
                )
                + ": ask for one of these (or no dataset_revision)."
            )
        raise DatasetError(
            f"cannot load {name!r} (split {split!r}, revision {revision or 'latest'}): "
            "this installation has no hub client (the `datasets` package; the green-docker "
            f"image leaves it out).{kept} Or pass a dataset file the host can read."
        ) from None
    try:
        ds = datasets.load_dataset(name, split=split, revision=revision)
    except Exception as exc:  # network, auth, unknown split: all end the same way for the user
        raise DatasetError(
            f"could not load {name!r} (split {split!r}) from the Hugging Face hub: {exc}. "
            "Check the name and your network, or pass a local .jsonl/.json/.parquet file."
        ) from exc
    return list(ds)


# --------------------------------------------------------------------------- selection


class Selection(BaseModel):
    """Which rows a run evaluates. Applied as: filter -> sort by id -> max_rows -> shard."""

    model_config = ConfigDict(frozen=True)

    max_rows: int = 3
    instance_ids: tuple[str, ...] = ()
    repos: tuple[str, ...] = ()
    shard_index: int = 0
    num_shards: int = 1
    # round_robin: every shard a mix of repositories (balanced time); contiguous: each
    # shard a run of neighbouring ids, so its rows share repositories and versions, and
    # their instance images share layers (the Docker backend: a runner keeps every image).
    shard_by: Literal["round_robin", "contiguous"] = "round_robin"

    @model_validator(mode="after")
    def _check(self) -> Selection:
        if self.max_rows < -1 or self.max_rows == 0:
            raise ValueError(
                f"max_rows must be -1 (all rows) or a positive count, not {self.max_rows}"
            )
        if self.num_shards < 1:
            raise ValueError(f"num_shards must be at least 1, not {self.num_shards}")
        if not 0 <= self.shard_index < self.num_shards:
            raise ValueError(
                f"shard_index must be between 0 and num_shards - 1 ({self.num_shards - 1}), "
                f"not {self.shard_index}"
            )
        return self


def select_instances(dataset: Dataset, selection: Selection) -> list[Instance]:
    """The deterministic, ordered slice of ``dataset`` that ``selection`` names.

    Rows are ordered by instance id, cut to ``max_rows`` and then dealt round-robin to
    shards, so the union of all shards is exactly the unsharded selection.
    """
    rows = list(dataset.instances)
    if selection.instance_ids:
        known = dataset.by_id()
        unknown = [i for i in selection.instance_ids if i not in known]
        if unknown:
            hints = []
            for iid in unknown[:5]:
                close = difflib.get_close_matches(iid, known, n=1)
                hints.append(f"{iid} (did you mean {close[0]}?)" if close else iid)
            raise DatasetError(
                f"unknown instance id(s) in {dataset.name}: {', '.join(hints)}"
                + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            )
        wanted = set(selection.instance_ids)
        rows = [r for r in rows if r.instance_id in wanted]
    if selection.repos:
        present = {r.repo for r in dataset.instances}
        missing = [r for r in selection.repos if r not in present]
        if missing:
            raise DatasetError(
                f"no rows for repo(s) {', '.join(missing)} in {dataset.name}; "
                f"its repos are {', '.join(sorted(present))}"
            )
        wanted_repos = set(selection.repos)
        rows = [r for r in rows if r.repo in wanted_repos]
    rows.sort(key=lambda r: r.instance_id)
    if selection.max_rows >= 0:
        rows = rows[: selection.max_rows]
    if selection.shard_by == "contiguous":
        # shard k: rows [k*n/s, (k+1)*n/s): sizes differ by one at most, none left out
        n, s, k = len(rows), selection.num_shards, selection.shard_index
        return rows[k * n // s : (k + 1) * n // s]
    return rows[selection.shard_index :: selection.num_shards]
