"""The local sandbox that runs an eval script.

Two modes (``EvalConfig.isolation``):

``bwrap`` (the default) runs every process that could execute participant code under
bubblewrap: an unprivileged host uid, its own user, PID, mount, IPC, UTS and (for the
tests) network namespaces, a fresh /proc, the host's system directories and the
environment caches read-only, only the workspace and its temp dirs writable, and none of
the host's other files (home directories, the results, the engine's own process) in
sight. Inside, processes see uid 0 as in the official containers, with Docker's default
capabilities, which reach nothing but what the sandbox owns.

``process`` is the weaker mode a user must ask for where bubblewrap cannot run
(Fargate): a process group, a clean environment and resource limits, the test command
in a network namespace where the host allows one.

Both modes: a time limit enforced twice (the engine, and an outer ``timeout`` that still
ends the tree if the engine itself is killed), a clean environment built from scratch
(no cloud keys or API tokens), an address-space limit per process, a process limit.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import re
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from swegreen.core.errors import DiskLimitExceeded, OutOfMemory, SandboxUnavailable
from swegreen.processes.procs import ProcResult, run_process
from swegreen.sandbox import seccomp

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
    memory_mb: int | None = 16384  # per process (address space), and the whole sandbox
    max_processes: int | None = 4096
    disk_mb: int | None = 10240  # what the run may add to its writable trees
    shm_mb: int = 64  # /dev/shm and /run (RAM): Docker's default shm size


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


IsolationMode = Literal["bwrap", "process"]
# The host uid sandboxed processes run as when the engine is root (any unused uid will do:
# it owns nothing on the host but the workspaces it is lent).
DEFAULT_SANDBOX_UID = 2_000_000
# Docker's default capabilities that mean something in a user namespace: they act only on
# what the namespace owns (its own files, processes and network), never on the host's.
CONTAINER_CAPS = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_RAW",
    "CAP_SYS_CHROOT",
)
# Host directories every sandbox sees, read-only (symlinks, as on merged-/usr systems, are
# recreated as symlinks).
SYSTEM_DIRS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; `make setup` does it) "
    'on a host that allows unprivileged user namespaces, or set isolation = "process" '
    "(scenario.toml [config], SWEGREEN_ISOLATION or --isolation) to run participant code "
    "without namespaces, knowing that it can then read the host's files and processes"
)


@dataclass(frozen=True)
class Isolation:
    """What this host lets the sandbox do, found once at start-up."""

    mode: IsolationMode = "process"
    bwrap: str | None = None  # the bubblewrap binary (mode "bwrap")
    sandbox_uid: int | None = None  # host uid to switch to before bwrap (the engine is root)
    netns_cmd: tuple[str, ...] | None = None  # "process" mode: prefix that cuts the network
    mountns: bool = False  # "process" mode: unshare --mount works (for the CPU quota view)
    pids_cgroup: Path | None = None  # a writable pids cgroup hierarchy (v1) or v2 root
    memory_cgroup: Path | None = None  # likewise for memory (the whole sandbox's use)
    cgroup_v2: bool = False
    is_root: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
    seccomp: Path | None = None  # "bwrap" mode: the compiled filter (seccomp.py)

    @classmethod
    def probe(
        cls, mode: IsolationMode = "bwrap", sandbox_uid: int = DEFAULT_SANDBOX_UID
    ) -> Isolation:
        """The isolation ``mode`` on this host. ``bwrap`` that cannot run raises
        ``SandboxUnavailable``: the weaker mode is never chosen silently."""
        is_root = os.geteuid() == 0
        pids, memory = _find_cgroup("pids"), _find_cgroup("memory")
        v2 = (CGROUP_ROOT / "cgroup.controllers").exists()
        if mode == "bwrap":
            bwrap = shutil.which("bwrap")
            if bwrap is None:
                raise SandboxUnavailable(f"bubblewrap (bwrap) is not installed: {INSTALL_HINT}")
            uid = sandbox_uid if is_root else None
            iso = cls(
                mode="bwrap",
                bwrap=bwrap,
                sandbox_uid=uid,
                pids_cgroup=pids,
                memory_cgroup=memory,
                cgroup_v2=v2,
                is_root=is_root,
                seccomp=_seccomp_file() if seccomp.supported() else None,
                notes=()
                if seccomp.supported()
                else ("no seccomp filter for this architecture: keyrings are shared",),
            )
            probe = subprocess.run(
                [
                    *iso._bwrap_prefix(Mounts(), Path("/"), network=False, caps=CONTAINER_CAPS),
                    "true",
                ],
                capture_output=True,
                timeout=60,
                check=False,
                env={"PATH": "/usr/bin:/bin"},
            )
            if probe.returncode != 0:
                why = probe.stderr.decode(errors="replace").strip() or f"exit {probe.returncode}"
                raise SandboxUnavailable(f"bubblewrap cannot run here ({why}): {INSTALL_HINT}")
            return iso
        notes = [
            "isolation = process: participant code runs without namespaces (see docs/security.md)"
        ]
        # A root engine (a container's entry point) runs the tests as an unprivileged uid
        # of their own: they cannot write what the engine made, nor read its /proc.
        uid = sandbox_uid if is_root else None
        drop = _drop_to(uid)
        netns = None
        for cmd in (("unshare", "--net"), ("unshare", "--net", "--map-current-user")):
            if shutil.which(cmd[0]) is None:
                break
            ok = subprocess.run([*drop, *cmd, "true"], capture_output=True, timeout=30, check=False)
            if ok.returncode == 0:
                netns = cmd
                break
        if netns is None:
            notes.append("network namespaces unavailable: tests run with the host's network")
        mountns = (
            netns is not None
            and subprocess.run(
                [*drop, netns[0], "--mount", *netns[2:], "true"],
                capture_output=True,
                timeout=30,
                check=False,
            ).returncode
            == 0
        )
        if not mountns:
            notes.append("mount namespaces unavailable: recipes' CPU limits are not shown to tests")
        if uid is not None:
            notes.append(f"the engine is root: tests run as host uid {uid}")
        return cls(
            mode="process",
            sandbox_uid=uid,
            netns_cmd=netns,
            mountns=mountns,
            pids_cgroup=pids,
            memory_cgroup=memory,
            cgroup_v2=v2,
            is_root=is_root,
            notes=tuple(notes),
        )

    def check_reachable(self, path: Path) -> None:
        """The sandbox's uid works in ``path``: every directory above it must let that uid
        pass (a root engine's default ~/.cache sits under a 0700 /root)."""
        if self.sandbox_uid is None:
            return
        path = path.resolve()
        for parent in [path, *path.parents]:
            if not parent.exists():
                continue
            st = parent.stat()
            if st.st_uid != self.sandbox_uid and not st.st_mode & 0o001:
                raise SandboxUnavailable(
                    f"the sandbox (host uid {self.sandbox_uid}) cannot reach {path}: "
                    f"{parent} has mode {st.st_mode & 0o777:o}. Put the cache elsewhere "
                    "(--cache-dir or SWEGREEN_CACHE_DIR, e.g. /var/cache/swegreen) or let "
                    f"others pass through it (chmod o+x {parent})"
                )

    @property
    def runs_as_root(self) -> bool:
        """Whether sandboxed processes hold the host's root (never: a root engine drops
        them to ``sandbox_uid``; kept for isolations made by hand)."""
        return self.mode == "process" and self.is_root and self.sandbox_uid is None

    def describe(self) -> dict[str, object]:
        return {
            "isolation": self.mode,
            "namespaces": (
                ["user", "pid", "mount", "ipc", "uts", "net (tests)"]
                if self.mode == "bwrap"
                else (["net (tests)"] if self.netns_cmd else [])
            ),
            "host_uid": (
                self.sandbox_uid
                if self.sandbox_uid is not None
                else (os.geteuid() if self.mode == "bwrap" else "engine's")
            ),
            "network_isolation": self.mode == "bwrap" or self.netns_cmd is not None,
            "seccomp": "keyring calls refused, as Docker's default" if self.seccomp else None,
            "process_limit": self.pids_cgroup is not None or not self.runs_as_root,
            "memory_limit": "whole sandbox" if self.memory_cgroup else "per process",
            "notes": list(self.notes),
        }

    def _bwrap_prefix(
        self,
        mounts: Mounts,
        cwd: Path,
        *,
        network: bool,
        caps: tuple[str, ...],
        shm_mb: int = SandboxPolicy.shm_mb,
    ) -> list[str]:
        assert self.bwrap is not None
        argv: list[str] = []
        if self.seccomp is not None:
            # bubblewrap reads the filter from an fd: opened afresh for every sandbox
            argv += ["sh", "-c", f'exec "$@" {SECCOMP_FD}<"$0"', str(self.seccomp)]
        argv += _drop_to(self.sandbox_uid)
        argv += [
            self.bwrap,
            "--unshare-user",
            "--uid",
            "0",
            "--gid",
            "0",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
        ]
        if not network:
            argv.append("--unshare-net")
        if self.seccomp is not None:
            argv += ["--seccomp", str(SECCOMP_FD)]
        for cap in caps:
            argv += ["--cap-add", cap]
        for name in SYSTEM_DIRS:
            path = Path(name)
            if path.is_symlink():
                argv += ["--symlink", os.readlink(path), name]
            elif path.is_dir():
                argv += ["--ro-bind", name, name]
        argv += ["--ro-bind-try", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev"]
        # /tmp and /var/tmp on disk, as in a container (bounded by the disk limit); what is
        # in RAM (/run, /dev/shm) has a size
        for name in ("/tmp", "/var/tmp"):
            if mounts.tmp is not None:
                argv += ["--bind", str(mounts.tmp / name.strip("/").replace("/", "-")), name]
            else:
                argv += ["--size", str(shm_mb * 1024 * 1024), "--tmpfs", name]
        for name in ("/run", "/dev/shm"):
            argv += ["--size", str(shm_mb * 1024 * 1024), "--tmpfs", name]
        for src, dest in sorted(mounts.binds(), key=lambda b: len(Path(b[1]).parts)):
            argv += [src[0], src[1], dest]
        argv += ["--chdir", str(cwd)]
        return argv


@dataclass(frozen=True)
class Mounts:
    """What a sandboxed run sees besides the system directories: ``writable`` and
    ``readonly`` host paths at the same place, and ``files``: host paths shown read-only at
    another place (the eval script, the record channel, the CPU quota view)."""

    writable: tuple[Path, ...] = ()
    readonly: tuple[Path, ...] = ()
    files: tuple[tuple[Path, str], ...] = ()
    tmp: Path | None = None  # a writable host directory that holds /tmp and /var/tmp

    def with_files(self, *files: tuple[Path, str]) -> Mounts:
        return Mounts(self.writable, self.readonly, (*self.files, *files), self.tmp)

    def binds(self) -> list[tuple[tuple[str, str], str]]:
        out = [(("--ro-bind", str(p)), str(p)) for p in dict.fromkeys(self.readonly)]
        out += [(("--bind", str(p)), str(p)) for p in dict.fromkeys(self.writable)]
        out += [(("--ro-bind", str(src)), dest) for src, dest in self.files]
        return out


SECCOMP_FD = 9
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _drop_to(uid: int | None) -> list[str]:
    """The prefix that runs a command as ``uid`` (its own group, no others), or nothing."""
    if uid is None:
        return []
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


def _seccomp_file() -> Path:
    """This process's copy of the compiled filter (a private temporary file)."""
    fd, name = tempfile.mkstemp(prefix="swegreen-seccomp-", suffix=".bpf")
    os.close(fd)
    path = seccomp.write_filter(Path(name))
    path.chmod(0o644)  # setpriv has switched to the sandbox's uid when the shell opens it
    atexit.register(lambda: path.unlink(missing_ok=True))
    return path


def cpu_quota_view(cpus: float) -> str:
    """``process`` mode: shell that makes /sys/fs/cgroup show a CFS quota of ``cpus``, as
    Docker's --cpus does. Runs inside a private mount namespace, so nothing outside sees it."""
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


SCRIPT_INSIDE = "/run/swegreen/eval.sh"


class LocalSandbox:
    """Runs eval scripts on this machine under a ``SandboxPolicy`` and an ``Isolation``."""

    def __init__(self, isolation: Isolation) -> None:
        self.isolation = isolation

    @property
    def bwrap(self) -> bool:
        return self.isolation.mode == "bwrap"

    def isolates(self, policy: SandboxPolicy) -> bool:
        """Whether the test command runs in its own network namespace."""
        if self.bwrap:
            return not policy.network
        return not policy.network and self.isolation.netns_cmd is not None

    def shows_cpu_quota(self, policy: SandboxPolicy) -> bool:
        return policy.cpus is not None and (self.bwrap or self.isolation.mountns)

    def test_wrapper(
        self,
        policy: SandboxPolicy,
        services: tuple[str, ...] = (),
        readonly: tuple[str, ...] = (),
    ) -> str | None:
        """Shell prefix for the test command in eval.sh. ``services`` are shell snippets
        that start local stand-ins before the tests (see services.py). Under bubblewrap
        the run that holds the test command already has its own network namespace (see
        ``run_script``); the prefix only shapes it, and binds the ``readonly`` files (the
        tests that run, test configuration) read-only over themselves, so that nothing the
        tests import can rewrite a test before pytest reads it; the capabilities this
        takes are dropped again before the tests start (``run_script(admin=True)``).
        Otherwise the network is cut here, where the host allows it."""
        isolate = self.isolates(policy)
        if self.bwrap:
            steps = [NETNS_INIT] if isolate else []
            if readonly:
                files = " ".join(shlex.quote(f) for f in readonly)
                steps.append(
                    f'for f in {files}; do [ -f "$f" ] && [ ! -L "$f" ]'
                    ' && mount --bind "$f" "$f" && mount -o remount,bind,ro "$f"; done; true'
                )
            steps += [s.rstrip(";") for s in services]
            if not steps:
                return None
            dropped = ",".join(
                (["-net_admin"] if isolate else []) + (["-sys_admin"] if readonly else [])
            )
            drop = f"setpriv --bounding-set={dropped} --inh-caps={dropped} -- " if dropped else ""
            init = shlex.quote("; ".join(steps) + f'; exec {drop}"$0" "$@"')
            return f"bash -c {init}"
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

    def cpu_view(self, policy: SandboxPolicy, host_dir: Path) -> tuple[tuple[Path, str], ...]:
        """Under bubblewrap: files that make /sys/fs/cgroup show the recipe's CPU quota, as
        Docker's --cpus does (pylint sizes its pools, and skips tests, by it)."""
        if not (self.bwrap and policy.cpus is not None):
            return ()
        cpu = host_dir / "cgroup" / "cpu"
        cpu.mkdir(parents=True, exist_ok=True)
        (cpu / "cpu.cfs_quota_us").write_text(f"{int(policy.cpus * 100000)}\n")
        (cpu / "cpu.cfs_period_us").write_text("100000\n")
        (cpu / "cpu.shares").write_text("1024\n")
        return ((cpu.parent, "/sys/fs/cgroup"),)

    def lend(self, paths: list[Path], shared: tuple[Path, ...] = ()) -> None:
        """Hand ``paths`` (trees the sandbox may write) to the sandbox's host uid. Files with
        more than one link are shared with an environment (hardlinked views): they stay
        the engine's, so the sandbox can replace them in its view but never write into
        them. ``shared`` trees are left alone entirely."""
        uid = self.isolation.sandbox_uid
        if uid is None:
            return

        def own(path: Path, st: os.stat_result) -> None:
            # what is the sandbox's already is left alone: on a copy-on-write checkout
            # (overlay.py) any ownership change, even to the same owner, copies it up
            if st.st_uid != uid or st.st_gid != uid:
                os.lchown(path, uid, uid)

        for root in paths:
            if not root.exists():
                continue
            own(root, root.lstat())
            for dirpath, dirnames, filenames in os.walk(root):
                here = Path(dirpath)
                dirnames[:] = [d for d in dirnames if here / d not in shared]
                for name in dirnames:
                    own(here / name, (here / name).lstat())
                for name in filenames:
                    path = here / name
                    st = path.lstat()
                    if st.st_nlink == 1 or path.is_symlink():
                        own(path, st)

    async def run_script(
        self,
        script: Path,
        *,
        cwd: Path,
        env: Mapping[str, str],
        policy: SandboxPolicy,
        log_path: Path,
        mounts: Mounts | None = None,
        network: bool | None = None,
        append: bool = False,
        timeout: float | None = None,
        admin: bool = False,
    ) -> ProcResult:
        """Run ``script`` with bash. Under bubblewrap it sees only ``mounts`` besides the
        system directories and has the host's network only if ``network`` (default: the
        policy's); its output reaches ``log_path`` through a pipe, so nothing inside can
        rewrite what was logged. ``admin``: the script may mount inside its own namespace
        (the test wrapper's read-only binds), until the wrapper drops the capability."""
        timeout = timeout or policy.timeout
        rlimits: dict[int, tuple[int, int]] = {}
        if policy.memory_mb:
            limit = policy.memory_mb * 1024 * 1024
            rlimits[resource.RLIMIT_AS] = (limit, limit)
        if policy.disk_mb:  # one file can never outgrow the disk limit between two looks
            limit = policy.disk_mb * 1024 * 1024
            rlimits[resource.RLIMIT_FSIZE] = (limit, limit)
        cgroups, memory = self._cgroups(policy)
        if policy.max_processes and not cgroups and not self.isolation.runs_as_root:
            rlimits[resource.RLIMIT_NPROC] = (policy.max_processes, policy.max_processes)
        outer = int(timeout) + OUTER_GRACE
        argv = ["timeout", "--signal=TERM", "--kill-after=5", str(outer)]
        mounts = mounts or Mounts()
        if self.bwrap:
            net = policy.network if network is None else network
            caps = CONTAINER_CAPS if net else (*CONTAINER_CAPS, "CAP_NET_ADMIN")
            caps = (*caps, "CAP_SYS_ADMIN") if admin else caps
            if mounts.tmp is not None:
                self._make_tmp(mounts.tmp)
            inside = mounts.with_files((script, SCRIPT_INSIDE))
            argv += self.isolation._bwrap_prefix(
                inside, cwd, network=net, caps=caps, shm_mb=policy.shm_mb
            )
            argv += ["bash", SCRIPT_INSIDE]
        else:
            script.chmod(0o644)  # the sandbox's uid reads it
            argv += [*_drop_to(self.isolation.sandbox_uid), "bash", str(script)]
        if cgroups:
            # Join the cgroups before exec'ing: every descendant is then counted.
            joins = " && ".join(f'echo $$ > "{c / "cgroup.procs"}"' for c in cgroups)
            argv = ["sh", "-c", f'{joins} && exec "$@"', "sh", *argv]
        watched = [*mounts.writable, *([mounts.tmp] if mounts.tmp else [])]
        watchdog = DiskWatch(watched, policy.disk_mb) if policy.disk_mb and watched else None
        try:
            run = asyncio.ensure_future(
                run_process(
                    argv,
                    cwd=cwd,
                    env=env,
                    timeout=timeout,
                    output_file=log_path,
                    rlimits=rlimits,
                    death_signal=signal.SIGTERM,
                    # the log is the engine's file: a sandbox holding its descriptor
                    # could rewrite what was logged
                    through_pipe=self.bwrap or self.isolation.sandbox_uid is not None,
                    append=append,
                )
            )
            if watchdog is not None:
                await watchdog.start()
                over = asyncio.ensure_future(watchdog.exceeded())
                try:
                    await asyncio.wait({run, over}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    over.cancel()
                if over.done() and not over.cancelled() and over.result():
                    run.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await run
                    raise DiskLimitExceeded(
                        f"the run wrote more than its disk limit ({policy.disk_mb} MB, "
                        "setting disk_mb): stopped"
                    )
            result = await run
            if memory is not None and _oom_kills(memory, self.isolation.cgroup_v2):
                raise OutOfMemory(
                    f"a process was killed for the sandbox's memory use (limit "
                    f"{policy.memory_mb} MB, setting memory_mb)",
                    log_tail=result.tail(),
                )
            return result
        except BaseException:
            if not run.done():
                run.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await run
            raise
        finally:
            for cgroup in cgroups:
                await _remove_cgroup(cgroup)

    def _cgroups(self, policy: SandboxPolicy) -> tuple[list[Path], Path | None]:
        """The cgroups a run joins (process count, the whole sandbox's memory) and which
        of them limits memory. Under cgroup v2 one cgroup holds both limits."""
        iso = self.isolation
        pids = {"pids.max": str(policy.max_processes)} if policy.max_processes else {}
        mem_key = "memory.max" if iso.cgroup_v2 else "memory.limit_in_bytes"
        mem = {mem_key: str(policy.memory_mb * 1024 * 1024)} if policy.memory_mb else {}
        if iso.cgroup_v2:
            wanted = {**(pids if iso.pids_cgroup else {}), **(mem if iso.memory_cgroup else {})}
            root = iso.pids_cgroup or iso.memory_cgroup
            made = _make_cgroup(root, wanted) if root is not None and wanted else None
            return ([made], made if mem and iso.memory_cgroup else None) if made else ([], None)
        out: list[Path] = []
        memory = None
        if pids and iso.pids_cgroup is not None and (made := _make_cgroup(iso.pids_cgroup, pids)):
            out.append(made)
        if mem and iso.memory_cgroup is not None:
            memory = _make_cgroup(iso.memory_cgroup, mem)
            out += [memory] if memory else []
        return out, memory

    def _make_tmp(self, root: Path) -> None:
        """The host directories shown as /tmp and /var/tmp, the sandbox's to write."""
        for name in ("tmp", "var-tmp"):
            path = root / name
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o1777)
        self.lend([root])


class DiskWatch:
    """How much a sandboxed run has added to its writable trees, looked at every few
    seconds (a thread walks them; no symlink is followed, a file counted once)."""

    def __init__(self, roots: list[Path], limit_mb: int, interval: float = 2.0) -> None:
        self.roots = roots
        self.limit = limit_mb * 1024 * 1024
        self.interval = interval
        self._baseline: asyncio.Future[int] | None = None

    async def start(self) -> None:
        """Take the trees' size as the run starts, in a thread beside it (a short run is
        never held up by the walk)."""
        self._baseline = asyncio.ensure_future(asyncio.to_thread(self.used))

    def used(self) -> int:
        seen: set[tuple[int, int]] = set()
        total = 0
        for root in self.roots:
            for dirpath, dirnames, filenames in os.walk(root):
                for name in (*dirnames, *filenames):
                    with contextlib.suppress(OSError):
                        st = os.lstat(os.path.join(dirpath, name))
                        if (st.st_dev, st.st_ino) not in seen:
                            seen.add((st.st_dev, st.st_ino))
                            total += st.st_blocks * 512
        return total

    async def exceeded(self) -> bool:
        """Returns True once the run has written more than the limit (never otherwise)."""
        assert self._baseline is not None
        try:
            while True:
                await asyncio.sleep(self.interval)
                baseline = await self._baseline
                if await asyncio.to_thread(self.used) - baseline > self.limit:
                    return True
        finally:
            self._baseline.cancel()


def _find_cgroup(controller: str) -> Path | None:
    """A cgroup hierarchy where this process may make children limiting ``controller``."""
    v2 = CGROUP_ROOT
    if (v2 / "cgroup.controllers").exists():
        ok = controller in (v2 / "cgroup.controllers").read_text().split()
        return v2 if ok and os.access(v2, os.W_OK) else None
    v1 = v2 / controller
    if (v1 / "cgroup.procs").exists() and os.access(v1, os.W_OK):
        return v1
    return None


def _make_cgroup(root: Path, settings: dict[str, str]) -> Path | None:
    path = root / f"swegreen-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir()
        if (root / "cgroup.subtree_control").exists():  # v2: enable what is limited
            wanted = {key.split(".")[0] for key in settings}
            (root / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
        for key, value in settings.items():
            (path / key).write_text(value)
        if (path / "memory.swap.max").exists():  # v2: the limit holds for swap too
            (path / "memory.swap.max").write_text("0")
        return path
    except OSError:
        with contextlib.suppress(OSError):
            path.rmdir()
        return None


def _oom_kills(cgroup: Path, v2: bool) -> int:
    """Processes the kernel killed for the cgroup's memory limit."""
    name = "memory.events" if v2 else "memory.oom_control"
    with contextlib.suppress(OSError, ValueError):
        for line in (cgroup / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    return 0


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
