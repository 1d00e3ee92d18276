"""The official harness's own pieces, for comparing with it on the same images.

* ``upstream_scripts``: swebench 4.1.0 (the last release with per-repo specs, from PyPI) run
  on the rows, giving each row's official image name, eval script and instance-image setup
  script (``setup_repo.sh``), exactly as 4.1.0 writes them.
* ``harness_rows``: the rows in swebench 5.0.2's dataset shape (``image``, ``eval_script``,
  ``log_parser``, ``eval_type``), the image pointed at a local tag: the columns the offline
  Verified rows lack, so that 5.0.2's ``make_test_spec`` and ``run_evaluation`` accept them.
* ``run_official``: 5.0.2's ``run_evaluation`` (its command line), or its
  ``run_instances`` with ``skip_patch`` (the harness's negative-test mode: it skips an
  empty prediction otherwise), in a folder of its own, and each row's report read back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from swegreen.core.dataset import Instance
from swegreen.core.eval_script import new_test_files, official_lines
from swegreen.core.recipes import Recipe

UPSTREAM = "swebench==4.1.0"
# Run with swebench 4.1.0 first on the path. Its make_test_spec fetches requirements files
# from GitHub, so the TestSpec is built from its own parts, as make_test_spec does.
OFFICIAL = """
import json, sys
from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS
from swebench.harness.test_spec.create_scripts import make_eval_script_list, make_repo_script_list
from swebench.harness.test_spec.test_spec import TestSpec
out = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    specs = MAP_REPO_VERSION_TO_SPECS[r["repo"]][r["version"]]
    base, tests = r["base_commit"], r["test_patch"]
    lines = make_eval_script_list(r, specs, "testbed", "/testbed", base, tests)
    repo = make_repo_script_list(specs, r["repo"], "/testbed", base, "testbed")
    spec = TestSpec(instance_id=r["instance_id"], repo=r["repo"], version=r["version"],
        repo_script_list=repo, eval_script_list=lines, env_script_list=[], arch="x86_64",
        FAIL_TO_PASS=[], PASS_TO_PASS=[], language="py", docker_specs={}, namespace="swebench")
    assert spec.instance_image_key.startswith("swebench/")
    out[r["instance_id"]] = {"image": spec.instance_image_key, "eval_script": spec.eval_script,
                             "setup_repo": spec.install_repo_script}
