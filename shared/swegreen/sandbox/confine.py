"""Confinement without privileges: Landlock, a seccomp filter and no-new-privileges, set on
a child of this process and then ``exec``'d into the command (``python -I -S confine.py
SPEC -- CMD``); this process stays outside, as the run's **supervisor**.

Where neither namespaces nor another uid are available (a container with every capability
dropped, as Amber starts a green agent), the kernel still lets any process restrict
itself, for good and for every descendant:

- **Landlock** (Linux 5.13+): outside the paths the spec lends, no file can be read,
  written or executed; ``ro`` paths are read and executed, ``rw`` paths also written,
  ``fifo`` files and ``dev`` devices opened both ways; with ABI 4+ a second layer
  (``tcp_ruleset``) refuses TCP ``connect`` to ports below 1024 (the internet's
  services; tests' own servers on high ports still work); with ABI 6+ no signal reaches
  a process outside the domain (the engine) and no abstract Unix socket outside it is
  reachable. No process outside the domain can be ``ptrace``d (every ABI); a dumpable
  one's ``/proc/<pid>/environ`` stays readable to its uid, so the engine makes itself
  non-dumpable (isolation.shield_engine).
- the **seccomp** program the spec carries (seccomp.py: keyring calls refused).

Without a PID namespace nothing ends a process that left the run's process group (a new
session behind a double fork) when the run ends. So the supervisor is a child subreaper
(``PR_SET_CHILD_SUBREAPER``): every orphan of the run is reparented to it, and when the
command exits, or a signal ends the run (``timeout``, the engine), it kills every process
left under it before it exits, with the command's own status. Outside the Landlock
domain, it cannot be signalled by the confined code (ABI 6+); in process mode (no
Landlock) code of its uid could kill it first: the weakest mode, as documented.

Standard library only, no package imports: it runs with ``-I -S`` before anything from
the sandboxed tree could be imported. The spec comes through an inherited pipe
(``--spec-fd=FD``; isolation.spec_pipe), never the command line, which ``/proc`` shows to
every process of the host; it is JSON: ``{"ro": [...], "rw": [...],
"fifo": [...], "dev": [...], "tcp_fd": int or null, "seccomp": hex}``; with
``"landlock": false`` only the seccomp filter is loaded (process mode's launches).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import stat
import struct
import sys

# linux/landlock.h (the same numbers on x86-64 and arm64: the generic syscall table)
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 16, 32, 64, 128
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 256, 512, 1024, 2048, 4096
REFER, TRUNCATE, IOCTL_DEV = 8192, 16384, 32768  # ABI 2, 3, 5
NET_CONNECT_TCP = 2  # ABI 4 (bind is left alone: tests start local servers)
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2  # ABI 6
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ = EXECUTE | READ_FILE | READ_DIR
DEVICE = READ_FILE | WRITE_FILE | READ_DIR | TRUNCATE | IOCTL_DEV  # `> /dev/null` truncates
# linux/prctl.h, linux/seccomp.h
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
PR_SET_CHILD_SUBREAPER = 36
ENDING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
WAKE = {*ENDING, signal.SIGCHLD}
O_PATH = getattr(os, "O_PATH", 0o10000000)
PRIVILEGED_PORTS = 1024


class ConfineError(OSError):
    """The kernel refused a step: the command must not run unconfined."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi(libc: ctypes.CDLL | None = None) -> int:
    """The Landlock ABI version this kernel offers (0: none, or disabled at boot)."""
    libc = libc or _libc()
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), CREATE_RULESET_VERSION)
    return max(int(version), 0)


def fs_rights(version: int) -> int:
    """Every file-system right the ABI ``version`` can refuse."""
    rights = (1 << 13) - 1
    if version >= 2:
        rights |= REFER
    if version >= 3:
        rights |= TRUNCATE
    if version >= 5:
        rights |= IOCTL_DEV
    return rights


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise ConfineError(err, f"{what}: {os.strerror(err)}")
    return result


def _ruleset(libc: ctypes.CDLL, version: int, fs: int, net: int, scoped: int) -> int:
    attr = struct.pack("=QQQ", fs, net, scoped)
    size = 8 if version < 4 else (16 if version < 6 else 24)
    buf = ctypes.create_string_buffer(attr[:size], size)
    return _check(
        libc.syscall(SYS_CREATE_RULESET, buf, ctypes.c_size_t(size), 0), "landlock ruleset"
    )


def tcp_ruleset(libc: ctypes.CDLL | None = None) -> int | None:
    """A ruleset that refuses TCP ``connect`` below port 1024 and nothing else, or None
    where the ABI has no network rules. Made once by the engine (64,512 port rules take a
    third of a second) and handed to every launch by descriptor: ``"tcp_fd"`` in the spec
    stacks it on the file-system layer."""
    libc = libc or _libc()
    version = abi(libc)
    if version < 4:
        return None
    ruleset = _ruleset(libc, version, 0, NET_CONNECT_TCP, 0)
    rule = ctypes.create_string_buffer(16)
    try:
        for port in range(PRIVILEGED_PORTS, 65536):
            struct.pack_into("=QQ", rule, 0, NET_CONNECT_TCP, port)
            _check(libc.syscall(SYS_ADD_RULE, ruleset, RULE_NET_PORT, rule, 0), "port rule")
    except OSError:
        os.close(ruleset)
        raise
    return ruleset


