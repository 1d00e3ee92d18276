"""The local sandbox that runs an eval script.

What it guarantees, whatever the host allows:
  * its own process group, killed as a whole at the time limit or on cancellation, and
    an outer ``timeout`` that still ends the tree if the engine itself is killed;
  * a clean environment built from scratch: HOME and temp dirs inside the workspace,
    TZ and PYTHONHASHSEED pinned, none of the host's variables (so no cloud keys or API
    tokens);
  * an address-space limit per process (RLIMIT_AS).
What it adds where the host allows it (``Isolation.probe``):
  * no network for the test command (a network namespace with loopback up);
  * a process-count limit (a pids cgroup; RLIMIT_NPROC when not root).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from swegreen.procs import ProcResult, run_process

OUTER_GRACE = 30  # seconds the outer `timeout` waits beyond the engine's own limit
_CREDENTIALS = re.compile(r"(://)[^/@\s]+@")
# Host variables a test run may need to reach a package index at eval-time install.
INDEX_PASSTHROUGH = (
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_CERT",
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "no_proxy",
)


@dataclass(frozen=True)
class SandboxPolicy:
    timeout: float
    network: bool = False
    cpus: float | None = None  # a Docker-like CPU quota, as the tests see it
    memory_mb: int | None = 16384
    max_processes: int | None = 4096


# Inside the test's network namespace: loopback up (tests start local servers), and a
# default route into a veth pair that answers nothing, so remote hosts behave as silent
# hosts on the internet do (a connect times out; tests of connect timeouts need exactly
# that) instead of failing at once with "network unreachable". Resolvers are made
# unreachable so DNS fails fast. Each step may fail on a host without veth: lo still works.
NETNS_INIT = (
    "ip link set lo up 2>/dev/null;"
    " ip link add swg0 type veth peer name swg1 2>/dev/null"
    " && ip link set swg0 up && ip link set swg1 up"
    " && ip addr add 192.0.2.1/24 dev swg0"
    " && ip neigh add 192.0.2.2 lladdr 02:00:00:00:00:02 dev swg0 nud permanent"
    " && ip route add default via 192.0.2.2 dev swg0"
    " && for ns in $(awk '$1 == \"nameserver\" {print $2}' /etc/resolv.conf 2>/dev/null);"
    " do ip route add unreachable $ns 2>/dev/null; done;"
    " true"
)


@dataclass(frozen=True)
class Isolation:
    """What this host lets the sandbox do, found once at start-up."""

    netns_cmd: tuple[str, ...] | None = None  # prefix that runs a command without network
    mountns: bool = False  # unshare --mount works (for the CPU quota view)
    pids_cgroup: Path | None = None  # a writable pids cgroup hierarchy (v1) or v2 root
    cgroup_v2: bool = False
    is_root: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def probe(cls) -> Isolation:
        notes = []
        netns = None
        for cmd in (("unshare", "--net"), ("unshare", "--net", "--map-current-user")):
            if shutil.which(cmd[0]) is None:
                break
            ok = subprocess.run([*cmd, "true"], capture_output=True, timeout=30, check=False)
            if ok.returncode == 0:
                netns = cmd
                break
        if netns is None:
            notes.append("network namespaces unavailable: tests run with the host's network")
        mountns = (
            netns is not None
            and subprocess.run(
                [netns[0], "--mount", *netns[2:], "true"],
                capture_output=True,
                timeout=30,
                check=False,
            ).returncode
            == 0
        )
        if not mountns:
            notes.append("mount namespaces unavailable: recipes' CPU limits are not shown to tests")
        pids, v2 = _find_pids_cgroup()
        if pids is None and os.geteuid() == 0:
            notes.append("no writable pids cgroup: the process limit is not enforced for root")
        return cls(
            netns_cmd=netns,
            mountns=mountns,
            pids_cgroup=pids,
            cgroup_v2=v2,
            is_root=os.geteuid() == 0,
            notes=tuple(notes),
        )

    def describe(self) -> dict[str, object]:
        return {
            "network_isolation": self.netns_cmd is not None,
            "process_limit": self.pids_cgroup is not None or not self.is_root,
            "notes": list(self.notes),
        }


def _find_pids_cgroup() -> tuple[Path | None, bool]:
    v2 = Path("/sys/fs/cgroup")
    if (v2 / "cgroup.controllers").exists():
        if "pids" in (v2 / "cgroup.controllers").read_text().split() and os.access(v2, os.W_OK):
            return v2, True
        return None, False
    v1 = Path("/sys/fs/cgroup/pids")
    if (v1 / "cgroup.procs").exists() and os.access(v1, os.W_OK):
        return v1, False
    return None, False


def cpu_quota_view(cpus: float) -> str:
    """Shell that makes /sys/fs/cgroup show a CFS quota of ``cpus``, as Docker's --cpus does
    (tools such as pylint size their worker pools, and skip tests, by it). Runs inside a
    private mount namespace, so nothing outside sees it."""
    quota = int(cpus * 100000)
    return (
        "mount -t tmpfs swegreen-cgroup /sys/fs/cgroup 2>/dev/null && mkdir -p /sys/fs/cgroup/cpu"
        f" && echo {quota} > /sys/fs/cgroup/cpu/cpu.cfs_quota_us"
        " && echo 100000 > /sys/fs/cgroup/cpu/cpu.cfs_period_us"
        " && echo 1024 > /sys/fs/cgroup/cpu/cpu.shares; true"
    )


SCRATCH_ROOTS = (Path("/tmp"), Path("/var/tmp"))


def scratch_dir(checkout: Path, name: str) -> Path:
    """A directory for a test run's HOME and TMPDIR under a different top-level directory
    than the checkout, as in the official images (/testbed beside /tmp). Tools that make
    paths relative only within a shared root (docutils' relative_path) then see the same
    absolute temp paths as upstream, not ``../tmp/...``."""
    top = checkout.resolve().parts[:2]
    for root in SCRATCH_ROOTS:
        if root.resolve().parts[:2] != top and os.access(root, os.W_OK):
            return root / name
    return checkout.parent / name


def free_port() -> int:
    """A free port on the host's loopback (services outside a namespace need their own)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def without_credentials(value: str) -> str:
    return _CREDENTIALS.sub(r"\1", value)


def sandbox_env(
    *,
    bin_dirs: list[Path],
    virtual_env: Path | None,
    scratch: Path,
    host_env: Mapping[str, str],
    pip_cache: Path | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of a test run. Nothing of the host's is inherited except the
    package-index settings an eval-time install needs, stripped of embedded credentials.
    HOME and TMPDIR are ``scratch``/home and ``scratch``/tmp (see ``scratch_dir``)."""
    home, tmp = scratch / "home", scratch / "tmp"
    home.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    system_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    env = {
        "PATH": ":".join([*(str(b) for b in bin_dirs), system_path]),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "TEMP": str(tmp),
        "TMP": str(tmp),
        "TZ": "Etc/UTC",
        "PYTHONHASHSEED": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "PIP_CONFIG_FILE": "/dev/null",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
    }
    if virtual_env is not None:
        env["VIRTUAL_ENV"] = str(virtual_env)
    if pip_cache is not None:
        env["PIP_CACHE_DIR"] = str(pip_cache)
    env.update({k: without_credentials(host_env[k]) for k in INDEX_PASSTHROUGH if k in host_env})
    env.update(extra or {})
    return env


class LocalSandbox:
    """Runs eval scripts on this machine under a ``SandboxPolicy``."""

    def __init__(self, isolation: Isolation) -> None:
        self.isolation = isolation

    def isolates(self, policy: SandboxPolicy) -> bool:
        """Whether the test command runs in its own network namespace."""
        return not policy.network and self.isolation.netns_cmd is not None

    def shows_cpu_quota(self, policy: SandboxPolicy) -> bool:
        return policy.cpus is not None and self.isolation.mountns

    def test_wrapper(self, policy: SandboxPolicy, services: tuple[str, ...] = ()) -> str | None:
        """Shell prefix for the test command in eval.sh (the network is cut only there:
        the eval-time install before it may need the package index). ``services`` are
        shell snippets that start local stand-ins before the tests (see services.py)."""
        isolate = self.isolates(policy)
        cpu_view = self.shows_cpu_quota(policy)
        if not isolate and not cpu_view and not services:
            return None
        steps = [NETNS_INIT] if isolate else []
        if cpu_view:
            assert policy.cpus is not None
            steps.append(cpu_quota_view(policy.cpus))
        steps += [s.rstrip(";") for s in services]
        init = shlex.quote("; ".join(steps) + '; exec "$0" "$@"')
        prefix = ""
        if (isolate or cpu_view) and self.isolation.netns_cmd is not None:
            unshare, *flags = self.isolation.netns_cmd
            flags = [f for f in flags if f != "--net" or isolate] + (
                ["--mount"] if cpu_view else []
            )
            prefix = " ".join([unshare, *flags, "--"]) + " "
        return f"{prefix}bash -c {init}"

    async def run_script(
        self,
        script: Path,
        *,
        cwd: Path,
        env: Mapping[str, str],
        policy: SandboxPolicy,
        log_path: Path,
    ) -> ProcResult:
        rlimits: dict[int, tuple[int, int]] = {}
        if policy.memory_mb:
            limit = policy.memory_mb * 1024 * 1024
            rlimits[resource.RLIMIT_AS] = (limit, limit)
        cgroup = None
        if policy.max_processes:
            if self.isolation.pids_cgroup is not None:
                cgroup = _make_pids_cgroup(self.isolation, policy.max_processes)
            elif not self.isolation.is_root:
                rlimits[resource.RLIMIT_NPROC] = (policy.max_processes, policy.max_processes)
        outer = int(policy.timeout) + OUTER_GRACE
        argv = ["timeout", "--signal=TERM", "--kill-after=5", str(outer), "bash", str(script)]
        if cgroup is not None:
            # Join the cgroup before exec'ing: every descendant is then counted.
            argv = ["sh", "-c", f'echo $$ > "{cgroup / "cgroup.procs"}" && exec "$@"', "sh", *argv]
        try:
            return await run_process(
                argv,
                cwd=cwd,
                env=env,
                timeout=policy.timeout,
                output_file=log_path,
                rlimits=rlimits,
                death_signal=signal.SIGTERM,
            )
        finally:
            if cgroup is not None:
                await _remove_cgroup(cgroup)


def _make_pids_cgroup(iso: Isolation, max_processes: int) -> Path | None:
    assert iso.pids_cgroup is not None
    path = iso.pids_cgroup / f"swegreen-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir()
        if iso.cgroup_v2:
            (iso.pids_cgroup / "cgroup.subtree_control").write_text("+pids")
        (path / "pids.max").write_text(str(max_processes))
        return path
    except OSError:
        with contextlib.suppress(OSError):
            path.rmdir()
        return None


async def _remove_cgroup(path: Path) -> None:
    for _ in range(50):
        with contextlib.suppress(OSError):
            for pid in (path / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        try:
            path.rmdir()
            return
        except OSError:
            await asyncio.sleep(0.1)
