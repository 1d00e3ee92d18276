"""Freezing an environment's dependencies as of a date.

Unpinned requirements resolve to today's releases and break old code (a docutils release
removed a module sphinx 3.x imports; a sparse release changed what xarray tests expect).
Upstream's images were built in 2024; resolving as of a date near then with
``uv pip compile --exclude-newer`` and passing the result to pip as constraints brings
those environments back, without touching any pin a recipe states.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

from swegreen.requirements import requirement_name

NO_CAP = "9999-12-31"


def find_uv(path: str) -> str | None:
    """uv from PATH, or beside the running interpreter (it is one of our dependencies)."""
    return shutil.which("uv", path=path) or shutil.which(
        "uv", path=str(Path(sys.executable).parent)
    )


def merge_requirements(base: Iterable[str], overriding: Iterable[str]) -> list[str]:
    """``base`` then ``overriding``, dropping base entries that ``overriding`` names again:
    upstream installs pip_packages after the conda packages, so their pins win."""
    overriding = list(overriding)
    names = {requirement_name(r) for r in overriding}
    return [r for r in base if requirement_name(r) not in names] + overriding


def compile_command(
    uv: str,
    requirements_in: Path,
    output: Path,
    python_version: str,
    exclude_newer: str,
    exempt: Iterable[str],
    constraints: Path | None,
) -> list[str]:
    argv = [
        uv,
        "pip",
        "compile",
        str(requirements_in),
        "--output-file",
        str(output),
        "--python-version",
        python_version,
        "--exclude-newer",
        exclude_newer,
        "--no-header",
        "--quiet",
        "--index-strategy",
        "unsafe-best-match",
    ]
    for package in exempt:
        argv += ["--exclude-newer-package", f"{package}={NO_CAP}"]
    if constraints is not None:
        argv += ["--constraint", str(constraints)]
    return argv
