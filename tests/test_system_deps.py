"""System packages for environments: a sysroot of what the host lacks, usable by builds."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from swegreen.procs import run_process
from swegreen.system_deps import build_sysroot, join_host, missing_packages


def test_a_sysroot_of_dev_files_joins_the_hosts_runtime_libraries_and_headers(
    tmp_path: Path,
) -> None:
    host, sysroot = tmp_path / "host", tmp_path / "sysroot"
    (host / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (host / "usr/lib/x86_64-linux-gnu/libfoo.so.1").write_text("host library")
    (host / "usr/include/foo").mkdir(parents=True)
    (host / "usr/include/foo/base.h").write_text("/* from the host's libfoo-base-dev */")
    lib = sysroot / "usr/lib/x86_64-linux-gnu"
    (lib / "pkgconfig").mkdir(parents=True)
    (lib / "pkgconfig/foo.pc").write_text(
        "prefix=/usr\nlibdir=${prefix}/lib/x86_64-linux-gnu\nincludedir=/usr/include\n"
    )
    (lib / "libfoo.so").symlink_to("libfoo.so.1")  # the -dev link; the library is the host's
    (lib / "libbar.so").symlink_to("libbar.so.2")  # on neither: left alone
    (sysroot / "usr/include/foo").mkdir(parents=True)
    (sysroot / "usr/include/foo/ext.h").write_text('#include "base.h"')

    join_host(sysroot, host)

    pc = (lib / "pkgconfig/foo.pc").read_text()
    assert pc.startswith(f"prefix={sysroot}/usr\n")
    assert "includedir=/usr/include" in pc  # only the prefix is the package's own
    assert (lib / "libfoo.so").resolve() == host / "usr/lib/x86_64-linux-gnu/libfoo.so.1"
    assert os.readlink(lib / "libbar.so") == "libbar.so.2"
    sibling = sysroot / "usr/include/foo/base.h"
    assert sibling.is_symlink() and sibling.read_text().startswith("/* from the host")
    assert not (sysroot / "usr/include/foo/ext.h").is_symlink()


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
