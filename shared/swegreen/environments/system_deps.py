"""System packages and locales for an environment, without root.

Upstream's images run ``apt-get install`` and ``locale-gen`` as root. Here a missing
Debian package is downloaded with ``apt-get download`` (its dependency closure from a
simulated install) and unpacked into the environment's own sysroot with ``dpkg -x``; a
missing locale is compiled into the environment with ``localedef``. Packages and locales
the machine already has are used as they are.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from swegreen.processes.procs import ProcResult

Step = Callable[..., Awaitable[ProcResult]]


async def missing_packages(packages: list[str], step: Step) -> list[str]:
    """The packages (with their dependencies) that ``apt-get install`` would add here."""
    result = await step(
        ["apt-get", "install", "-s", "--no-install-recommends", *packages],
        "resolving system packages",
    )
    return [line.split()[1] for line in result.output.splitlines() if line.startswith("Inst ")]


async def build_sysroot(packages: list[str], sysroot: Path, step: Step) -> dict[str, str]:
    """Unpack ``packages`` into ``sysroot``; returns the variables that make it usable, to
    programs (libraries, typelibs) and to builds (pkg-config, headers, link paths), pip's
    isolated builds included."""
    needed = await missing_packages(packages, step)
    if not needed:
        return {}
    debs = sysroot.parent / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    sysroot.mkdir(parents=True, exist_ok=True)
    await step(["apt-get", "download", *needed], "downloading system packages", cwd=debs)
    for deb in sorted(debs.glob("*.deb")):
        await step(["dpkg", "-x", str(deb), str(sysroot)], f"unpacking {deb.name}")
    shutil.rmtree(debs, ignore_errors=True)
    join_host(sysroot, Path("/"))
    env = {"SWEGREEN_SYSROOT": str(sysroot)}
    libdirs = _existing(sysroot, LIB_DIRS)
    if libdirs:
        env["LD_LIBRARY_PATH"] = ":".join(libdirs)
        env["LIBRARY_PATH"] = ":".join(libdirs)
    if pkgconfig := _existing(sysroot, PKGCONFIG_DIRS):
        env["PKG_CONFIG_PATH"] = ":".join(pkgconfig)
    if include := _existing(sysroot, ("usr/include/x86_64-linux-gnu", "usr/include")):
        env["CPATH"] = ":".join(include)
    if typelibs := _existing(sysroot, ("usr/lib/x86_64-linux-gnu/girepository-1.0",)):
        env["GI_TYPELIB_PATH"] = ":".join(typelibs)
    if (sysroot / BLAS_DIR).is_dir():
        env["OPENBLAS"] = str(sysroot / BLAS_DIR)  # numpy.distutils' way to be told where
    graphviz = sysroot / "usr" / "lib" / "x86_64-linux-gnu" / "graphviz"
    if graphviz.is_dir():
        env["GVBINDIR"] = str(graphviz)
        dot = sysroot / "usr" / "bin" / "dot"
        await step([str(dot), "-c"], "registering graphviz plugins", extra_env=env)
    return env


# Debian's BLAS and LAPACK live in a folder of their own that update-alternatives links
# into the library path; a sysroot runs no maintainer scripts, so the folder is named here.
BLAS_DIR = "usr/lib/x86_64-linux-gnu/openblas-pthread"
LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib", "lib/x86_64-linux-gnu", BLAS_DIR)
PKGCONFIG_DIRS = (
    "usr/lib/x86_64-linux-gnu/pkgconfig",
    "usr/lib/pkgconfig",
    "usr/share/pkgconfig",
    f"{BLAS_DIR}/pkgconfig",
)


def _existing(root: Path, relative: tuple[str, ...]) -> list[str]:
    return [str(root / r) for r in relative if (root / r).is_dir()]


def join_host(sysroot: Path, host: Path) -> None:
    """Make a sysroot holding only what the host lacks usable next to the host's own files.

    apt unpacks a -dev package whose runtime library the host already has, so three things
    point at the wrong place: its pkg-config files say ``prefix=/usr``, its ``libX.so``
    symlink names a ``libX.so.N`` that is on the host only, and its headers include
    siblings (``#include "xcb.h"``) from a host directory. Prefixes are rewritten to the
    sysroot, dangling symlinks pointed at the host's file, and each include directory
    both have gets links to the host's entries it lacks.
    """
    for pc in sysroot.glob("**/pkgconfig/*.pc"):
        text = pc.read_text(errors="surrogateescape")
        fixed = re.sub(r"^prefix=/usr\b", f"prefix={sysroot}/usr", text, flags=re.M)
        if fixed != text:
            pc.write_text(fixed, errors="surrogateescape")
    for directory in _existing(sysroot, LIB_DIRS):
        for link in Path(directory).iterdir():
            if link.is_symlink() and not link.exists():
                target = host / link.parent.relative_to(sysroot) / os.readlink(link)
                if target.exists():
                    link.unlink()
                    link.symlink_to(target)
    include = sysroot / "usr" / "include"
    # Not into the include roots themselves (usr/include, its multiarch folder): the
    # compiler searches the host's anyway, and the sysroot's come first (CPATH), so a
    # link there to the host's math.h would hide libstdc++'s own math.h, which puts
    # std::isnan in the global namespace (scikit-learn 1.3's C++ stopped compiling).
    roots = {include, include / "x86_64-linux-gnu"}
    for directory, _dirs, _files in os.walk(include):
        if Path(directory) not in roots:
            _link_missing(Path(directory), host / Path(directory).relative_to(sysroot))
    # A compiler unpacked here (gfortran) is a front end of the host's GCC: it looks for
    # the rest of that GCC (the linker plugin, crt files) beside itself.
    for version in sysroot.glob("usr/lib/gcc/*/*"):
        relative = version.relative_to(sysroot / "usr" / "lib" / "gcc")
        for part in ("lib", "libexec"):
            theirs = host / "usr" / part / "gcc" / relative
            if theirs.is_dir():
                mine = sysroot / "usr" / part / "gcc" / relative
                mine.mkdir(parents=True, exist_ok=True)
                _link_missing(mine, theirs)


def _link_missing(here: Path, theirs: Path) -> None:
    """Links in ``here`` to the entries of the host's ``theirs`` that ``here`` lacks."""
    if theirs.is_dir() and not theirs.is_symlink():
        for entry in theirs.iterdir():
            if not os.path.lexists(here / entry.name):
                (here / entry.name).symlink_to(entry)


def sysroot_bin_dirs(sysroot: Path) -> list[Path]:
    return [
        d
        for d in (sysroot / "usr" / "bin", sysroot / "usr" / "sbin", sysroot / "bin")
        if d.is_dir()
    ]


async def build_locales(
    locales: list[str], dest: Path, host_locales: set[str], step: Step
) -> dict[str, str]:
    """Compile the locales the host lacks into ``dest``; returns LOCPATH when it did."""
    wanted = [loc for loc in locales if _norm(loc) not in host_locales]
    if not wanted:
        return {}
    dest.mkdir(parents=True, exist_ok=True)
    for loc in wanted:
        name, _, charset = loc.partition(".")
        await step(
            ["localedef", "-i", name, "-f", charset or "UTF-8", str(dest / loc)],
            f"compiling locale {loc}",
        )
    return {"LOCPATH": str(dest)}


async def host_locales(step: Step) -> set[str]:
    result = await step(["locale", "-a"], "listing locales")
    return {_norm(line) for line in result.output.split()}


def _norm(locale: str) -> str:
    return locale.lower().replace("utf-8", "utf8")


def merge_path_vars(*parts: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in parts:
        for key, value in part.items():
            if key == "LD_LIBRARY_PATH" and key in out:
                out[key] = ":".join(dict.fromkeys([*out[key].split(":"), *value.split(":")]))
            else:
                out[key] = value
    return out
