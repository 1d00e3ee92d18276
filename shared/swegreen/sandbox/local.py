"""The local sandbox that runs an eval script.

Two modes (``EvalConfig.isolation``):

``bwrap`` (the default) runs every process that could execute participant code under
bubblewrap: an unprivileged host uid, its own user, PID, mount, IPC, UTS and (for the
tests) network namespaces, a fresh /proc, the host's system directories and the
environment caches read-only, only the workspace and its temp dirs writable, and none of
the host's other files (home directories, the results, the engine's own process) in
sight. Inside, processes see uid 0 as in the official containers, with Docker's default
capabilities, which reach nothing but what the sandbox owns.

``landlock`` is for hosts that allow no namespaces and no other uid (a container with
every capability dropped, as Amber starts a green agent): each sandboxed process
confines itself before it runs anything of the participant's (confine.py: Landlock lends
it the system read-only, the environment and history stores read-only, its workspace
read-write, nothing else; TCP connect to the internet's ports refused; no signals to the
engine; the keyring calls refused by seccomp; no new privileges).

``process`` is the weakest mode, which a user must ask for where neither runs (Fargate):
a process group, a clean environment and resource limits, the test command in a network
namespace where the host allows one.

Every mode: a time limit enforced twice (the engine, and an outer ``timeout`` that still
ends the tree if the engine itself is killed), a clean environment built from scratch
(no cloud keys or API tokens), an address-space limit per process, a process limit."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shlex
import signal
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from swegreen.core.errors import DiskLimitExceeded, OutOfMemory
from swegreen.processes.procs import ProcResult, run_process
from swegreen.sandbox import confine, seccomp
from swegreen.sandbox.isolation import (
    CONTAINER_CAPS,
    SYSTEM_DIRS,
    Isolation,
    Mounts,
    SandboxPolicy,
    _drop_to,
    confine_argv,
    spec_pipe,
)
from swegreen.sandbox.limits import (
    DiskWatch,
    _make_cgroup,
    _oom_kills,
    _remove_cgroup,
)
from swegreen.sandbox.tools import optional_tool, tool

OUTER_GRACE = 30  # seconds the outer `timeout` waits beyond the engine's own limit


# Inside the test's network namespace: loopback up (tests start local servers), and a
# default route into a veth pair that answers nothing, so remote hosts behave as silent
# hosts on the internet do (a connect times out; tests of connect timeouts need exactly
# that) instead of failing at once with "network unreachable". Resolvers are made
# unreachable so DNS fails fast. Each step may fail on a host without veth (the later ones
# then fail too, harmlessly): lo still works. One `ip -batch` for all of them, not a
# program per step (about 0.03 s of every test command's start).
NETNS_STEPS = (
    "link set lo up",
    "link add swg0 type veth peer name swg1",
    "link set swg0 up",
    "link set swg1 up",
    "addr add 192.0.2.1/24 dev swg0",
    "neigh add 192.0.2.2 lladdr 02:00:00:00:00:02 dev swg0 nud permanent",
    "route add default via 192.0.2.2 dev swg0",
)


def netns_init() -> str:
    """Shell that shapes the test's network namespace; its tools by absolute path (it runs
    with CAP_NET_ADMIN, before the drop: tools.py)."""
    ip, awk = optional_tool("ip"), optional_tool("awk")
    if ip is None or awk is None:
        return "true"  # no iproute2: loopback stays down, remote hosts stay unreachable
    steps = "\\n".join(NETNS_STEPS)
    resolvers = '$1 == "nameserver" {print "route add unreachable " $2}'
    return (
        f"{{ printf '{steps}\\n'; {awk} '{resolvers}' /etc/resolv.conf 2>/dev/null; }}"
        f" | {ip} -force -batch - >/dev/null 2>&1; true"
    )


def cpu_quota_view(cpus: float) -> str:
    """``process`` mode: shell that makes /sys/fs/cgroup show a CFS quota of ``cpus``, as
    Docker's --cpus does. Runs inside a private mount namespace, so nothing outside sees it."""
    quota = int(cpus * 100000)
    mount, mkdir = tool("mount"), tool("mkdir")
    return (
        f"{mount} -t tmpfs swegreen-cgroup /sys/fs/cgroup 2>/dev/null"
        f" && {mkdir} -p /sys/fs/cgroup/cpu"
        f" && echo {quota} > /sys/fs/cgroup/cpu/cpu.cfs_quota_us"
        " && echo 100000 > /sys/fs/cgroup/cpu/cpu.cfs_period_us"
        " && echo 1024 > /sys/fs/cgroup/cpu/cpu.shares; true"
    )


