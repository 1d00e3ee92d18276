"""The built wheel carries the package's data: a non-editable install (the container
images) without the recipes would fail every real row with "no recipe"."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "shared" / "swegreen"


def test_the_wheel_holds_the_recipes_and_the_sample(tmp_path: Path) -> None:
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    assert uv is not None, "uv is a dependency of the project (make setup)"
    subprocess.run(
        [uv, "build", "--wheel", "--quiet", "--out-dir", str(tmp_path), str(ROOT)], check=True
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = [
        p for p in PACKAGE.rglob("*") if p.is_file() and p.suffix in {".json", ".diff", ".typed"}
    ]
    assert any(p.name == "swebench_recipes.json" for p in wanted)
    missing = [
        str(p.relative_to(PACKAGE))
        for p in wanted
        if f"swegreen/{p.relative_to(PACKAGE)}" not in names
    ]
    assert missing == []
