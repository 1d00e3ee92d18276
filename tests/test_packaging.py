"""The built wheel carries the package's data: a non-editable install (the container
images) without the recipes or the sample would fail every row."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_every_data_file_of_the_package(tmp_path: Path) -> None:
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    assert uv is not None, "uv is a dependency of the project (make setup)"
    # Build from the tracked files alone, as CI's clean checkout would: a stale egg-info
    # in a developer's tree can add files the packaging config forgets.
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    src = tmp_path / "src"
    for name in tracked:
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    out = tmp_path / "dist"
    subprocess.run([uv, "build", "--wheel", "--quiet", "--out-dir", str(out), str(src)], check=True)
    (wheel,) = out.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    data = [
        n.removeprefix("shared/")
        for n in tracked
        if n.startswith("shared/swegreen/") and not n.endswith(".py")
    ]
    assert "swegreen/data/swebench_recipes.json" in data
    assert [n for n in data if n not in names] == []


def test_the_images_lock_pins_every_dependency_and_one_uv() -> None:
    """container/requirements.lock (scripts/container_lock.sh) is what the image installs,
    with --no-deps: a dependency of pyproject.toml (or its `aws` extra) missing there, or
    pinned outside the range pyproject.toml allows, would break the image, not the tests."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [
        Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["aws"]]
    ]
    pins: dict[str, str] = {}
    for line in (ROOT / "container" / "requirements.lock").read_text().splitlines():
        if line and not line.startswith(("#", " ")):
            name, _, version = line.partition("==")
            assert version, f"not pinned: {line}"
            assert canonicalize_name(name) not in pins, f"pinned twice: {name}"
            pins[canonicalize_name(name)] = version
    for req in wanted:
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not in the lock: run scripts/container_lock.sh"
        assert req.specifier.contains(pins[name], prereleases=True), (req, pins[name])
    assert "uv" in pins  # the engine's one uv


def pinned(lock: str) -> dict[str, str]:
    from packaging.utils import canonicalize_name

    pins = {}
    for line in (ROOT / "container" / lock).read_text().splitlines():
        if line and not line.startswith(("#", " ")):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version
    return pins


def test_the_green_docker_lock_is_the_main_locks_versions_without_the_heavy_parts() -> None:
    """green-docker.Dockerfile installs requirements-docker.lock with --no-deps: each pin is
    the main lock's (one set of versions), its inputs are pinned, and what it leaves out
    (the hub client and its pyarrow/pandas, litellm, uv, numpy) stays out."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    main, docker = pinned("requirements.lock"), pinned("requirements-docker.lock")
    assert docker and all(main.get(name) == version for name, version in docker.items())
    for line in (ROOT / "container" / "requirements-docker.in").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            assert canonicalize_name(Requirement(line).name) in docker, line
    for left_out in ("datasets", "pyarrow", "pandas", "numpy", "litellm", "uv", "modal"):
        assert left_out not in docker, left_out


def test_no_tracked_file_is_one_git_ignores() -> None:
    """What .gitignore names is made by the machine (venvs, locks, results): never kept."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(
        ["git", "-C", str(root), "ls-files", "--cached", "--ignored", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == []
