"""Finding the interpreter a recipe asks for, and the error when it is not there."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from swegreen.errors import InterpreterNotFound
from swegreen.interpreters import InterpreterSearch, describe_interpreter, find_interpreter

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
    with pytest.raises(InterpreterNotFound) as info:
        find_interpreter("3.5", search(tmp_path), needed_by="django/django 1.11")
    message = str(info.value)
    assert "Python 3.5 (needed by django/django 1.11) was not found on PATH" in message
    assert "uv python install 3.5" in message and "pyenv install 3.5" in message
    assert info.value.reason == "interpreter_not_found"


def test_bad_version_strings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InterpreterNotFound, match=r"expected X\.Y"):
        find_interpreter("three", search(tmp_path))


def test_describe_reports_version_and_installation_prefix() -> None:
    info = describe_interpreter(Path(sys.executable))
    assert info.version == HOST and info.prefix == Path(sys.base_prefix)
