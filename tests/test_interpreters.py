"""Finding the interpreter a recipe asks for, and the error when it is not there."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from pathlib import Path

import pytest

from swegreen.core.errors import InterpreterNotFound
from swegreen.environments.interpreters import (
    InterpreterSearch,
    describe_interpreter,
    find_interpreter,
    parse_given,
)

HOST = f"{sys.version_info[0]}.{sys.version_info[1]}"


def fake_python(path: Path, reports: str) -> Path:
    """An executable that answers the version probe like pythonX.Y would."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {reports}\n")
    path.chmod(0o755)
    return path


def search(tmp_path: Path, path: str = "") -> InterpreterSearch:
    return InterpreterSearch(path=path, pyenv_root=tmp_path / "pyenv", uv_dir=tmp_path / "uv")


def test_host_means_the_engine_s_own_interpreter(tmp_path: Path) -> None:
    assert find_interpreter("host", search(tmp_path)) == Path(sys.executable)


def test_found_on_path(tmp_path: Path) -> None:
    exe = fake_python(tmp_path / "bin" / "python3.7", "3.7")
    assert find_interpreter("3.7", search(tmp_path, str(tmp_path / "bin"))) == exe


def test_found_in_pyenv_newest_patch_first(tmp_path: Path) -> None:
    fake_python(tmp_path / "pyenv" / "versions" / "3.8.2" / "bin" / "python3.8", "3.8")
    newest = fake_python(tmp_path / "pyenv" / "versions" / "3.8.18" / "bin" / "python3.8", "3.8")
    assert find_interpreter("3.8", search(tmp_path)) == newest


def test_found_among_uv_interpreters(tmp_path: Path) -> None:
    exe = fake_python(
        tmp_path / "uv" / "cpython-3.12.4-linux-x86_64-gnu" / "bin" / "python3.12", "3.12"
    )
    assert find_interpreter("3.12", search(tmp_path)) == exe


def test_pyenv_shims_and_liars_are_skipped(tmp_path: Path) -> None:
    fake_python(tmp_path / "shims" / "python3.9", "3.9")  # a shim answers for any version
    fake_python(tmp_path / "bin" / "python3.9", "3.10")  # says it is something else
    path = os.pathsep.join([str(tmp_path / "shims"), str(tmp_path / "bin")])
    with pytest.raises(InterpreterNotFound):
        find_interpreter("3.9", search(tmp_path, path))


def test_missing_interpreter_error_names_the_version_and_how_to_get_it(tmp_path: Path) -> None:
    from swegreen.environments.conda_pythons import CondaPythons

    with pytest.raises(InterpreterNotFound) as info:
        find_interpreter("3.5", search(tmp_path), needed_by="django/django 1.11")
    message = str(info.value)
    assert "Python 3.5 (needed by django/django 1.11) was not found on PATH" in message
    # only ways that give 3.5: uv has no build of it, pyenv cannot build it on OpenSSL 3
    assert "uv python install" not in message and "pyenv install" not in message
    assert "conda create -p ~/.local/share/swegreen/python3.5 python=3.5 -y" in message
    assert "--python 3.5=~/.local/share/swegreen/python3.5/bin/python3.5" in message
    assert info.value.reason == "interpreter_not_found"
    # downloads off: the way to turn them on, and to get it ahead of a run
    conda = CondaPythons(tmp_path / "pythons", ("http://127.0.0.1:9/channel",))
    off = dataclasses.replace(search(tmp_path), conda=conda, downloads=False)
    with pytest.raises(InterpreterNotFound) as info:
        find_interpreter("3.6", off)
    assert "--no-python-downloads" in str(info.value)
    assert "swegreen pythons install 3.6" in str(info.value)
    # on, with the channel out of reach: why, and what to do about it
    on = dataclasses.replace(off, downloads=True)
    with pytest.raises(InterpreterNotFound) as info:
        find_interpreter("3.6", on)
    message = str(info.value)
    assert "could not be installed from conda packages" in message
    assert "http://127.0.0.1:9/channel" in message and "Connection refused" in message
    assert "SWEGREEN_PYTHON_CHANNELS" in message and "conda create" in message
    assert not (tmp_path / "pythons" / conda.subdir / "3.6").exists()


def test_a_given_path_may_start_with_a_tilde_as_the_hint_prints_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from swegreen.environments.interpreters import parse_given

    monkeypatch.setenv("HOME", str(tmp_path))
    given = parse_given("3.6=~/.local/share/swegreen/python3.6/bin/python3.6")
    assert given == {"3.6": tmp_path / ".local/share/swegreen/python3.6/bin/python3.6"}


def test_a_row_whose_interpreter_is_missing_fails_before_it_clones_anything(
    tmp_path: Path,
) -> None:
    """No interpreter of the recipe's version here, and no environment built with one:
    the row fails at once, before any repository is read; an environment built with that
    version (which the row may reuse) lets it go on."""
    import asyncio
    import json

    from swegreen.core.recipes import Recipe
    from swegreen.environments.manager import EnvManager

    manager = EnvManager(tmp_path / "envs", search(tmp_path), {})
    recipe = Recipe(python="3.6", packages=(), test_cmd="pytest")
    with pytest.raises(InterpreterNotFound, match=r"needed by django/django 3\.0"):
        asyncio.run(manager.check_interpreter(recipe, "django/django 3.0"))
    built = tmp_path / "envs" / "somekey"
    built.mkdir(parents=True)
    (built / "env.json").write_text(json.dumps({"python": "3.6"}))
    (built / ".complete").write_text("0")
    asyncio.run(manager.check_interpreter(recipe, "django/django 3.0"))


