"""Turning a recipe's inputs into pip requirements: conda specs, environment.yml files and
requirements files (with their ``-r`` includes).

The official images are conda environments; this project builds virtualenv-style
environments with pip. Most conda packages exist on PyPI under the same name; the table
below records the ones that do not, and the ones pip must not install at all.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import yaml

# conda name -> PyPI name, where they differ.
CONDA_TO_PIP = {
    "matplotlib-base": "matplotlib",
    "dask-core": "dask",
    "netcdf4": "netCDF4",
    "iris": "scitools-iris",
    "pseudonetcdf": "PseudoNetCDF",
    "pytables": "tables",
    "pillow": "Pillow",
    "python-dateutil": "python-dateutil",
    "pyqt": "PyQt5",
    "msgpack-python": "msgpack",
}
# conda packages pip does not install, with the reason recorded in the build log.
CONDA_ONLY = {
    "python": "the interpreter is chosen by the recipe's python version",
    "pip": "pip is part of the base tooling",
    "hdf5": "bundled in the h5py/netCDF4 wheels",
    "cdms2": "not on PyPI",
    "cfgrib": "needs eccodes from conda; installed by pip_packages where a recipe wants it",
    "libnetcdf": "bundled in the netCDF4 wheels",
    "compilers": "the build machine's compilers are used",
    "c-compiler": "the build machine's compilers are used",
    "cxx-compiler": "the build machine's compilers are used",
    "pkg-config": "a system tool, not a Python package",
    "ffmpeg": "a system tool, not a Python package",
    "graphviz": "a system tool (system_packages), not a Python package",
    "tk": "part of the interpreter",
    "freetype": "bundled in the matplotlib wheels",
    "qhull": "bundled in the matplotlib wheels",
    "wxpython": (
        "PyPI has only its sources for Linux (wheels live on extras.wxpython.org) and "
        "building wxWidgets takes hours; matplotlib's wx tests need a display and skip "
        "without one, as they do in upstream's images"
    ),
}
# conda packages that are system libraries: the Debian packages giving the same thing
# (unpacked into the environment's sysroot, system_deps.py).
CONDA_SYSTEM = {
    "gtk3": ["gir1.2-gtk-3.0"],
    "gtk4": ["gir1.2-gtk-4.0"],
}
# PyPI packages PyPI has only as source, with the Debian packages their builds need
# (conda ships them as binaries linked against its own libraries).
BUILD_SYSTEM_PACKAGES = {
    "pycairo": ["pkg-config", "libcairo2-dev"],
    "pygobject": ["pkg-config", "libcairo2-dev", "libgirepository1.0-dev"],
}
_SPEC = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(\[[^\]]*\])?\s*(.*?)\s*$")


@dataclass
class Translation:
    requirements: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    system_packages: list[str] = field(default_factory=list)  # Debian names, for the sysroot


def conda_to_pip(spec: str) -> str | None:
    """One conda spec as a pip requirement, or None when pip must not install it."""
    spec = spec.strip().strip("'\"")
    if not spec or spec.startswith("#"):
        return None
    if "::" in spec:  # channel::package
        spec = spec.split("::", 1)[1]
    m = _SPEC.match(spec)
    if not m:
        return spec
    name, extras, version = m.group(1), m.group(2) or "", m.group(3).replace(" ", "")
    if name.lower() in CONDA_ONLY:
        return None
    name = CONDA_TO_PIP.get(name.lower(), name)
    if version and version[0] == "=" and not version.startswith("=="):
        version = "=" + version  # conda's "pkg=1.2" is pip's "pkg==1.2"
    elif version and version[0].isdigit():
        version = "==" + version  # conda's "pkg 1.2"
    if version.endswith(".*") and version.startswith("=="):
        pass  # pip understands ==1.2.*
    return f"{name}{extras}{version}"


def translate_specs(specs: Iterable[str]) -> Translation:
    out = Translation()
    for spec in specs:
        system = CONDA_SYSTEM.get(_conda_name(spec))
        if system is not None:
            out.system_packages += [p for p in system if p not in out.system_packages]
            continue
        req = conda_to_pip(spec)
        if req is None:
            if spec.strip() and not spec.strip().startswith("#"):
                out.dropped.append(spec.strip())
        else:
            out.requirements.append(req)
    return out


def environment_yml_requirements(text: str) -> Translation:
    """An environment.yml's conda dependencies and nested pip list, as pip requirements."""
    data = yaml.safe_load(text) or {}
    out = Translation()
    for dep in data.get("dependencies", []) or []:
        if isinstance(dep, dict):
            for pip_req in dep.get("pip", []) or []:
                out.requirements.append(str(pip_req))
        else:
            part = translate_specs([str(dep)])
            out.requirements += part.requirements
            out.dropped += part.dropped
            out.system_packages += part.system_packages
    return out


def _conda_name(spec: str) -> str:
    spec = spec.strip().strip("'\"").split("::")[-1]
    m = _SPEC.match(spec)
    return m.group(1).lower() if m else spec.lower()


# PyPI packages that ship wheels for most interpreters, with the Debian packages a source
# build needs (their wheels carry the compiled libraries inside). Used only when a pin has
# no wheel for the environment's interpreter (source_builds.py).
SOURCE_BUILD_SYSTEM_PACKAGES = {
    "scipy": ["gfortran", "libopenblas-dev"],
}


def _debian_packages(requirements: Iterable[str], table: dict[str, list[str]]) -> list[str]:
    """``table``'s Debian packages for ``requirements``, each once, in order."""
    found = (pkg for req in requirements for pkg in table.get(requirement_name(req), []))
    return list(dict.fromkeys(found))


def source_build_system_packages(names: Iterable[str]) -> list[str]:
    """The Debian packages source builds of ``names`` need (SOURCE_BUILD_SYSTEM_PACKAGES)."""
    return _debian_packages(names, SOURCE_BUILD_SYSTEM_PACKAGES)


def build_system_packages(requirements: Iterable[str]) -> list[str]:
    """The Debian packages the source builds of ``requirements`` need (BUILD_SYSTEM_PACKAGES)."""
    return _debian_packages(requirements, BUILD_SYSTEM_PACKAGES)


def requirements_txt(
    text: str, read: Callable[[str], str | None], base: str = "", depth: int = 0
) -> list[str]:
    """Lines of a requirements file pip can use here, ``-r`` includes expanded (read relative
    to ``base``): no comments, no editable install of the repository itself, as upstream's
    ``get_requirements_by_commit`` filters."""
    keep: list[str] = []
    for line in text.splitlines():
        stripped = line.split(" #", 1)[0].strip()
        if stripped.startswith(("-r ", "--requirement ")) and depth < 3:
            name = stripped.split(None, 1)[1].strip()
            path = posixpath.normpath(posixpath.join(base, name))
            included = read(path)
            if included is not None:
                keep += requirements_txt(included, read, posixpath.dirname(path), depth + 1)
            continue
        if not stripped or stripped.startswith(("#", "-e .", ".[test", "-r", "-c ", "--")):
            continue
        keep.append(stripped)
    return keep


def requirement_name(req: str) -> str:
    m = _SPEC.match(req.split(";", 1)[0])
    return (m.group(1) if m else req).lower().replace("_", "-")
