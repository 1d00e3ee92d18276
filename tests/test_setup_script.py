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
    done = run(fake_bin(tmp_path, {"id": "echo 1000", "sudo": "exit 1"}))
    assert done.returncode == 1
    assert "missing system packages: bubblewrap iproute2 util-linux ccache chromium" in (
        done.stderr
    )
    assert "sudo apt-get install bubblewrap iproute2" in done.stderr
    assert "sudo dnf install bubblewrap iproute util-linux" in done.stderr


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
    for tool in ("apt-get", "dpkg", "gpgv", "id", "uname", "ip", "setpriv", "sleep", "env"):
        if (found := shutil.which(tool)) is not None:
            (bin_dir / tool).symlink_to(found)
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
