"""System packages for environments: a sysroot of what the host lacks, usable by builds."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swegreen.environments.system_deps import build_sysroot, join_host, missing_packages
from swegreen.processes.procs import run_process


def test_a_sysroot_of_dev_files_joins_the_hosts_runtime_libraries_and_headers(
    tmp_path: Path,
) -> None:
    host, sysroot = tmp_path / "host", tmp_path / "sysroot"
    (host / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (host / "usr/lib/x86_64-linux-gnu/libfoo.so.1").write_text("host library")
    (host / "usr/include/foo").mkdir(parents=True)
    (host / "usr/include/foo/base.h").write_text("/* from the host's libfoo-base-dev */")
    (host / "usr/include/math.h").write_text("/* glibc's */")
    (host / "usr/include/x86_64-linux-gnu/bits").mkdir(parents=True)
    lib = sysroot / "usr/lib/x86_64-linux-gnu"
    (lib / "pkgconfig").mkdir(parents=True)
    (lib / "pkgconfig/foo.pc").write_text(
        "prefix=/usr\nlibdir=${prefix}/lib/x86_64-linux-gnu\nincludedir=/usr/include\n"
    )
    (lib / "libfoo.so").symlink_to("libfoo.so.1")  # the -dev link; the library is the host's
    (lib / "libbar.so").symlink_to("libbar.so.2")  # on neither: left alone
    (sysroot / "usr/include/foo").mkdir(parents=True)
    (sysroot / "usr/include/x86_64-linux-gnu").mkdir(parents=True)
    (sysroot / "usr/include/foo/ext.h").write_text('#include "base.h"')

    # a compiler front end unpacked here; the rest of its GCC is the host's
    (host / "usr/lib/gcc/x86_64-linux-gnu/12").mkdir(parents=True)
    (host / "usr/lib/gcc/x86_64-linux-gnu/12/crtbegin.o").write_text("host crt")
    (host / "usr/libexec/gcc/x86_64-linux-gnu/12").mkdir(parents=True)
    (host / "usr/libexec/gcc/x86_64-linux-gnu/12/liblto_plugin.so").write_text("host plugin")
    (sysroot / "usr/lib/gcc/x86_64-linux-gnu/12").mkdir(parents=True)
    (sysroot / "usr/lib/gcc/x86_64-linux-gnu/12/f951").write_text("the sysroot's own")

    join_host(sysroot, host)

    gcc = sysroot / "usr/lib/gcc/x86_64-linux-gnu/12"
    assert (gcc / "crtbegin.o").read_text() == "host crt"
    assert not (gcc / "f951").is_symlink()
    plugin = sysroot / "usr/libexec/gcc/x86_64-linux-gnu/12/liblto_plugin.so"
    assert plugin.is_symlink() and plugin.read_text() == "host plugin"
    pc = (lib / "pkgconfig/foo.pc").read_text()
    assert pc.startswith(f"prefix={sysroot}/usr\n")
    assert "includedir=/usr/include" in pc  # only the prefix is the package's own
    assert (lib / "libfoo.so").resolve() == host / "usr/lib/x86_64-linux-gnu/libfoo.so.1"
    assert os.readlink(lib / "libbar.so") == "libbar.so.2"
    sibling = sysroot / "usr/include/foo/base.h"
    assert sibling.is_symlink() and sibling.read_text().startswith("/* from the host")
    assert not (sysroot / "usr/include/foo/ext.h").is_symlink()
    # nothing linked into the include roots: found there first (CPATH), the host's math.h
    # would hide libstdc++'s wrapper of it from C++ builds
    assert not (sysroot / "usr/include/math.h").exists()
    assert not (sysroot / "usr/include/x86_64-linux-gnu/bits").exists()


def _apt_ready() -> bool:
    return shutil.which("apt-get") is not None and shutil.which("cc") is not None


async def _step(argv: list[str], what: str, *, cwd: Path | None = None, extra_env=None, **_kw):
    env = {**os.environ, **(extra_env or {})}
    result = await run_process(argv, cwd=cwd or Path.cwd(), env=env, timeout=600)
    assert result.ok, f"{what}: {result.output[-2000:]}"
    return result


@pytest.mark.skipif(not _apt_ready(), reason="needs apt-get and a C compiler (Debian)")
def test_a_c_program_builds_against_a_debian_dev_package_the_host_lacks(tmp_path: Path) -> None:
    """What pycairo's build met: a -dev package whose headers include the host's and whose
    library is the host's; pkg-config, the compiler and the linker find all of it."""
    package, module = "libxcb-shm0-dev", "xcb-shm"
    if not asyncio.run(missing_packages([package], _step)):
        pytest.skip(f"{package} is installed on this machine: nothing to unpack")
    sysroot = tmp_path / "sysroot"
    env = asyncio.run(build_sysroot([package], sysroot, _step))
    assert env["PKG_CONFIG_PATH"].startswith(str(sysroot))
    run_env = {**os.environ, **env}
    flags = subprocess.run(
        ["pkg-config", "--cflags", "--libs", module],
        env=run_env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    # pkgconf leaves out what CPATH/LIBRARY_PATH already give the compiler and linker
    assert "-lxcb-shm" in flags
    source = tmp_path / "probe.c"
    source.write_text(
        "#include <xcb/shm.h>\n"  # includes "xcb.h", a sibling from another package
        "int main(void) { xcb_extension_t *shm = &xcb_shm_id; return shm == 0; }\n"
    )
    built = subprocess.run(
        ["cc", str(source), "-o", str(tmp_path / "probe"), *flags],
        env=run_env,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    assert subprocess.run([str(tmp_path / "probe")], env=run_env).returncode == 0


CPP_ISNAN = """#include <cmath>
#include <math.h>
int is_missing(double x) { return isnan(x); }
"""

FORTRAN = """program dot
  double precision :: x(3), y(3), ddot
  external ddot
  x = (/1d0, 2d0, 3d0/)
  y = (/4d0, 5d0, 6d0/)
  print '(F6.1)', ddot(3, x, 1, y, 1)
end program dot
"""


@pytest.mark.skipif(not _apt_ready(), reason="needs apt-get and a C compiler (Debian)")
def test_a_fortran_program_builds_and_runs_with_debians_gfortran_and_openblas_unpacked(
    tmp_path: Path,
) -> None:
    """What scipy's source build needs (scipy 1.5.2 for Python 3.9): a Fortran compiler
    and BLAS the host lacks, from a sysroot; the program runs with the sysroot's
    run-time variables, as the environment's tests do."""
    packages = ["gfortran", "libopenblas-dev"]
    if len(asyncio.run(missing_packages(packages, _step))) < 2:
        pytest.skip("gfortran and OpenBLAS are installed on this machine: nothing to unpack")
    sysroot = tmp_path / "sysroot"
    env = asyncio.run(build_sysroot(packages, sysroot, _step))
    assert env["OPENBLAS"] == str(sysroot / "usr/lib/x86_64-linux-gnu/openblas-pthread")
    build_env = {**os.environ, **env, "PATH": f"{sysroot}/usr/bin:{os.environ['PATH']}"}
    (tmp_path / "dot.f90").write_text(FORTRAN)
    subprocess.run(
        ["gfortran", "dot.f90", f"-L{env['OPENBLAS']}", "-lopenblas", "-o", "dot"],
        cwd=tmp_path,
        env=build_env,
        check=True,
    )
    run = subprocess.run(
        [str(tmp_path / "dot")],
        env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": env["LD_LIBRARY_PATH"]},
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stdout.strip() == "32.0"
    # C++ beside that sysroot still finds libstdc++'s math.h (isnan in the global
    # namespace), as scikit-learn 1.3's Cython-made C++ needs
    (tmp_path / "nan.cpp").write_text(CPP_ISNAN)
    subprocess.run(["g++", "-c", "nan.cpp", "-o", "nan.o"], cwd=tmp_path, env=build_env, check=True)


@pytest.mark.skipif(
    shutil.which("localedef") is None or not Path("/usr/share/i18n/locales/fr_FR").exists(),
    reason="needs glibc's localedef and its locale sources",
)
def test_a_locale_the_host_lacks_is_compiled_without_root_and_found_through_locpath(
    tmp_path: Path,
) -> None:
    """What django's recipe asks (en_US.UTF-8) on a host with only C.UTF-8: compiled into
    the environment, not the system (no locale-gen, no root), and used through LOCPATH."""
    from swegreen.environments.system_deps import build_locales, host_locales

    have = asyncio.run(host_locales(_step))
    assert "c.utf8" in have or "posix" in have
    wanted = "fr_FR.UTF-8"
    if wanted.lower().replace("utf-8", "utf8") in have:
        pytest.skip(f"{wanted} is installed on this machine: nothing to compile")
    env = asyncio.run(build_locales([wanted, "C.UTF-8"], tmp_path / "locales", have, _step))
    assert env == {"LOCPATH": str(tmp_path / "locales")}
    assert [p.name for p in (tmp_path / "locales").iterdir()] == [wanted]  # not C.UTF-8's
    probe = (
        "import locale; locale.setlocale(locale.LC_ALL, '');"
        " print(locale.localeconv()['decimal_point'])"
    )
    used = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, **env, "LC_ALL": wanted},
        capture_output=True,
        text=True,
    )
    assert used.returncode == 0 and used.stdout.strip() == ",", used.stderr
    missing = subprocess.run(
        [sys.executable, "-c", probe], env={**os.environ, "LC_ALL": wanted}, capture_output=True
    )
    assert missing.returncode != 0  # without LOCPATH the host has no such locale
