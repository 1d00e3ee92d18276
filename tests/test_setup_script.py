"""``scripts/install-system-deps.sh`` (what ``make setup`` runs first) on machines it cannot
install on: a macOS laptop (nothing to install there: the sandbox is Linux's) and a
non-root user without sudo (it names every package and the command to install them)."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "install-system-deps.sh"


def fake_bin(tmp_path: Path, tools: dict[str, str]) -> Path:
    """A PATH of its own: only ``tools`` (name -> shell body) and the real ``uname``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    if "uname" not in tools:
        (bin_dir / "uname").symlink_to("/usr/bin/uname")
    return bin_dir


def run(bin_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/bash", str(SCRIPT)],
        env={"PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_on_macos_it_installs_nothing_and_says_what_aws_needs(tmp_path: Path) -> None:
    done = run(fake_bin(tmp_path, {"uname": "echo Darwin"}))
    assert done.returncode == 0, done.stderr
    assert "macOS" in done.stderr and "brew install node" in done.stderr


def test_a_user_without_root_or_sudo_is_told_every_package_and_how(tmp_path: Path) -> None:
    """No Python either (a bare Debian: its cloud images ship python3 without venv, its
    containers none): the Python packages are named with the others."""
    done = run(fake_bin(tmp_path, {"id": "echo 1000", "sudo": "exit 1"}))
    assert done.returncode == 1
    assert "missing system packages: git " in done.stderr
    assert "bubblewrap iproute2 util-linux ccache chromium python3 python3-venv (3.11+; " in (
        done.stderr
    )
    assert "Ubuntu 22.04: python3.11 python3.11-venv" in done.stderr
    assert "sudo apt-get install git " in done.stderr
    assert "bubblewrap iproute2 util-linux ccache chromium python3 python3-venv" in done.stderr
    assert "sudo dnf install git " in done.stderr and "iproute util-linux" in done.stderr


def test_another_apt_holding_its_locks_is_waited_for(tmp_path: Path) -> None:
    """As root on a Debian machine whose apt is busy (unattended-upgrades on a fresh one):
    apt's own locks held by another process for a few seconds; the script says it waits,
    then installs (here bubblewrap, hidden from its PATH, so that it has something to
    install; apt finds it installed) instead of failing with apt's raw lock error."""
    import fcntl
    import os
    import shutil
    import threading

    import pytest

    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("needs root and apt-get (Debian, Ubuntu)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tools = ("apt-get", "dpkg", "gpgv", "id", "uname", "ip", "setpriv", "sleep", "env", "git")
    for tool in tools:
        if (found := shutil.which(tool)) is not None:
            (bin_dir / tool).symlink_to(found)
    if not Path("/usr/bin/python3.11").exists():
        pytest.skip("needs Debian 12's python3.11 (the Python it would install)")
    (bin_dir / "python3.11").symlink_to("/usr/bin/python3.11")  # not a pyenv shim
    held = []
    for path in ("/var/lib/dpkg/lock-frontend", "/var/lib/apt/lists/lock"):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.append(fd)
    proc = subprocess.Popen(
        ["/bin/bash", str(SCRIPT), "--demo"],
        env={"PATH": f"{bin_dir}:/usr/sbin:/sbin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # released once the script has met the lock and said so (its first try fails at once)
    waited = threading.Event()
    lines: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "waiting for it" in line:
                waited.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert waited.wait(120), "".join(lines)
    finally:
        for fd in held:
            os.close(fd)
    proc.wait(timeout=600)
    reader.join(10)
    assert proc.returncode == 0, "".join(lines)
    assert "another apt holds its lock: waiting for it (up to 10 minutes)" in "".join(lines)
    assert "Could not get lock" not in "".join(lines)


# -- the Makefile: its Python found after the system packages are in ----------------------

ROOT = SCRIPT.parents[1]
DEBIAN_PYTHON = Path("/usr/bin/python3.11")  # what `apt-get install python3.11` gives


def machine(tmp_path: Path, apt_has: str, python3: str | None = None) -> Path:
    """A PATH for `make` as a bare Debian 12 as root sees it: the sandbox's tools and git,
    no Python but ``python3`` (a script body, if given); a fake apt-get that records what
    it installs and puts ``python3.11`` on the PATH when it installs that, and an
    apt-cache whose sources have ``apt_has`` (a package name, or "")."""
    import shutil

    import pytest

    if not DEBIAN_PYTHON.exists() or shutil.which("make") is None:
        pytest.skip("needs make and Debian 12's python3.11 (what apt would install)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sh", "env", "uname", "git", "bwrap", "ip", "setpriv", "make", "ln",
                 "cat", "mkdir", "rm", "touch", "readlink", "chmod", "sleep"):  # fmt: skip
        if (found := shutil.which(tool)) is not None:
            (bin_dir / tool).symlink_to(found)
    log = tmp_path / "apt.log"
    tools = {
        "id": "echo 0",
        "apt-get": f'echo "$*" >> {log}\n'
        f'case "$*" in *" install "*python3.11*) '
        f"ln -sf {DEBIAN_PYTHON} {bin_dir}/python3.11;; esac",
        "apt-cache": f'[ "$2" = "{apt_has}" ] || exit 100',
    }
    if python3 is not None:
        tools["python3"] = python3
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def make_venv(bin_dir: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    venv = tmp_path / "venv"
    return subprocess.run(
        ["make", "--no-print-directory", f"VENV={venv}", f"{venv}/bin/python"],
        cwd=ROOT,
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_make_installs_a_python_where_there_is_none_and_builds_the_venv_with_it(
    tmp_path: Path,
) -> None:
    """No Python at all: `make` used to resolve PYTHON when it read the Makefile, before
    the script ran (`make: m: No such file or directory`). Now the script installs the
    newest the sources have, with its venv, and the Makefile looks after."""
    bin_dir = machine(tmp_path, apt_has="python3.11-venv")
    done = make_venv(bin_dir, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    installed = (tmp_path / "apt.log").read_text().splitlines()
    assert any(
        line.startswith("-o DPkg::Lock::Timeout=600 install")
        and "python3.11 python3.11-venv" in line
        for line in installed
    ), installed
    assert f"virtual environment from {bin_dir}/python3.11" in done.stdout
    version = subprocess.run(
        [str(tmp_path / "venv/bin/python"), "-c", "import sys, pip; print(sys.version_info[:2])"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert version.stdout.strip() == "(3, 11)", version.stderr


def test_a_python3_without_venv_gets_the_venv_package(tmp_path: Path) -> None:
    """Debian's and Ubuntu's cloud images: python3 without python3-venv (`ensurepip is not
    available`). Its venv package is installed, and the venv made."""
    lacking = f'case "$*" in *ensurepip*) exit 1;; esac\nexec {DEBIAN_PYTHON} "$@"'
    bin_dir = machine(tmp_path, apt_has="python3.11-venv", python3=lacking)
    done = make_venv(bin_dir, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "python3.11-venv" in (tmp_path / "apt.log").read_text()
    assert (tmp_path / "venv/bin/python").exists()


def test_where_no_package_gives_a_python_make_stops_saying_what_to_do(tmp_path: Path) -> None:
    """Ubuntu 22.04 without universe, an old Debian: no python3.11+ package. The script
    says where to get one (deadsnakes, uv) and `make` stops there."""
    bin_dir = machine(tmp_path, apt_has="")
    done = make_venv(bin_dir, tmp_path)
    assert done.returncode != 0
    assert "no Python 3.11+ with venv here" in done.stderr
    assert "ppa:deadsnakes/ppa" in done.stderr and "uv python install 3.11" in done.stderr
    assert not (tmp_path / "venv").exists()
