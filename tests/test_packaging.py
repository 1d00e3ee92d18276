"""The built wheel carries the package's data: a non-editable install (the container
images) without the recipes or the sample would fail every row."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

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
