"""Instance image names and the eval script run inside them, against the official harness's
own functions: swebench 4.1.0 (the last with per-repo specs) for all 500 Verified rows."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from swebench.harness.constants import TEST_EXIT_CODE_VAR

from swegreen.containers.images import split_tag
from swegreen.core.dataset import load_dataset
from swegreen.core.errors import ConfigError
from swegreen.core.eval_script import image_eval_phases, official_lines
from swegreen.core.images import image_name, image_template
from swegreen.core.recipes import verified_recipes

SHARED_DATASET = Path(__file__).resolve().parents[2] / "shared" / "data" / "swebench_verified.jsonl"
UPSTREAM = "swebench==4.1.0"
# Run with swebench 4.1.0 first on the path: its make_test_spec fetches requirements
# files from GitHub, so the script builds the same TestSpec from its own parts.
OFFICIAL = """
import json, sys
from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS
from swebench.harness.test_spec.create_scripts import make_eval_script_list
from swebench.harness.test_spec.test_spec import TestSpec
out = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    specs = MAP_REPO_VERSION_TO_SPECS[r["repo"]][r["version"]]
    base, tests = r["base_commit"], r["test_patch"]
    lines = make_eval_script_list(r, specs, "testbed", "/testbed", base, tests)
    spec = TestSpec(instance_id=r["instance_id"], repo=r["repo"], version=r["version"],
        repo_script_list=[], eval_script_list=lines, env_script_list=[], arch="x86_64",
        FAIL_TO_PASS=[], PASS_TO_PASS=[], language="py", docker_specs={}, namespace="swebench")
    assert spec.instance_image_key.startswith("swebench/")
    out[r["instance_id"]] = {"image": spec.instance_image_key, "eval_script": spec.eval_script}
json.dump(out, open(sys.argv[2], "w"))
"""


def test_names_of_each_source() -> None:
    iid = "django__django-11099"
    assert (
        image_name(iid, "official", "x86_64")
        == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    )
    assert (
        image_name(iid, "epoch", "arm64")
        == "ghcr.io/epoch-research/swe-bench.eval.arm64.django__django-11099:latest"
    )
    assert image_name(iid, "reg.example:5000/{official_id}:v1") == (
        "reg.example:5000/django_1776_django-11099:v1"
    )
    assert split_tag("reg.example:5000/a/b:v1") == ("reg.example:5000/a/b", "v1")
    assert split_tag("reg.example:5000/a/b") == ("reg.example:5000/a/b", "latest")


@pytest.mark.parametrize("bad", ["dockerhub", "x/{nope}:latest", "x/{0}"])
def test_a_bad_source_says_what_is_wrong(bad: str) -> None:
    with pytest.raises(ConfigError, match="docker_images"):
        image_template(bad)


def test_the_image_eval_script_keeps_conda_and_records_the_exit_code() -> None:
    ds = load_dataset(str(SHARED_DATASET)) if SHARED_DATASET.is_file() else None
    if ds is None:
        pytest.skip(f"the Verified rows are not at {SHARED_DATASET}")
    inst = next(i for i in ds.instances if i.instance_id == "django__django-11099")
    phases = image_eval_phases(inst, verified_recipes().for_instance(inst))
    # Both phases activate the image's environment; the test phase exits with the tests'.
    for phase in (phases.prepare, phases.test):
        assert "source /opt/miniconda3/bin/activate\nconda activate testbed\n" in phase
    assert "locale-gen" in phases.prepare  # upstream's own eval commands, as root may
    assert phases.test.rstrip().splitlines()[-1] == f'exit "${TEST_EXIT_CODE_VAR}"'


@pytest.mark.skipif(not SHARED_DATASET.is_file(), reason=f"no {SHARED_DATASET}")
def test_names_and_eval_scripts_are_the_official_harness_own(tmp_path: Path) -> None:
    """All 500 rows: the same image name and, byte for byte, the same eval.sh as
    swebench 4.1.0 builds (downloaded from PyPI)."""
    fetched = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", UPSTREAM,
         "-d", str(tmp_path)],
        capture_output=True, text=True,
    )  # fmt: skip
    if fetched.returncode != 0:
        pytest.skip(f"{UPSTREAM} could not be downloaded: {fetched.stderr[-300:]}")
    wheel = next(tmp_path.glob("swebench-4.1.0-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path / "upstream")
    script = tmp_path / "official.py"
    script.write_text(OFFICIAL)
    out = tmp_path / "official.json"
    subprocess.run(
        [sys.executable, str(script), str(SHARED_DATASET), str(out)],
        check=True,
        env={"PYTHONPATH": str(tmp_path / "upstream"), "PATH": "/usr/bin:/bin"},
    )
    official = json.loads(out.read_text())
    book = verified_recipes()
    rows = load_dataset(str(SHARED_DATASET)).instances
    assert len(rows) == len(official) == 500
    names = [i.instance_id for i in rows if image_name(i.instance_id, "official", "x86_64")
             != official[i.instance_id]["image"]]  # fmt: skip
    assert names == []
    scripts = []
    for inst in rows:
        lines = official_lines(inst, book.for_instance(inst), conda=True)
        mine = "\n".join(["#!/bin/bash", "set -uxo pipefail", *lines]) + "\n"
        if mine != official[inst.instance_id]["eval_script"]:
            scripts.append(inst.instance_id)
    assert scripts == []
