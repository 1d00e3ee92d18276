"""Recipes: every Verified (repo, version) has one, and the translation keeps upstream's facts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swegreen.core.dataset import load_dataset, parse_rows
from swegreen.core.errors import NoRecipe
from swegreen.core.recipes import Recipe, RecipeBook
from swegreen.environments.catalog import builtin_recipes
from swegreen.environments.requirements import (
    build_system_packages,
    conda_to_pip,
    environment_yml_requirements,
    requirements_txt,
)

from .helpers import raw_row

SHARED_DATASET = Path(__file__).resolve().parents[2] / "shared" / "data" / "swebench_verified.jsonl"
BOOK = builtin_recipes()


def recipe(repo: str, version: str) -> Recipe:
    return BOOK.versions(repo)[version]


@pytest.mark.skipif(
    not SHARED_DATASET.exists(), reason="the team's offline Verified copy is absent"
)
def test_every_verified_row_has_a_recipe() -> None:
    instances = load_dataset(str(SHARED_DATASET)).instances
    pairs = {(i.repo, i.version) for i in instances}
    assert len(pairs) == 80
    for inst in instances:
        BOOK.for_instance(inst)  # raises NoRecipe when missing


def test_django_keeps_upstream_commands_and_gets_locales_without_root() -> None:
    r = recipe("django/django", "3.0")
    assert r.python == "3.6"
    assert r.install == "python -m pip install -e ."
    assert r.test_cmd == "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
    assert r.directive_style == "django" and r.log_parser == "parse_log_django"
    assert r.requirements == ("tests/requirements/py3.txt",)
    assert r.locales == ("en_US.UTF-8",)
    assert "export LANG=en_US.UTF-8" in r.eval_commands
    assert not any("locale-gen" in c for c in r.eval_commands)


def test_conda_package_lists_become_pip_requirements_with_upstream_pins() -> None:
    r = recipe("scikit-learn/scikit-learn", "1.3")
    assert "numpy==1.19.2" in r.packages and "scipy==1.5.2" in r.packages
    assert "pandas<2.0.0" in r.packages
    assert r.install == "python -m pip install -v --no-use-pep517 --no-build-isolation -e ."


def test_apt_packages_go_to_the_sysroot_and_other_pre_install_steps_stay() -> None:
    r = recipe("sphinx-doc/sphinx", "7.2")
    assert r.system_packages == ("graphviz",)
    assert r.pre_install == ("sed -i 's/pytest/pytest -rA/' tox.ini",)
    assert r.test_cmd == "tox --current-env -epy39 -v --"
    assert "tox-current-env==0.0.11" in r.pip_packages


def test_environment_yml_recipes_and_documented_overrides() -> None:
    xr = recipe("pydata/xarray", "2022.06")
    assert xr.requirements_kind == "conda_env"
    assert xr.requirements == ("ci/requirements/environment.yml", "environment.yml")
    assert set(xr.exclude_newer_exempt) == {"eccodes", "findlibs"}
    assert any(n.startswith("override:") for n in xr.notes)
    assert recipe("psf/requests", "2.3").services == ("httpbin",)
    assert recipe("psf/requests", "2.26").services == ()
    assert all(r.exclude_newer == "2024-08-01" for r in BOOK.versions("sympy/sympy").values())


def test_unknown_repo_or_version_is_a_clear_non_retried_error() -> None:
    book = RecipeBook({"o/r": {"1.0": Recipe(python="3.9", test_cmd="pytest")}})
    with pytest.raises(NoRecipe, match=r"no environment recipe for repo x/y; known repos: o/r"):
        book.for_instance(parse_rows([raw_row(1, repo="x/y")])[0])
    with pytest.raises(NoRecipe, match=r"o/r version 2.0; known versions: 1.0") as info:
        book.for_instance(parse_rows([raw_row(1, version="2.0")])[0])
    assert not info.value.infrastructure


def test_env_key_depends_on_what_is_installed_only() -> None:
    a = Recipe(python="3.9", packages=("x==1",), test_cmd="pytest")
    assert a.env_key("c1") == a.model_copy(update={"test_cmd": "pytest -rA"}).env_key("c1")
    assert a.env_key("c1") == a.env_key("c2")  # no requirements file: the commit does not matter
    assert a.env_key("c1") != a.model_copy(update={"packages": ("x==2",)}).env_key("c1")
    with_file = a.model_copy(update={"requirements": ("requirements.txt",)})
    assert with_file.env_key("c1") != with_file.env_key("c2")


def test_conda_specs_translate_to_pip() -> None:
    assert conda_to_pip("matplotlib-base=3.5") == "matplotlib==3.5"
    assert conda_to_pip("'numpy==1.19.2'") == "numpy==1.19.2"
    assert conda_to_pip("conda-forge::netcdf4>=1.5") == "netCDF4>=1.5"
    assert conda_to_pip("python=3.9") is None and conda_to_pip("hdf5") is None
    yml = "name: t\ndependencies:\n  - numpy=1.21\n  - hdf5\n  - pip\n  - pip:\n    - pytest==7.0\n"
    tr = environment_yml_requirements(yml)
    assert tr.requirements == ["numpy==1.21", "pytest==7.0"]
    assert tr.dropped == ["hdf5", "pip"]


def test_conda_system_libraries_and_source_builds_become_debian_packages() -> None:
    # matplotlib 3.5's environment.yml: gtk3 is a system library, pygobject builds from source
    yml = "dependencies:\n  - pygobject\n  - conda-forge::gtk3\n  - wxpython\n  - pyqt\n"
    tr = environment_yml_requirements(yml)
    assert tr.requirements == ["pygobject", "PyQt5"]
    assert tr.system_packages == ["gir1.2-gtk-3.0"]
    assert tr.dropped == ["wxpython"]
    assert build_system_packages(["PyGObject>=3.4; python_version>'3'", "pycairo==1.26.1"]) == [
        "pkg-config",
        "libcairo2-dev",
        "libgirepository1.0-dev",
    ]
    assert build_system_packages(["numpy", "six"]) == []


def test_requirements_files_expand_includes_and_skip_the_repo_itself() -> None:
    files = {
        "reqs/base.txt": "six\n# comment\n",
        "reqs/test.txt": "-r base.txt\npytest>=6  # why\n-e .\n",
    }
    assert requirements_txt(files["reqs/test.txt"], files.get, "reqs") == ["six", "pytest>=6"]


def test_recipe_data_is_valid_json_with_notes_for_translations() -> None:
    data = json.loads(
        (
            Path(__file__).resolve().parents[1]
            / "shared"
            / "swegreen"
            / "data"
            / "swebench_recipes.json"
        ).read_text()
    )
    assert data["freeze_date"] == "2024-08-01"
    assert sum(len(v) for v in data["recipes"].values()) == 193
    mpl = data["recipes"]["matplotlib/matplotlib"]["3.5"]
    assert any("qhull" in n for n in mpl["notes"])
