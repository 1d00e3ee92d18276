"""Freezing an environment's dependencies as of a date.

Unpinned requirements resolve to today's releases and break old code (a docutils release
removed a module sphinx 3.x imports; a sparse release changed what xarray tests expect).
Upstream's images were built in 2024; resolving as of a date near then with
``uv pip compile --exclude-newer`` and passing the result to pip as constraints brings
those environments back, without touching any pin a recipe states.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion

from swegreen.environments.requirements import requirement_name

NO_CAP = "2999-12-31"  # uv rejects 9999-12-31 (its end of day overflows a timestamp)


def find_uv(path: str) -> str | None:
    """uv from PATH, or beside the running interpreter (it is one of our dependencies)."""
    return shutil.which("uv", path=path) or shutil.which(
        "uv", path=str(Path(sys.executable).parent)
    )


def merge_requirements(base: Iterable[str], overriding: Iterable[str]) -> list[str]:
    """``base`` then ``overriding``, as upstream installs them: the conda packages at
    creation, then ``pip install`` of the pip packages. Where both name a package, the
    pip package wins, unless the base pin already satisfies it: pip leaves a satisfied
    requirement alone, so scikit-learn's ``numpy==1.19.2`` stays when pip is then asked
    for plain ``numpy``."""
    base, kept = list(base), []
    pinned = {requirement_name(r): exact_pin(r) for r in base}
    for req in overriding:
        pin = pinned.get(requirement_name(req))
        if pin is not None and _satisfied_by(req, pin):
            continue
        kept.append(req)
    names = {requirement_name(r) for r in kept}
    return [r for r in base if requirement_name(r) not in names] + kept


def exact_pin(requirement: str) -> str | None:
    """The version of a ``name==X`` requirement, else None."""
    try:
        specs = list(Requirement(requirement).specifier)
    except InvalidRequirement:
        return None
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return None


def _satisfied_by(requirement: str, version: str) -> bool:
    try:
        return Requirement(requirement).specifier.contains(version, prereleases=True)
    except (InvalidRequirement, InvalidVersion):
        return False


def clashing_pins(pins: Iterable[str], resolver_output: str) -> set[str]:
    """Names of ``pins`` that the resolver's failure message blames (``you require
    jinja2==3.0.3 and sphinx[test]``)."""
    text = resolver_output.lower().replace("_", "-")
    return {
        name
        for name in map(requirement_name, pins)
        if re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", text)
    }


def yield_pins(requirements: Iterable[str], names: set[str]) -> list[str]:
    """``requirements`` with the version specifiers of ``names`` dropped (extras and markers
    kept). Upstream installs the project after the recipe's pip packages, so where the
    project's own requirements disagree with such a pin, pip's install step lets the
    project win (sphinx 3.x's setup.py asks Jinja2<3.0 after the recipe pinned 3.0.3)."""
    out = []
    for req in requirements:
        if requirement_name(req) in names:
            spec, _, marker = req.partition(";")
            m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*(\[[^\]]*\])?)", spec)
            req = (m.group(1) if m else spec.strip()) + (f"; {marker.strip()}" if marker else "")
        out.append(req)
    return out


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
