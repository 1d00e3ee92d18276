"""Writes the dataset snapshot green-docker.Dockerfile puts in the image: the rows as JSON
lines and an index.json saying what they are (hub id, split, the hub commit, sha256), which
the loader matches against the config's dataset (swegreen.core.dataset.load_dataset).

    python dataset_snapshot.py hub  NAME REVISION OUT    # needs huggingface_hub and pyarrow
    python dataset_snapshot.py file NAME JSONL OUT       # a local copy; no hub revision

Standalone on purpose: it runs in the build stage before the project is installed.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

SPLIT = "test"


def from_hub(name: str, revision: str, out: Path) -> tuple[str, Path]:
    import pyarrow.parquet as pq
    from huggingface_hub import HfApi, hf_hub_download

    api = HfApi()
    commit = api.dataset_info(name, revision=revision).sha  # a branch or tag, pinned here
    files = sorted(
        f
        for f in api.list_repo_files(name, repo_type="dataset", revision=commit)
        if f.endswith(".parquet") and f.split("/")[-1].startswith(f"{SPLIT}-")
    )
    if not files:
        raise SystemExit(f"{name}@{commit}: no {SPLIT} parquet files")
    target = out / f"{name.replace('/', '__')}.{SPLIT}.jsonl"
    with target.open("w", encoding="utf-8") as fh:
        for file in files:
            local = hf_hub_download(name, file, repo_type="dataset", revision=commit)
            for row in pq.read_table(local).to_pylist():
                fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    return commit, target


def from_file(name: str, source: Path, out: Path) -> tuple[None, Path]:
    if not source.is_file():
        raise SystemExit(
            f"{source} is missing: with DATASET_SOURCE=context put the dataset there "
            "(see container/dataset/README)"
        )
    target = out / f"{name.replace('/', '__')}.{SPLIT}.jsonl"
    target.write_bytes(source.read_bytes())
    return None, target


def main(argv: list[str]) -> None:
    if len(argv) != 4 or argv[0] not in ("hub", "file"):
        raise SystemExit(__doc__)
    mode, name, where, out = argv[0], argv[1], argv[2], Path(argv[3])
    out.mkdir(parents=True, exist_ok=True)
    if mode == "hub":
        revision, target = from_hub(name, where, out)
    else:
        revision, target = from_file(name, Path(where), out)
    data = target.read_bytes()
    entry = {
        "name": name,
        "split": SPLIT,
        "revision": revision,
        "source": mode,
        "file": target.name,
        "sha256": hashlib.sha256(data).hexdigest(),
        "rows": data.count(b"\n"),
    }
    (out / "index.json").write_text(json.dumps([entry], indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
