"""The README's first command where people start from: a container that refuses user
namespaces (Docker's default seccomp profile), where bubblewrap cannot run; the demo's own
configuration from the environment. scripts/first-contact.sh runs `make demo` itself in a
bare Debian 12 container (docs/validation-log.md has its runs)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from swegreen.sample import SampleBenchmark
from swegreen.sandbox import confine
from swegreen.sandbox.isolation import confine_argv, spec_pipe
from tests.test_integrity_round4 import no_namespaces_filter


def _in_a_default_container(argv: list[str], tmp_path: Path, env: dict[str, str]) -> Any:
    """``argv`` with no capability, no new privileges and namespaces refused as Docker's
    default seccomp profile refuses them (bubblewrap's probe then fails)."""
    spec_fd = spec_pipe({"landlock": False, "seccomp": no_namespaces_filter().hex()})
    try:
        return subprocess.run(
            ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
             *confine_argv(spec_fd), *argv],
            capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path,
            pass_fds=(spec_fd,),
        )  # fmt: skip
    finally:
        os.close(spec_fd)


def test_where_bubblewrap_cannot_run_the_default_isolation_is_landlock_said_and_recorded(
    sample: SampleBenchmark, session_cache: Path, tmp_path: Path
) -> None:
    """No isolation asked for (the default, auto): bubblewrap's probe fails in such a
    container, Landlock confines the participant's code instead, the run says so on one
    line, every row records it, and the verdicts are the sample's."""
    if platform.machine() != "x86_64" or not shutil.which("setpriv") or confine.abi() < 1:
        pytest.skip("needs x86-64, setpriv and Landlock")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWEGREEN_")}
    ids = sorted(sample.expected)[:2]
    out = _in_a_default_container(
        [sys.executable, "-m", "swegreen", "run", "--dataset", "swegreen:sample",
         "--patches", "gold", "--instance-ids", ",".join(ids), "--cache-dir",
         str(tmp_path / "cache"), "--output-dir", str(tmp_path / "out"), "--run-id", "auto",
         "--no-progress"],
        tmp_path, {**env, "HOME": str(tmp_path)},
    )  # fmt: skip
    said = out.stdout + out.stderr
    assert out.returncode == 0, said[-4000:]
    notes = [line for line in said.splitlines() if "isolation = auto:" in line]
    assert len(notes) == 1 and "bubblewrap cannot run here" in notes[0], said[-3000:]
    assert "so Landlock confines participant code" in notes[0]
    rows = [
        json.loads(x) for x in (tmp_path / "out/auto/instances.jsonl").read_text().split("\n") if x
    ]
    assert sorted(r["instance_id"] for r in rows) == ids
    assert {r["isolation"] for r in rows} == {"landlock"}
    assert {r["status"] for r in rows} == {"resolved"}, [r["detail"] for r in rows]


def test_where_neither_sandbox_runs_auto_refuses_naming_both(tmp_path: Path) -> None:
    from swegreen.core.errors import SandboxUnavailable
    from swegreen.sandbox import isolation as iso

    original_abi, original_which = confine.abi, iso.shutil.which
    try:
        confine.abi = lambda: 0  # type: ignore[assignment]  # a kernel without Landlock
        iso.shutil.which = lambda name, **kw: (
            None if name == "bwrap" else original_which(name, **kw)
        )  # type: ignore[assignment]
        with pytest.raises(SandboxUnavailable, match="neither sandbox runs here") as refused:
            iso.Isolation.probe("auto")
        assert "bubblewrap (bwrap) is not installed" in str(refused.value)
        assert "Landlock is not available" in str(refused.value)
    finally:
        confine.abi = original_abi  # type: ignore[assignment]
        iso.shutil.which = original_which  # type: ignore[assignment]


def test_the_demo_reads_the_hosts_settings_from_the_environment_and_its_flag(
    tmp_path: Path,
) -> None:
    """`swegreen demo` builds its configuration from SWEGREEN_* (below --isolation): a
    value there is validated, and named, before anything is built."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWEGREEN_")}
    demo = [sys.executable, "-m", "swegreen", "demo", "--cache-dir", str(tmp_path / "c"),
            "--output-dir", str(tmp_path / "o"), "--no-progress"]  # fmt: skip
    bad = subprocess.run(
        demo, capture_output=True, text=True, timeout=300,
        env={**env, "SWEGREEN_ISOLATION": "sandboxy"},
    )  # fmt: skip
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "isolation" in bad.stdout + bad.stderr and "environment" in bad.stdout + bad.stderr
    flagged = subprocess.run(
        [*demo, "--isolation", "sandboxy"], capture_output=True, text=True, timeout=300, env=env
    )
    assert flagged.returncode == 2 and "invalid choice" in flagged.stderr


def test_a_host_without_git_or_patch_refuses_to_start_naming_them(tmp_path: Path) -> None:
    """A bare container has neither: without GNU patch the apply chain's last step failed
    as an internal error row (the crafted calculator-3 in the first-contact run)."""
    from swegreen.core.errors import SandboxUnavailable
    from swegreen.sandbox.tools import require_tools

    empty = tmp_path / "bin"
    empty.mkdir()
    with pytest.raises(SandboxUnavailable) as refused:
        require_tools(str(empty))
    said = str(refused.value)
    assert "git (" in said and "patch (the official apply chain's last step" in said
    assert "apt-get install git patch" in said
    require_tools()  # this machine has both
