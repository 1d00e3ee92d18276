"""What this host lets the sandbox do (found once at start-up: bubblewrap; Landlock where
no namespaces are allowed; or process mode; with a uid of its own under a root engine,
network and mount namespaces, cgroups), the policy a run is held to, and what it sees
(mounts)."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from swegreen.core.errors import SandboxUnavailable
from swegreen.sandbox import confine, seccomp
from swegreen.sandbox.limits import (
    CGROUP_ROOT,
    _find_cgroup,
)
from swegreen.sandbox.tools import SYSTEM_PATH, tool

IsolationMode = Literal["bwrap", "landlock", "process"]
# What a configuration may ask for: a mode, or "auto" (the first of bwrap and landlock
# that runs here).
IsolationChoice = Literal["auto", "bwrap", "landlock", "process"]
PR_SET_DUMPABLE = 4  # linux/prctl.h


@dataclass(frozen=True)
class SandboxPolicy:
    timeout: float
    network: bool = False
    cpus: float | None = None  # a Docker-like CPU quota, as the tests see it
    memory_mb: int | None = 16384  # per process (address space), and the whole sandbox
    max_processes: int | None = 4096
    disk_mb: int | None = 10240  # what the run may add to its writable trees
    shm_mb: int = 64  # /dev/shm and /run (RAM): Docker's default shm size
    # the tests talk to a local service over loopback TCP (recipe.services): where no
    # network namespace can be had, IP is then kept (ports below 1024 still refused)
    loopback: bool = False


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
    "on a host that allows unprivileged user namespaces (in a Docker container: docker run "
    "--security-opt seccomp=unconfined --security-opt systempaths=unconfined; Docker's "
    'default profiles refuse them), or set isolation = "landlock" where the kernel has '
    'Landlock (Linux 5.13+: no privileges needed, as under Amber), or "process" '
    "(scenario.toml [config], SWEGREEN_ISOLATION or --isolation) to run participant code "
    "without either, knowing that it can then read the host's files and processes"
)
LANDLOCK_HINT = (
    "Landlock is not available on this kernel (Linux 5.13 or later, with landlock in the "
    "boot parameter lsm=): run where it is, give the container what bubblewrap needs "
    "(isolation = bwrap), or choose isolation = process knowing that participant code "
    "can then read the host's files"
)


def shield_engine() -> bool:
    """Makes this process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``): its
    ``/proc/<pid>/environ``, ``mem`` and the like then belong to root, so processes of its
    own uid (participant code where no other uid is available) can neither read its secrets
    nor attach to it. Children are dumpable again once they exec. False where it failed."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def can_switch_uid() -> bool:
    """Whether this process holds CAP_SETUID and CAP_SETGID (``setpriv`` to another uid)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return os.geteuid() == 0
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            caps = int(line.split()[1], 16)
            return bool(caps & (1 << 6)) and bool(caps & (1 << 7))  # SETGID, SETUID
    return os.geteuid() == 0


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
    landlock_abi: int = 0  # "landlock" mode: the kernel's Landlock ABI version

    @classmethod
    def probe(
        cls, mode: IsolationChoice = "bwrap", sandbox_uid: int = DEFAULT_SANDBOX_UID
    ) -> Isolation:
        """The isolation ``mode`` on this host. ``bwrap`` that cannot run raises
        ``SandboxUnavailable``: the weaker mode is never chosen silently. ``auto``:
        bubblewrap where it runs, else Landlock where the kernel has it (as tight for the
        participant's files, network and signals: docs/security-sandbox.md; what a container
        without user namespaces, as Docker's default profile makes one, still allows),
        said in the first of its notes; neither: ``SandboxUnavailable`` naming both."""
        if mode == "auto":
            return cls._auto(sandbox_uid)
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
            prefix = iso._bwrap_prefix(Mounts(), Path("/"), network=False, caps=CONTAINER_CAPS)
            _try_once([*prefix, "true"], "bubblewrap cannot run here", INSTALL_HINT)
            return iso
        landlock = 0
        if mode == "landlock":
            landlock = confine.abi()
            if landlock < 1:
                raise SandboxUnavailable(LANDLOCK_HINT)
            notes = [_landlock_note(landlock)]
        else:
            notes = [
                "isolation = process: participant code runs without namespaces "
                "(see docs/security-sandbox.md)"
            ]
        # A root engine (a container's entry point) runs the tests as an unprivileged uid
        # of their own: they cannot write what the engine made, nor read its /proc. Root
        # without CAP_SETUID (every capability dropped, as Amber starts a root image)
        # cannot switch: its tests run as its own uid, as a non-root engine's do.
        uid = sandbox_uid if is_root and can_switch_uid() else None
        if uid is None and shield_engine():
            # the tests run as the engine's own uid: its /proc (environment, memory) is
            # theirs to read unless the engine is not dumpable
            notes.append("the engine is not dumpable: its environment and memory are root's")
        drop = _drop_to(uid)
        netns = None
        unshare = shutil.which("unshare", path=SYSTEM_PATH)  # never one on a sandbox's PATH
        candidates = [(unshare, "--net"), (unshare, "--net", "--map-current-user")]
        for cmd in candidates if unshare is not None else []:
            ok = subprocess.run([*drop, *cmd, "true"], capture_output=True, timeout=30, check=False)
            if ok.returncode == 0:
                netns = cmd
                break
        if netns is None:
            notes.append(
                "network namespaces unavailable: a run without network gets no IP socket"
                " (loopback included), except for tests of a local service"
                if mode == "landlock" and seccomp.supported()
                else "network namespaces unavailable: tests run with the host's network"
            )
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
        iso = cls(
            mode=mode,
            sandbox_uid=uid,
            netns_cmd=netns,
            mountns=mountns,
            pids_cgroup=pids,
            memory_cgroup=memory,
            cgroup_v2=v2,
            is_root=is_root,
            notes=tuple(notes),
            landlock_abi=landlock,
        )
        if landlock:
            spec_fd = spec_pipe({"ro": ["/usr", "/lib", "/lib64"]})
            try:
                argv = [*drop, *confine_argv(spec_fd), "/bin/true"]
                _try_once(argv, "Landlock cannot confine here", LANDLOCK_HINT, (spec_fd,))
            finally:
                os.close(spec_fd)
        return iso

    @classmethod
    def _auto(cls, sandbox_uid: int) -> Isolation:
        try:
            return cls.probe("bwrap", sandbox_uid)
        except SandboxUnavailable as refused:
            why = refused.why if isinstance(refused, _Refused) else "not installed"
            try:
                landlock = cls.probe("landlock", sandbox_uid)
            except SandboxUnavailable as also:
                raise SandboxUnavailable(
                    f"isolation = auto: neither sandbox runs here. bubblewrap: {refused}. "
                    f"Landlock: {also}"
                ) from None
        first = (
            f"isolation = auto: bubblewrap cannot run here ({_first_sentence(why)}), so "
            "Landlock confines participant code (docs/security-sandbox.md; isolation = bwrap "
            "to insist on bubblewrap)"
        )
        return replace(landlock, notes=(first, *landlock.notes))

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
        return self.mode != "bwrap" and self.is_root and self.sandbox_uid is None

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
            "landlock_abi": self.landlock_abi or None,
            "seccomp": (
                "keyring calls refused, as Docker's default"
                + (
                    "; IP sockets refused where a run has no network"
                    if self.mode == "landlock" and self.netns_cmd is None
                    else ""
                )
            )
            if self.seccomp or (self.mode != "bwrap" and seccomp.supported())
            else None,
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
            argv += [tool("sh"), "-c", f'exec "$@" {SECCOMP_FD}<"$0"', str(self.seccomp)]
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
    # (mount point, upper layer) of each copy-on-write checkout under ``writable``: what
    # is written there lands in the upper layer, which the disk limit walks instead
    layers: tuple[tuple[Path, Path], ...] = ()

    def with_files(self, *files: tuple[Path, str]) -> Mounts:
        return replace(self, files=(*self.files, *files))

    def sized(self) -> tuple[list[Path], list[Path]]:
        """What the disk limit walks (``DiskWatch``), and what it leaves out."""
        roots = [*self.writable, *([self.tmp] if self.tmp else [])]
        return [*roots, *(upper for _, upper in self.layers)], [m for m, _ in self.layers]

    def binds(self) -> list[tuple[tuple[str, str], str]]:
        out = [(("--ro-bind", str(p)), str(p)) for p in dict.fromkeys(self.readonly)]
        out += [(("--bind", str(p)), str(p)) for p in dict.fromkeys(self.writable)]
        out += [(("--ro-bind", str(src)), dest) for src, dest in self.files]
        return out


SECCOMP_FD = 9


CONFINE = Path(confine.__file__)


SPEC_LIMIT = 65536  # a pipe's buffer: the spec is written before anything reads it


def spec_pipe(spec: dict[str, object]) -> int:
    """A pipe holding ``spec`` (JSON), its write end closed; the read end, for the launch
    to inherit (and the caller to close once it has started). confine.py reads the spec
    from there: on its command line, which ``/proc`` shows every process of the host,
    concurrent sandboxes included, it would name the engine's paths."""
    data = json.dumps(spec).encode()
    if len(data) > SPEC_LIMIT:
        raise ValueError(f"a confinement spec of {len(data)} bytes (at most {SPEC_LIMIT})")
    read, write = os.pipe()
    try:
        os.write(write, data)
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    return read


def confine_argv(spec_fd: int) -> list[str]:
    """The prefix that runs a command under the spec in ``spec_fd`` (``spec_pipe``;
    confine.py): this interpreter, isolated from the environment and site-packages, before
    anything of the sandbox's is loaded."""
    return [sys.executable, "-I", "-S", str(CONFINE), f"--spec-fd={spec_fd}", "--"]


def _landlock_note(abi: int) -> str:
    what = ["files: the system read-only, the environment, its workspace"]
    what.append("TCP connect below port 1024 refused" if abi >= 4 else "TCP not restricted")
    what.append("no signals out" if abi >= 6 else "signals not restricted")
    return f"isolation = landlock (ABI {abi}): " + "; ".join(what)


def _first_sentence(text: str) -> str:
    """A tool's complaint in one short clause (bubblewrap's runs on with a URL)."""
    flat = " ".join(text.split())
    return flat.split(". ")[0].rstrip(".")[:200]


class _Refused(SandboxUnavailable):
    """A mode's probe failed: ``why`` is what the probe said."""

    def __init__(self, message: str, why: str) -> None:
        super().__init__(message)
        self.why = why


def _try_once(argv: list[str], failed: str, hint: str, pass_fds: tuple[int, ...] = ()) -> None:
    """Runs a sandboxed ``true``; refuses the mode, saying why and what to do, if it fails."""
    probe = subprocess.run(
        argv,
        capture_output=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
        pass_fds=pass_fds,
    )
    if probe.returncode != 0:
        why = probe.stderr.decode(errors="replace").strip() or f"exit {probe.returncode}"
        raise _Refused(f"{failed} ({why}): {hint}", why)


def _drop_to(uid: int | None) -> list[str]:
    """The prefix that runs a command as ``uid`` (its own group, no others), or nothing;
    with no-new-privileges, so that no set-uid program or file capability on the system
    gives back what the drop took."""
    if uid is None:
        return []
    return [
        tool("setpriv"),
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--no-new-privs",
        "--",
    ]


def _seccomp_file(folder: Path | None = None) -> Path:
    """The compiled filter as a file bubblewrap's shell reads: one per user and filter,
    named by its digest in the temporary directory and shared by this user's processes
    (a private file each, removed at exit, was left behind by every process killed).
    Anyone may make files there, so one is used only if it is this uid's own regular
    file, writable by no one else, holding exactly the filter; else a private copy."""
    data = seccomp.keyring_filter()
    folder = folder or Path(tempfile.gettempdir())
    digest = hashlib.sha256(data).hexdigest()[:16]
    shared = folder / f"swegreen-seccomp-{os.geteuid()}-{digest}.bpf"
    if _holds(shared, data):
        return shared
    private = _private_copy(folder, data)
    with contextlib.suppress(OSError):  # another user's file there: /tmp's sticky bit
        os.replace(private, shared)
    if _holds(shared, data):
        return shared
    if not private.exists():  # moved there, then taken by another user since
        private = _private_copy(folder, data)
    atexit.register(lambda: private.unlink(missing_ok=True))
    return private


def _private_copy(folder: Path, data: bytes) -> Path:
    fd, name = tempfile.mkstemp(prefix="swegreen-seccomp-", suffix=".tmp", dir=folder)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        os.fchmod(out.fileno(), 0o644)  # setpriv has switched to the sandbox's uid then
    return Path(name)


def _holds(path: Path, data: bytes) -> bool:
    """``path`` is this uid's regular file, not a link, writable by no one else, holding
    ``data``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        return False
    with os.fdopen(fd, "rb") as f:
        return f.read(len(data) + 1) == data
