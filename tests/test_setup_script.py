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
