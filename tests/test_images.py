"""Instance image names and the eval script run inside them, against the official harness's
own functions: swebench 4.1.0 (the last with per-repo specs) for all 500 Verified rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from swebench.harness.constants import TEST_EXIT_CODE_VAR

from swegreen.containers.images import split_tag
from swegreen.core.dataset import load_dataset
from swegreen.core.errors import ConfigError
from swegreen.core.eval_script import image_eval_phases
from swegreen.core.images import image_name, image_template
from swegreen.core.recipes import verified_recipes

from .docker_support.official_harness import (
    Unavailable,
    as_repaired,
    eval_script_of,
    upstream_scripts,
)

SHARED_DATASET = Path(__file__).resolve().parents[2] / "shared" / "data" / "swebench_verified.jsonl"


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
    swebench 4.1.0 builds (downloaded from PyPI), with upstream's later repair of the
    three rows whose test patch only adds files."""
    try:
        official = upstream_scripts(SHARED_DATASET, tmp_path)
    except Unavailable as exc:
        pytest.skip(str(exc))
    book = verified_recipes()
    rows = load_dataset(str(SHARED_DATASET)).instances
    assert len(rows) == len(official) == 500
    names = [i.instance_id for i in rows if image_name(i.instance_id, "official", "x86_64")
             != official[i.instance_id]["image"]]  # fmt: skip
    assert names == []
    scripts, repaired = [], []
    for inst in rows:
        want = as_repaired(inst, official[inst.instance_id]["eval_script"])
        if want != official[inst.instance_id]["eval_script"]:
            repaired.append(inst.instance_id)
        if eval_script_of(inst, book.for_instance(inst)) != want:
            scripts.append(inst.instance_id)
    assert scripts == []
    assert repaired == [
        "django__django-16877", "sphinx-doc__sphinx-8595", "sphinx-doc__sphinx-9711"
    ]  # fmt: skip