json.dump(out, open(sys.argv[2], "w"))
"""


def as_repaired(instance: Instance, script: str) -> str:
    """4.1.0's eval script as the hub's v5 rows carry it: for the three rows whose test
    patch only adds files, the bare ``git checkout <base>`` (which checks out the commit
    itself) is ``rm -f <new files>`` (SWE-bench PR 539, and 542 for the v5 rows)."""
    bare = f"git checkout {instance.base_commit} \n"
    return script.replace(bare, f"rm -f {' '.join(new_test_files(instance.test_patch))}\n")


class Unavailable(RuntimeError):
    """swebench 4.1.0 could not be downloaded (no package index)."""


def upstream_41(folder: Path) -> Path:
    """swebench 4.1.0's files, unpacked once into ``folder``."""
    unpacked = folder / "swebench-4.1.0"
    if (unpacked / "swebench").is_dir():
        return unpacked
    fetched = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", UPSTREAM,
         "-d", str(folder)],
        capture_output=True, text=True,
    )  # fmt: skip
    if fetched.returncode != 0:
        raise Unavailable(f"{UPSTREAM} could not be downloaded: {fetched.stderr[-300:]}")
    wheel = next(folder.glob("swebench-4.1.0-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(unpacked)
    return unpacked


def upstream_scripts(rows_jsonl: Path, folder: Path) -> dict[str, dict[str, str]]:
    """Per instance id: 4.1.0's ``image``, ``eval_script`` and ``setup_repo``."""
    upstream = upstream_41(folder)
    script, out = folder / "official.py", folder / f"official-{rows_jsonl.stem}.json"
    script.write_text(OFFICIAL)
    subprocess.run(
        [sys.executable, str(script), str(rows_jsonl), str(out)],
        check=True,
        env={"PYTHONPATH": str(upstream), "PATH": "/usr/bin:/bin"},
    )
    return json.loads(out.read_text())


def harness_rows(
    rows: Iterable[Mapping[str, object]],
    scripts: Mapping[str, Mapping[str, str]],
    images: Mapping[str, str],
    log_parsers: Mapping[str, str],
) -> list[dict[str, object]]:
    """The rows as swebench 5.0.2 reads them, each naming its local image."""
    out = []
    for row in rows:
        iid = str(row["instance_id"])
        out.append({
            **row,
            "image": images[iid],
            "eval_script": scripts[iid]["eval_script"],
            "log_parser": log_parsers[str(row["repo"])],
            "eval_type": "pass_and_fail",
        })  # fmt: skip
    return out


RUN_EMPTY = """
import json, sys
from swebench.harness.run_evaluation import run_instances
from swebench.harness.utils import load_swebench_dataset
rows = load_swebench_dataset(sys.argv[1], "test", set(sys.argv[3].split(",")))
preds = {r["instance_id"]: {"instance_id": r["instance_id"], "model_patch": "",
         "model_name_or_path": "empty"} for r in rows}
run_instances(preds, rows, int(sys.argv[5]), sys.argv[2], int(sys.argv[4]), skip_patch=True)
"""


def run_official(
    work: Path,
    dataset: Path,
    run_id: str,
    instance_ids: list[str],
    patches: Mapping[str, str] | None,
    timeout: int = 1800,
    workers: int = 1,
    model: str = "gold",
) -> dict[str, dict[str, object]]:
    """The harness on ``instance_ids``: with ``patches`` (named ``model``) through
    ``run_evaluation``'s command line, without them in its negative-test mode (named
    ``empty``). Per row: its report (None when the harness wrote none: an apply failure,
    a timeout) and its log folder."""
    work.mkdir(parents=True, exist_ok=True)
    if patches is not None:
        preds = work / f"{run_id}.predictions.jsonl"
        preds.write_text("".join(
            json.dumps({"instance_id": i, "model_patch": p, "model_name_or_path": model}) + "\n"
            for i, p in patches.items() if i in instance_ids
        ))  # fmt: skip
        command = [
            sys.executable, "-m", "swebench.harness.run_evaluation",
            "--dataset_name", str(dataset), "--predictions_path", str(preds),
            "--instance_ids", *instance_ids, "--max_workers", str(workers), "--run_id", run_id,
            "--timeout", str(timeout), "--report_dir", str(work / "reports"),
        ]  # fmt: skip
    else:
        command = [sys.executable, "-c", RUN_EMPTY, str(dataset), run_id,
                   ",".join(instance_ids), str(timeout), str(workers)]  # fmt: skip
        model = "empty"
    done = subprocess.run(command, cwd=work, capture_output=True, text=True)
    (work / f"{run_id}.out").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"the official harness exited {done.returncode}: {done.stderr[-2000:]}")
    found: dict[str, dict[str, object]] = {}
    for iid in instance_ids:
        logs = work / "logs" / "run_evaluation" / run_id / model / iid
        report = logs / "report.json"
        found[iid] = {
            "logs": logs,
            "report": json.loads(report.read_text())[iid] if report.is_file() else None,
        }
    return found


def eval_script_of(instance: Instance, recipe: Recipe) -> str:
    """A row's eval.sh as swebench 4.1.0 writes it, from ``official_lines`` (byte for byte
    the same for all 500 Verified rows: tests/test_images.py): for rows that 4.1.0's
    specs do not know, such as the sample's."""
    lines = official_lines(instance, recipe, conda=True)
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", *lines]) + "\n"
