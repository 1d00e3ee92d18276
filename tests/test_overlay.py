"""Copy-on-write workspaces: what a killed engine left mounted is unmounted by the next
one; a live engine's mounts (another run on the same cache) are left alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from swegreen.sandbox import overlay

needs_root = pytest.mark.skipif(not overlay.can_mount(), reason="only a root engine mounts")


def make_lower(root: Path) -> Path:
    lower = root / "prepared" / "repo"
    lower.mkdir(parents=True)
    (lower / "a.txt").write_text("a\n")
    return lower


def _kernel() -> tuple[int, int]:
    major, minor = os.uname().release.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def _options(target: Path) -> str:
    """The super options of the overlay mounted at ``target`` (/proc/self/mountinfo)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        if line.split()[4] == str(target) and " - overlay " in line:
            return line.rsplit(" ", 1)[-1]
    return ""


@needs_root
def test_the_mounts_of_a_dead_engine_are_swept_and_a_live_ones_kept(tmp_path: Path) -> None:
    lower = make_lower(tmp_path)
    work = tmp_path / "work"
    dead, live = work / "dead" / "repo", work / "live" / "repo"
    # an engine that mounts and dies without unmounting (as under SIGKILL)
    code = (
        "import sys; from pathlib import Path; from swegreen.sandbox import overlay; "
        "sys.exit(0 if overlay.mount(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])) "
        "else 1)"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(lower), str(work / "dead.host" / "layers"), str(dead)],
        check=True,
    )
    assert overlay.mount(lower, work / "live.host" / "layers", live)  # this process: alive
    try:
        assert overlay.is_mounted(dead) and overlay.is_mounted(live)
        assert (dead / "a.txt").read_text() == "a\n"
        # nothing syncs the throwaway upper layer (this kernel has volatile: 5.10+)
        if _kernel() >= (5, 10):
            assert "volatile" in _options(live), _options(live)
        assert overlay.sweep(work) == [dead]
        assert not overlay.is_mounted(dead)
        assert overlay.is_mounted(live) and (live / "a.txt").read_text() == "a\n"
        assert overlay.sweep(tmp_path / "elsewhere") == []  # only under the root it is given
    finally:
        overlay.unmount(live)
    assert not overlay.is_mounted(live)
    assert (lower / "a.txt").read_text() == "a\n"


@needs_root
def test_a_mount_that_fails_leaves_nothing_behind_for_the_copy(tmp_path: Path) -> None:
    """Where the kernel refuses (here: a lower layer that is not a directory), the caller
    copies into the target, which must not exist: no layers, no target left."""
    lower = tmp_path / "not-a-dir"
    lower.write_text("x\n")
    layers, target = tmp_path / "w.host" / "layers", tmp_path / "w" / "repo"
    assert not overlay.mount(lower, layers, target)
    assert not target.exists() and not layers.exists()
    assert not overlay.is_mounted(target)


@pytest.mark.parametrize("mountable", [True, False], ids=["overlay", "copy"])
def test_writes_under_a_path_are_undone_and_the_path_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mountable: bool
) -> None:
    """What the AgentSWE protocol's commands rely on: after the undo, the directory holds
    what it held before, at the same path, whether an overlay or a copy kept it."""
    if mountable and not overlay.can_mount():
        pytest.skip("mounting needs root")
    if not mountable:
        monkeypatch.setattr(overlay, "can_mount", lambda: False)
    work = tmp_path / "repo"
    (work / "pkg").mkdir(parents=True)
    (work / "pkg" / "mod.py").write_text("x = 1\n")
    (work / "build.so").write_bytes(b"\0binary")
    (work / "link").symlink_to("pkg/mod.py")
    undo = overlay.discard_later(work, tmp_path / "layers")
    assert overlay.is_mounted(work) == mountable
    (work / "pkg" / "mod.py").write_text("x = 2\n")
    (work / "build.so").unlink()
    (work / "new.txt").write_text("left behind?")
    (work / "pkg" / "sub").mkdir()
    undo()
    assert not overlay.is_mounted(work)
    assert sorted(p.name for p in work.iterdir()) == ["build.so", "link", "pkg"]
    assert (work / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert (work / "build.so").read_bytes() == b"\0binary"
    assert (work / "link").is_symlink() and (work / "link").read_text() == "x = 1\n"
    assert not (work / "pkg" / "sub").exists() and not (tmp_path / "layers").exists()
