"""A seccomp filter for the sandbox: the kernel keyring calls refused, as Docker refuses them.

Kernel keyrings are not namespaced by anything bubblewrap unshares: every sandbox runs as
the same host uid, so a key one of them adds (``add_key``) is readable by the next one
(``keyctl``, ``/proc/keys``), a channel between rows that run at the same time. Docker's
default seccomp profile, under which the official SWE-bench images run, denies
``add_key``, ``request_key`` and ``keyctl`` with EPERM; this filter does the same (and
refuses the x32 system call range, which would reach them by other numbers), so tests
see exactly what they see upstream.

The filter is classic BPF, written here byte by byte (a dozen instructions; no libseccomp
on the engine's side), and handed to bubblewrap with ``--seccomp FD``.
"""

from __future__ import annotations

import errno
import platform
import struct

# linux/audit.h
AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_I386 = 0x40000003
AUDIT_ARCH_AARCH64 = 0xC00000B7
X32_SYSCALL_BIT = 0x40000000
# add_key, request_key, keyctl per architecture (unistd tables)
KEYRING_CALLS = {
    AUDIT_ARCH_X86_64: (248, 249, 250),
    AUDIT_ARCH_I386: (286, 287, 288),
    AUDIT_ARCH_AARCH64: (217, 218, 219),
}
# linux/filter.h, linux/seccomp.h
_LD_ABS_W = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_JA = 0x05
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
_OFF_NR, _OFF_ARCH = 0, 4  # struct seccomp_data


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def keyring_filter() -> bytes:
    """The filter program: keyring calls fail with EPERM on every architecture listed;
    everything else (and any other architecture) is allowed.

    Layout: load the architecture; per architecture a block [jeq arch (else: next
    block, the accumulator still holding the architecture), load the call number, (x86-64:
    the x32 range denied), one jeq per call to DENY, jump to ALLOW]; then ALLOW, DENY."""
    blocks = []
    for arch, calls in KEYRING_CALLS.items():
        x32 = arch == AUDIT_ARCH_X86_64
        blocks.append((arch, calls, x32, 2 + int(x32) + len(calls) + 1))
    allow_at = 1 + sum(size for *_, size in blocks)
    deny_at = allow_at + 1
    program = [(_LD_ABS_W, 0, 0, _OFF_ARCH)]
    for arch, calls, x32, size in blocks:
        start = len(program)
        program.append((_JEQ_K, 0, size - 1, arch))  # else: the next block's first insn
        program.append((_LD_ABS_W, 0, 0, _OFF_NR))
        checks = [(_JGE_K, X32_SYSCALL_BIT)] if x32 else []
        checks += [(_JEQ_K, call) for call in calls]
        for code, k in checks:
            here = len(program)
            program.append((code, deny_at - here - 1, 0, k))
        here = len(program)
        program.append((_JA, 0, 0, allow_at - here - 1))
        assert len(program) - start == size
    program.append((_RET_K, 0, 0, RET_ALLOW))
    program.append((_RET_K, 0, 0, RET_ERRNO | errno.EPERM))
    assert len(program) == deny_at + 1
    return b"".join(_insn(*insn) for insn in program)


# socket(2) per architecture; i386's socketcall(2) multiplexes every socket call, so
# where IP is refused it is refused whole (a 32-bit program gets no socket at all)
SOCKET_CALLS = {AUDIT_ARCH_X86_64: 41, AUDIT_ARCH_I386: 359, AUDIT_ARCH_AARCH64: 198}
SOCKETCALL_I386 = 102
# io_uring_setup, _enter, _register (one number on every architecture since 5.1): its
# socket and connect operations never pass through the socket(2) rule. Docker's default
# profile refuses them too.
IO_URING_CALLS = (425, 426, 427)
AF_INET, AF_INET6 = 2, 10
_OFF_ARG0 = 16  # args[0], its low 32 bits (little-endian)


def no_network_filter() -> bytes:
    """The keyring filter, and IP refused: ``socket(AF_INET | AF_INET6, ...)`` fails with
    EACCES, loopback included (and io_uring, which has socket operations of its own, with
    EPERM). For a run that has no network namespace of its own
    (Landlock and process modes where namespaces are refused, as under Amber) and must
    have no network: Landlock's TCP rules go by port alone and do not cover UDP, so
    without this a test could reach any host (and the green agent's own port).
    Unix sockets are untouched."""
    program: list[tuple[int, int | str, int | str, int]] = [(_LD_ABS_W, 0, 0, _OFF_ARCH)]
    labels: dict[str, int] = {}
    for n, (arch, calls) in enumerate(KEYRING_CALLS.items()):
        after = f"arch{n + 1}"
        program.append((_JEQ_K, 0, after, arch))
        program.append((_LD_ABS_W, 0, 0, _OFF_NR))
        if arch == AUDIT_ARCH_X86_64:
            program.append((_JGE_K, "eperm", 0, X32_SYSCALL_BIT))
        program += [(_JEQ_K, "eperm", 0, call) for call in calls]
        program += [(_JEQ_K, "eperm", 0, call) for call in IO_URING_CALLS]
        if arch == AUDIT_ARCH_I386:
            program.append((_JEQ_K, "eacces", 0, SOCKETCALL_I386))
        program.append((_JEQ_K, 0, "allow", SOCKET_CALLS[arch]))
        program.append((_LD_ABS_W, 0, 0, _OFF_ARG0))
        program.append((_JEQ_K, "eacces", 0, AF_INET))
        program.append((_JEQ_K, "eacces", "allow", AF_INET6))
        labels[after] = len(program)
    labels["allow"] = len(program)
    program.append((_RET_K, 0, 0, RET_ALLOW))
    labels["eperm"] = len(program)
    program.append((_RET_K, 0, 0, RET_ERRNO | errno.EPERM))
    labels["eacces"] = len(program)
    program.append((_RET_K, 0, 0, RET_ERRNO | errno.EACCES))
    out = []
    for at, (code, jt, jf, k) in enumerate(program):
        # a label is a jump to an instruction further on; 0 is the next one. An
        # architecture's block ends in jumps, so "arch<n+1>" is its following block
        # (the last one's: ALLOW, any other architecture)
        jt = labels[jt] - at - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - at - 1 if isinstance(jf, str) else jf
        assert 0 <= jt < 256 and 0 <= jf < 256
        out.append(_insn(code, jt, jf, k))
    return b"".join(out)


def supported() -> bool:
    return platform.machine() in ("x86_64", "amd64", "aarch64", "arm64")