def test_bad_version_strings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InterpreterNotFound, match=r"expected X\.Y"):
        find_interpreter("three", search(tmp_path))


def test_describe_reports_version_and_installation_prefix() -> None:
    info = describe_interpreter(Path(sys.executable))
    assert info.version == HOST and info.prefix == Path(sys.base_prefix)


def test_a_given_interpreter_wins_and_a_wrong_one_is_an_error(tmp_path: Path) -> None:
    """--python 3.5=PATH: used first; one that is not that version fails, naming what it is."""
    on_path = fake_python(tmp_path / "bin" / "python3.5", "3.5")
    mine = fake_python(tmp_path / "opt" / "py35" / "python", "3.5")
    given = InterpreterSearch(
        path=str(on_path.parent),
        pyenv_root=tmp_path / "pyenv",
        uv_dir=tmp_path / "uv",
        given=tuple(parse_given(f"3.5={mine}").items()),
    )
    assert find_interpreter("3.5", given) == mine
    wrong = InterpreterSearch(
        path=str(on_path.parent),
        pyenv_root=tmp_path / "pyenv",
        uv_dir=tmp_path / "uv",
        given=(("3.5", Path(sys.executable)),),
    )
    with pytest.raises(InterpreterNotFound, match=rf"given as .* it is Python {HOST}") as err:
        find_interpreter("3.5", wrong)
    assert err.value.permanent
    hint = "--python 3.5=~/.local/share/swegreen/python3.5/bin/python3.5"
    with pytest.raises(InterpreterNotFound, match=re.escape(hint)):
        find_interpreter("3.5", search(tmp_path))


def test_given_interpreters_are_parsed_strictly() -> None:
    assert parse_given(" 3.5=/a/python3.5 , 3.6=/b/python ") == {
        "3.5": Path("/a/python3.5"),
        "3.6": Path("/b/python"),
    }
    for bad in ("3.5", "py35=/a", "3.5="):
        with pytest.raises(ValueError, match="VERSION=PATH"):
            parse_given(bad)


def test_an_evaluation_builds_with_the_given_interpreter_and_records_it(
    settings, sample, host_env, run_sample, tmp_path: Path
) -> None:
    """A recipe's version served by the user's interpreter (a wrapper that leaves a mark)."""
    from swegreen.core.classify import Status
    from swegreen.core.recipes import Recipe, RecipeBook
    from swegreen.evaluation.engine import build_engine

    from .conftest import sample_config

    mark = tmp_path / "used"
    wrapper = tmp_path / "mine" / "python"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\necho run >> {mark}\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    recipe = Recipe(
        python=HOST,
        packages=("pytest==8.3.5",),
        constraints=("pytest==8.3.5",),  # its own environment, not the sample's
        test_cmd="pytest --no-header -rA --tb=no -p no:cacheprovider",
        eval_timeout=120,
    )
    book = RecipeBook({"sample/calculator": {"1.0": recipe}})
    local = settings.model_copy(
        update={"cache_dir": tmp_path / "cache", "pythons": {HOST: wrapper}}
    )
    engine = build_engine(local, sample_config(sample), host_env, recipes=book)
    try:
        (row,) = run_sample("gold", engine=engine, instance_ids=["sample__calculator-1"]).results
    finally:
        engine.close()
    assert row.status == Status.RESOLVED, row.detail
    assert mark.exists()  # the build asked the given interpreter
    assert row.environment["interpreter"] == {
        "python": HOST,
        "given_by_user": True,
        "path": str(wrapper),
    }


def test_the_engine_reports_a_missing_interpreter_without_cloning(
    tmp_path: Path, settings, sample, host_env
) -> None:
    """A machine with no Python 3.6 anywhere (a clean PATH, pyenv and uv elsewhere), a row
    whose recipe asks for it: an error row that says what works, and no clone made."""
    from swegreen.core.recipes import Recipe, RecipeBook
    from swegreen.evaluation.engine import build_engine

    from .conftest import run_rows, sample_config

    # it reads requirements at the environment_setup_commit (calculator-2's is not its base
    # commit), which the row must first find in the repository (a clone): the interpreter
    # is checked before that too
    recipe = Recipe(
        python="3.6", packages=(), requirements=("requirements.txt",), test_cmd="pytest -rA"
    )
    assert recipe.reads_setup_commit
    book = RecipeBook({"sample/calculator": {"1.0": recipe}})
    env = {**host_env, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYENV_ROOT": str(tmp_path)}
    local = settings.model_copy(update={"cache_dir": tmp_path / "cache"})
    cfg = sample_config(sample, instance_ids=["sample__calculator-2"], max_attempts=1)
    engine = build_engine(local, cfg, env, recipes=book)
    try:
        outcome = run_rows(engine, cfg, "no-python")
    finally:
        engine.close()
    [row] = outcome.results
    assert (row.status.value, row.reason) == ("error", "interpreter_not_found"), row.detail
    assert "conda create -p ~/.local/share/swegreen/python3.6 python=3.6 -y" in row.detail
    repos = tmp_path / "cache" / "repos"
    assert not [p for p in repos.rglob("*") if p.name.endswith(".git") or p.name == "HEAD"]
