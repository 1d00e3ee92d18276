"""The sandbox: time, memory and process limits, no network, no host secrets."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from swegreen.sandbox import Isolation, LocalSandbox, SandboxPolicy, sandbox_env

ISO = Isolation.probe()
NEEDS_NETNS = pytest.mark.skipif(ISO.netns_cmd is None, reason="no network namespaces here")


def run(
    tmp_path: Path,
    script: str,
    policy: SandboxPolicy,
    env_extra: dict[str, str] | None = None,
    host_env: dict[str, str] | None = None,
):
    path = tmp_path / "script.sh"
    path.write_text("set -u\n" + script)
    env = sandbox_env(
        bin_dirs=[Path(sys.executable).parent],
        virtual_env=None,
        scratch=tmp_path,
        host_env=host_env or {},
        extra=env_extra,
    )
    return asyncio.run(
        LocalSandbox(ISO).run_script(
            path, cwd=tmp_path, env=env, policy=policy, log_path=tmp_path / "log.txt"
        )
    )


def test_time_limit_stops_the_script(tmp_path: Path) -> None:
    start = time.monotonic()
    result = run(tmp_path, "sleep 60\n", SandboxPolicy(timeout=1))
    assert result.timed_out and time.monotonic() - start < 15


def test_memory_limit_stops_a_runaway_allocation(tmp_path: Path) -> None:
    code = "x = bytearray(1200 * 1024 * 1024); print('allocated')"
    result = run(tmp_path, f'python -c "{code}"\n', SandboxPolicy(timeout=60, memory_mb=600))
    assert result.returncode != 0 and "MemoryError" in result.output
    ok = run(tmp_path, f'python -c "{code}"\n', SandboxPolicy(timeout=60, memory_mb=4096))
    assert ok.ok and "allocated" in ok.output


@pytest.mark.skipif(ISO.pids_cgroup is None and os.geteuid() == 0, reason="no way to limit root")
def test_process_limit_stops_a_fork_storm(tmp_path: Path) -> None:
    script = "for i in $(seq 1 60); do sleep 5 & done; wait\n"
    result = run(tmp_path, script, SandboxPolicy(timeout=60, max_processes=20))
    assert (
        "fork" in result.output.lower()
        or "resource temporarily unavailable" in result.output.lower()
    )


def test_no_host_secrets_and_private_home(tmp_path: Path) -> None:
    host = {
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "OPENAI_API_KEY": "sk-secret",
        "GITHUB_TOKEN": "ghp",
        "HOME": "/root",
        "PIP_INDEX_URL": "https://user:tok@index.example/simple",
    }
    result = run(tmp_path, "env\n", SandboxPolicy(timeout=30), host_env=host)
    out = result.output
    for secret in ("aws-secret", "sk-secret", "ghp", "tok@"):
        assert secret not in out
    assert f"HOME={tmp_path / 'home'}" in out and f"TMPDIR={tmp_path / 'tmp'}" in out
    assert "TZ=Etc/UTC" in out and "PYTHONHASHSEED=0" in out
    assert "PIP_INDEX_URL=https://index.example/simple" in out  # kept, credentials stripped


NET_PROBE = textwrap.dedent("""
    import socket, threading, time
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
    threading.Thread(target=lambda: srv.accept(), daemon=True).start()
    socket.create_connection(srv.getsockname(), timeout=5).close()
    print("loopback ok")
    t = time.time()
    try:
        socket.create_connection(("10.255.255.1", 80), timeout=1)
        print("remote connected")
    except socket.timeout:
        print("remote timed out", round(time.time() - t, 1))
    except OSError as e:
        print("remote failed", e)
    try:
        socket.getaddrinfo("pypi.org", 443)
        print("dns resolved")
    except OSError:
        print("dns failed")
""")


@NEEDS_NETNS
def test_the_test_command_has_no_network_but_loopback_works(tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text(NET_PROBE)
    wrapper = LocalSandbox(ISO).test_wrapper(SandboxPolicy(timeout=30))
    assert wrapper is not None
    result = run(tmp_path, f"{wrapper} python probe.py\n", SandboxPolicy(timeout=30))
    assert "loopback ok" in result.output
    assert "remote timed out" in result.output  # silent, like a host on the internet
    assert "dns failed" in result.output


def test_a_recipe_can_leave_the_network_on() -> None:
    assert LocalSandbox(ISO).test_wrapper(SandboxPolicy(timeout=30, network=True)) is None


def test_a_killed_engine_takes_its_sandbox_down(tmp_path: Path) -> None:
    """The engine is SIGKILLed mid-run: the test processes it started must not survive."""
    pidfile = tmp_path / "child.pid"
    driver = textwrap.dedent(f"""
        import asyncio
        from pathlib import Path
        from swegreen.sandbox import Isolation, LocalSandbox, SandboxPolicy
        script = Path({str(tmp_path / "long.sh")!r})
        script.write_text("sleep 300 & echo $! > {pidfile}; wait")
        asyncio.run(LocalSandbox(Isolation()).run_script(
            script, cwd=script.parent, env={{"PATH": "/usr/bin:/bin"}},
            policy=SandboxPolicy(timeout=600), log_path=script.with_suffix(".log")))
    """)
    engine = subprocess.Popen([sys.executable, "-c", driver])
    for _ in range(200):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        time.sleep(0.05)
    child = int(pidfile.read_text())
    os.kill(engine.pid, signal.SIGKILL)
    engine.wait()
    for _ in range(200):
        try:
            os.kill(child, 0)
            stat = Path(f"/proc/{child}/stat").read_text().split()[2]
            if stat == "Z":
                break
        except (ProcessLookupError, FileNotFoundError):
            break
        time.sleep(0.05)
    else:
        pytest.fail("the test process outlived the killed engine")


@pytest.mark.skipif(not ISO.mountns, reason="no mount namespaces here")
def test_a_recipe_cpu_limit_is_shown_like_docker_does(tmp_path: Path) -> None:
    """pylint sizes its job pool (and skips needs_two_cores tests) by the cgroup CPU quota."""
    probe = (
        "python -c \"import pathlib; d = pathlib.Path('/sys/fs/cgroup/cpu');"
        " print(d.joinpath('cpu.cfs_quota_us').read_text().strip(),"
        " d.joinpath('cpu.cfs_period_us').read_text().strip())\""
    )
    policy = SandboxPolicy(timeout=30, cpus=2)
    wrapper = LocalSandbox(ISO).test_wrapper(policy)
    assert wrapper is not None
    result = run(tmp_path, f"{wrapper} {probe}\n", policy)
    assert "200000 100000" in result.output
    host_quota = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
    if host_quota.exists():
        assert host_quota.read_text().strip() != "200000"  # the host's view is untouched


def test_temp_dirs_share_no_top_level_directory_with_the_checkout(tmp_path: Path) -> None:
    """sphinx-11510 regression: docutils makes an included file's path relative to the CWD
    only when both share their first path component. Upstream's /testbed and /tmp never do;
    a TMPDIR beside the checkout turned docnames into '../tmp/...' and failed the gold patch."""
    from swegreen.sandbox import scratch_dir

    for checkout in (
        Path("/work/cache/work/x/repo"),
        Path("/tmp/cache/work/x/repo"),
        tmp_path / "repo",
    ):
        scratch = scratch_dir(checkout, "s")
        assert scratch.parts[:2] != checkout.resolve().parts[:2]