SCRIPT_INSIDE = "/run/swegreen/eval.sh"
# Devices a confined process may open (read, write, ioctl), as a container's /dev has them.
DEVICES = (
    "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
    "/dev/ptmx", "/dev/pts",
    # /proc: its own files (a user namespace's uid_map); the engine's are closed by its
    # being non-dumpable (isolation.shield_engine), and /proc/sys only root may write
    "/proc",
)  # fmt: skip


@dataclass(frozen=True)
class TestWrapper:
    """How the test command runs in the sandbox. ``setup``: the engine's own steps, run
    just before the test output's start marker (shaping the sandbox's network namespace,
    binding the tests read-only over themselves), so that the test command's recorded
    time is its own and the region the grader reads holds none of them; ``prefix``: what
    the test command runs under (the capabilities those steps took dropped, the recipe's
    services started), or None."""

    __test__ = False  # not a pytest test class

    setup: str | None = None
    prefix: str | None = None


class LocalSandbox:
    """Runs eval scripts on this machine under a ``SandboxPolicy`` and an ``Isolation``."""

    def __init__(self, isolation: Isolation) -> None:
        self.isolation = isolation
        # Landlock's TCP layer, made once (64,512 port rules) and lent to every launch
        self._tcp_fd = confine.tcp_ruleset() if self.confined else None
        self._bash = tool("bash")
        self._seccomp = seccomp.keyring_filter().hex() if seccomp.supported() else None
        # where no network namespace can be had, a run without network refuses IP sockets
        self._seccomp_offline = seccomp.no_network_filter().hex() if seccomp.supported() else None

    @property
    def bwrap(self) -> bool:
        return self.isolation.mode == "bwrap"

    @property
    def confined(self) -> bool:
        """Landlock mode: every launch confines itself (confine.py)."""
        return self.isolation.mode == "landlock"

    @property
    def isolates_files(self) -> bool:
        """Whether sandboxed code sees only what it is lent (workbenches need this)."""
        return self.bwrap or self.confined

    def confinement(
        self,
        mounts: Mounts,
        script: Path,
        *,
        network: bool,
        policy: SandboxPolicy | None = None,
    ) -> tuple[dict[str, object], tuple[int, ...]]:
        """confine.py's spec for one launch, and the descriptors it must inherit."""
        lent = [*mounts.writable, *mounts.readonly, *(src for src, _ in mounts.files)]
        if mounts.tmp is not None:
            lent.append(mounts.tmp)
        ro = [d for d in SYSTEM_DIRS if os.path.exists(d)] + ["/sys"]
        ro += [str(p) for p in mounts.readonly] + [str(script)]
        fifo = []
        for src, _ in mounts.files:
            is_fifo = src.exists() and stat.S_ISFIFO(src.stat().st_mode)
            (fifo if is_fifo else ro).append(str(src))
        rw = [str(p) for p in mounts.writable]
        rw += [str(mounts.tmp)] if mounts.tmp is not None else []
        shm = Path("/dev/shm")
        if shm.is_dir() and not any(shm in Path(p).parents for p in lent):
            rw.append(str(shm))  # multiprocessing's semaphores; the container's own
        spec: dict[str, object] = {"ro": ro, "rw": rw, "fifo": fifo, "dev": list(DEVICES)}
        if self._seccomp is not None:
            spec["seccomp"] = self._filter(network, policy or SandboxPolicy(timeout=0))
        fds: tuple[int, ...] = ()
        if not network and self._tcp_fd is not None:
            spec["tcp_fd"] = self._tcp_fd
            fds = (self._tcp_fd,)
        return spec, fds

    def _filter(self, network: bool, policy: SandboxPolicy) -> str | None:
        """The seccomp program (hex) of a launch: in Landlock mode, IP refused too where it
        must have no network and no namespace can take it away
        (seccomp.no_network_filter), unless its tests need a local service on loopback.
        Process mode (AWS's tasks, whose network is the task's) keeps the keyring filter."""
        offline = not network and not policy.loopback and self.isolation.netns_cmd is None
        return self._seccomp_offline if self.confined and offline else self._seccomp

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
    ) -> TestWrapper:
        """The test command's wrapper in eval.sh. ``services`` are shell snippets that
        start local stand-ins before the tests (see services.py). Under bubblewrap the
        run that holds the test command already has its own network namespace (see
        ``run_script``); the setup only shapes it, and binds the ``readonly`` files (the
        tests that run, test configuration) read-only over themselves, so that nothing the
        tests import can rewrite a test before pytest reads it; the capabilities this
        takes are dropped again before the tests start (``run_script(admin=True)``).
        Otherwise the network is cut by the prefix, where the host allows it."""
        isolate = self.isolates(policy)
        if self.bwrap:
            steps = [netns_init()] if isolate else []
            if readonly:
                # two steps: before util-linux 2.27, `-o bind,ro` makes a writable bind
                files = " ".join(shlex.quote(f) for f in readonly)
                mount = tool("mount")
                steps.append(
                    f'for f in {files}; do [ -f "$f" ] && [ ! -L "$f" ]'
                    f' && {mount} --bind "$f" "$f" && {mount} -o remount,bind,ro "$f"; done; true'
                )
            started = [s.rstrip(";") for s in services]
            setup = f"{self._bash} -c {shlex.quote('; '.join(steps))}" if steps else None
            # Only the engine's own steps hold the capabilities; the services start, and
            # the test command runs, after they are dropped.
            dropped = ",".join(
                (["-net_admin"] if isolate else []) + (["-sys_admin"] if readonly else [])
            )
            parts = []
            if dropped:
                setpriv = tool("setpriv")
                parts.append(f"{setpriv} --bounding-set={dropped} --inh-caps={dropped} --")
            if started:
                then = shlex.quote("; ".join(started) + '; exec "$0" "$@"')
                parts.append(f"{self._bash} -c {then}")
            return TestWrapper(setup, " ".join(parts) or None)
        cpu_view = self.shows_cpu_quota(policy)
        if not isolate and not cpu_view and not services:
            return TestWrapper()
        steps = [netns_init()] if isolate else []
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
        return TestWrapper(prefix=f"{prefix}{self._bash} -c {init}")

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

    def private_tmp(
        self, argv: list[str], tmp: Path, env: dict[str, str], keep: tuple[Path, ...] = ()
    ) -> tuple[list[str], dict[str, str]]:
        """``argv`` (and its ``env``) with /tmp and /var/tmp of its own, in ``tmp``, the
        rest of the host as it is: a repository's setup that writes to absolute /tmp paths
        (matplotlib's qhull) leaves nothing there for the next row. What the command needs
        that lives under the host's /tmp (``keep``, and any path its environment names) is
        bound back in. Without bwrap: TMPDIR alone."""
        (tmp / "tmp").mkdir(parents=True, exist_ok=True)
        if not self.bwrap:
            return argv, {**env, "TMPDIR": str(tmp / "tmp")}
        binds: list[str] = []
        for name in ("tmp", "var-tmp"):
            (tmp / name).mkdir(parents=True, exist_ok=True)
            binds += ["--bind", str(tmp / name), "/" + name.replace("-", "/")]
        named = [Path(p) for v in env.values() for p in v.split(os.pathsep) if p.startswith("/")]
        shadowed = {p for p in (*keep, *named) if _under_tmp(p) and p.exists()}
        for path in sorted(shadowed, key=lambda p: len(p.parts)):
            if not any(o in path.parents for o in shadowed):  # the outermost ones
                binds += ["--bind", str(path), str(path)]
        return [tool("bwrap"), "--dev-bind", "/", "/", *binds, "--", *argv], {
            **env,
            "TMPDIR": "/tmp",
        }

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
        pass_fds: tuple[int, ...] = (),
    ) -> ProcResult:
        """Run ``script`` with bash. Under bubblewrap it sees only ``mounts`` besides the
        system directories and has the host's network only if ``network`` (default: the
        policy's); its output reaches ``log_path`` through a pipe, so nothing inside can
        rewrite what was logged. ``admin``: the script may mount inside its own namespace
        (the test wrapper's read-only binds), until the wrapper drops the capability.
        ``pass_fds``: descriptors the script inherits (the recorder's key)."""
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
        confined_fds: tuple[int, ...] = ()
        spec_fd: int | None = None
        outer = int(timeout) + OUTER_GRACE
        # every tool by absolute path: the run's env has the environment's bin first on PATH
        argv = [tool("timeout"), "--signal=TERM", "--kill-after=5", str(outer)]
        mounts = mounts or Mounts()
        if self.bwrap:
            net = policy.network if network is None else network
            caps = CONTAINER_CAPS if net else (*CONTAINER_CAPS, "CAP_NET_ADMIN")
            caps = (*caps, "CAP_SYS_ADMIN") if admin else caps
            if mounts.tmp is not None:
                await asyncio.to_thread(self._make_tmp, mounts.tmp)
            inside = mounts.with_files((script, SCRIPT_INSIDE))
            argv += self.isolation._bwrap_prefix(
                inside, cwd, network=net, caps=caps, shm_mb=policy.shm_mb
            )
            argv += [self._bash, SCRIPT_INSIDE]
        else:
            script.chmod(0o644)  # the sandbox's uid reads it
            argv += _drop_to(self.isolation.sandbox_uid)
            if self.confined:
                if mounts.tmp is not None:
                    await asyncio.to_thread(self._make_tmp, mounts.tmp)
                net = policy.network if network is None else network
                spec, confined_fds = self.confinement(mounts, script, network=net, policy=policy)
                spec_fd = spec_pipe(spec)
                argv += [*confine_argv(spec_fd), self._bash, str(script)]
            elif self._seccomp is not None:
                # process mode (AWS's Fargate tasks): no Landlock, but the same seccomp
                # filter as the other modes, loaded before the script starts
                net = policy.network if network is None else network
                spec_fd = spec_pipe({"landlock": False, "seccomp": self._filter(net, policy)})
                argv += [*confine_argv(spec_fd), self._bash, str(script)]
            else:
                argv += [self._bash, str(script)]
            if spec_fd is not None:
                confined_fds = (*confined_fds, spec_fd)
        if cgroups:
            # Join the cgroups before exec'ing: every descendant is then counted.
            joins = " && ".join(f'echo $$ > "{c / "cgroup.procs"}"' for c in cgroups)
            argv = [tool("sh"), "-c", f'{joins} && exec "$@"', "sh", *argv]
        watched, skipped = mounts.sized()
        watchdog = (
            DiskWatch(watched, policy.disk_mb, skip=skipped) if policy.disk_mb and watched else None
        )
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
                    through_pipe=self.isolates_files or self.isolation.sandbox_uid is not None,
                    append=append,
                    pass_fds=(*confined_fds, *pass_fds),
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
            if spec_fd is not None:
                os.close(spec_fd)  # the launch has its own copy (or never started)
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


def _under_tmp(path: Path) -> bool:
    return any(p in (Path("/tmp"), Path("/var/tmp")) for p in path.parents)