def landlock(spec: dict, libc: ctypes.CDLL) -> int:
    """Restricts this process as ``spec`` says; the ABI used (refuses to go on without)."""
    version = abi(libc)
    if version < 1:
        raise ConfineError(0, "Landlock is not available on this kernel")
    handled = fs_rights(version)
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0
    ruleset = _ruleset(libc, version, handled, 0, scoped)
    try:
        wanted = [(p, READ) for p in spec.get("ro", [])]
        wanted += [(p, READ_FILE | WRITE_FILE) for p in spec.get("fifo", [])]
        wanted += [(p, DEVICE) for p in spec.get("dev", [])]
        wanted += [(p, handled) for p in spec.get("rw", [])]
        for path, rights in wanted:
            try:
                fd = os.open(path, O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # lent but absent (an optional tree): nothing to reach
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    rights &= FILE_RIGHTS
                rule = ctypes.create_string_buffer(struct.pack("=Qi", rights & handled, fd), 12)
                _check(libc.syscall(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, rule, 0), path)
            finally:
                os.close(fd)
        _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        _check(libc.syscall(SYS_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    tcp = spec.get("tcp_fd")
    if tcp is not None:
        _check(libc.syscall(SYS_RESTRICT_SELF, int(tcp), 0), "landlock_restrict_self (tcp)")
        os.close(int(tcp))
    return version


def load_seccomp(program: bytes, libc: ctypes.CDLL) -> None:
    """Installs a classic-BPF seccomp program (8-byte instructions)."""

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    prog = SockFprog(len(program) // 8, program)
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp")


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: confine.py --spec-fd=FD|SPEC_JSON -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    spec = json.loads(_read_spec(argv[0]))
    program = _resolve(argv[2])  # before Landlock hides the directories it searches
    libc = _libc()
    _check(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "subreaper")
    # No signal handler to race with: every signal that wakes this process stays blocked
    # and is taken by sigwaitinfo, so a second TERM (the engine's, and timeout's forward
    # of it) cannot interrupt the sweep. The child unblocks them before it confines itself.
    signal.pthread_sigmask(signal.SIG_BLOCK, WAKE)
    child = os.fork()
    if child == 0:
        for sig in ENDING:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, WAKE)
        code = 126  # anything unforeseen: the command never runs, unconfined or not
        try:
            code = _confined(spec, libc, program, argv[2:])
        finally:
            os._exit(code)
    try:
        status, ending = _wait_for(child)
    finally:
        end_descendants()
    if ending is not None:
        return _die_of(ending)
    assert status is not None
    if os.WIFSIGNALED(status):
        return _die_of(os.WTERMSIG(status))
    return os.waitstatus_to_exitcode(status)


def _confined(spec: dict, libc: ctypes.CDLL, program: str, argv: list[str]) -> int:
    """The child: confine, then become the command (returns only on failure)."""
    try:
        if spec.get("landlock", True):
            landlock(spec, libc)
        if spec.get("seccomp"):
            load_seccomp(bytes.fromhex(spec["seccomp"]), libc)
    except OSError as exc:
        print(f"swegreen confine: {exc}", file=sys.stderr, flush=True)
        return 126
    try:
        os.execv(program, argv)
    except OSError as exc:
        print(f"swegreen confine: {program}: {exc.strerror}", file=sys.stderr, flush=True)
    return 127


def _wait_for(child: int) -> tuple[int | None, int | None]:
    """The command's wait status, or the signal that ends the run first; orphans that end
    meanwhile are reaped on the way. The signals of ``WAKE`` must be blocked."""
    while True:
        while True:  # SIGCHLDs coalesce: reap everything that has ended
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == child:
                return status, None
            if pid == 0:
                break
        info = signal.sigwaitinfo(WAKE)
        if info.si_signo != signal.SIGCHLD:
            return None, info.si_signo


def children(parent: int) -> list[int]:
    """Processes whose parent is ``parent`` (from /proc: no kernel option needed)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == parent:
            found.append(int(entry.name))
    return found


def end_descendants() -> None:
    """Kills every process under this one, until none is left: a killed process's
    children are reparented here (the subreaper) and killed in the next pass."""
    me = os.getpid()
    while left := children(me):
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in left:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _die_of(signum: int) -> int:
    """Ends this process by ``signum``, as the command was ended, so that the caller
    (``timeout``, the engine) sees the same status; 128 + signum where it cannot."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)
    return 128 + signum


def _read_spec(arg: str) -> str:
    """The spec: from the inherited pipe ``--spec-fd=FD`` names (read whole, then closed,
    so that the confined command never holds it), or the argument itself."""
    if not arg.startswith("--spec-fd="):
        return arg
    fd = int(arg.removeprefix("--spec-fd="))
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode()


def _resolve(name: str) -> str:
    """``name`` as ``execvp`` would find it on ``PATH`` (unchanged when it has a slash)."""
    if "/" in name:
        return name
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(folder or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return name


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
