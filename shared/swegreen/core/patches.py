"""Reading a unified/git diff without applying it: which files it touches, and whether it may.

The apply chain (``apply.py``) decides whether a patch applies, exactly as the official
harness does. This module only answers the questions asked *before* that: is this a diff
at all, and does it stay inside the repository (no absolute paths, no ``..``, nothing in
``.git``, no symlink that points out of the tree or is written through)?
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from swegreen.core.classify import Reason

_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
_GIT_HEADER = re.compile(r"^diff --git (\"(?:[^\"\\]|\\.)*\"|\S+) (\"(?:[^\"\\]|\\.)*\"|\S+)$")
_C_ESCAPES = {
    "n": "\n",
    "t": "\t",
    '"': '"',
    "\\": "\\",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "r": "\r",
    "v": "\v",
}
SYMLINK_MODE = "120000"


class PatchRejected(Exception):
    """The patch is refused before applying; the row becomes ``no_op`` with ``reason``."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class FileChange:
    """One file section of a diff. Paths are repository-relative (one prefix stripped)."""

    old_path: str | None = None
    new_path: str | None = None
    new_mode: str | None = None
    binary: bool = False
    binary_data: bool = False
    added_lines: list[str] = field(default_factory=list)
    # Parser state: a section ends at its first hunk or at its own ---/+++ pair.
    has_headers: bool = False
    has_hunks: bool = False

    @property
    def paths(self) -> list[str]:
        return [p for p in dict.fromkeys((self.old_path, self.new_path)) if p is not None]

    @property
    def is_symlink(self) -> bool:
        return self.new_mode == SYMLINK_MODE


@dataclass(frozen=True)
class PatchInfo:
    files: tuple[FileChange, ...]
    size: int
    sha256: str

    @property
    def paths(self) -> list[str]:
        return list(dict.fromkeys(p for f in self.files for p in f.paths))

    @property
    def has_binary_without_data(self) -> bool:
        return any(f.binary and not f.binary_data for f in self.files)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class OversizedPatch:
    """A patch over the size limit: what the row records of it, never its text."""

    info: PatchInfo  # size and sha256, no files (it is never parsed)
    detail: str
    stub: str  # what is stored instead of the patch: its size, hash and first lines


def oversized_patch(text: str | None, limit: int, head: int = 2000) -> OversizedPatch | None:
    """None when ``text`` is within ``limit`` bytes (UTF-8); else the row's account of it.
    Checked before anything else reads the patch, so a huge one costs one encode and hash."""
    if text is None or len(text) * 4 < limit:  # a character is at most four bytes
        return None
    size = len(text.encode("utf-8", "surrogateescape"))
    if size <= limit:
        return None
    digest = sha256(text)
    detail = (
        f"the patch is {size} bytes; the limit is {limit} (config key max_patch_bytes): "
        "it was not applied"
    )
    first = text[:head].rsplit("\n", 1)[0] if "\n" in text[:head] else text[:head]
    stub = (
        f"# not stored: {detail}\n# sha256 {digest}\n# its first {len(first)} characters:\n"
        + first
        + "\n"
    )
    return OversizedPatch(PatchInfo(files=(), size=size, sha256=digest), detail, stub)


EMPTY_PATCH_DETAIL = "the patch is empty"


def is_blank(patch: str | None) -> bool:
    return patch is None or not patch.strip()


def inspect_patch(text: str) -> PatchInfo:
    """Scan a diff's file sections. Hunk bodies are skipped by their line counts, so a
    removed line that happens to read ``--- x`` is never taken for a header."""
    files: list[FileChange] = []
    current: FileChange | None = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            old, new = _git_header_paths(line[len("diff --git ") :])
            current = FileChange(old_path=old, new_path=new)
            files.append(current)
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old = _header_path(line[4:])
            new = _header_path(lines[i + 1][4:])
            if current is None or current.binary or current.has_headers or current.has_hunks:
                current = FileChange()
                files.append(current)
            current.old_path, current.new_path = old, new
            current.has_headers = True
            i += 1
        elif current is not None:
            if line.startswith(("new file mode ", "new mode ")):
                current.new_mode = line.split()[-1]
            elif line.startswith("deleted file mode "):
                current.new_path = None
            elif line.startswith(("rename from ", "copy from ")):
                current.old_path = _strip(_unquote(line.split(" ", 2)[2]), prefix=False)
            elif line.startswith(("rename to ", "copy to ")):
                current.new_path = _strip(_unquote(line.split(" ", 2)[2]), prefix=False)
            elif line.startswith("Binary files "):
                current.binary = True
            elif line == "GIT binary patch":
                current.binary = current.binary_data = True
            elif hm := _HUNK.match(line):
                old_count = int(hm.group(1) or 1)
                new_count = int(hm.group(2) or 1)
                current.has_hunks = True
                i = _skip_hunk(lines, i + 1, old_count, new_count, current)
                continue
        i += 1
    # A section for /dev/null on both sides is not a change (malformed header).
    files = [f for f in files if f.paths]
    return PatchInfo(
        files=tuple(files), size=len(text.encode("utf-8", "surrogateescape")), sha256=sha256(text)
    )


def _skip_hunk(lines: list[str], i: int, old_count: int, new_count: int, change: FileChange) -> int:
    while i < len(lines) and (old_count > 0 or new_count > 0):
        line = lines[i]
        if line.startswith("\\"):  # "\ No newline at end of file"
            i += 1
            continue
        tag = line[:1]
        if tag == "+":
            new_count -= 1
            change.added_lines.append(line[1:])
        elif tag == "-":
            old_count -= 1
        elif tag in (" ", ""):
            old_count -= 1
            new_count -= 1
        else:
            break  # a truncated hunk: let the apply chain report it
        i += 1
    while i < len(lines) and lines[i].startswith("\\"):
        i += 1
    return i


def _git_header_paths(rest: str) -> tuple[str | None, str | None]:
    """Paths of ``diff --git a/X b/Y``. Unquoted names may hold spaces, so prefer the split
    where both sides name the same file (renames are settled by their own lines)."""
    m = _GIT_HEADER.match("diff --git " + rest)
    if m and not (rest.startswith("a/") and rest.count(" b/") > 1):
        return _strip(_unquote(m.group(1))), _strip(_unquote(m.group(2)))
    # Both sides are equally long only when " b/" sits in the middle: one comparison, not
    # one per " b/" (a crafted header full of them would make this quadratic).
    middle = (len(rest) - 1) // 2
    if rest.startswith(" b/", middle) and rest[2:middle] == rest[middle + 3 :]:
        return rest[2:middle], rest[middle + 3 :]
    first = rest.find(" b/")
    if first >= 0:
        return _strip(rest[:first]), _strip(rest[first + 1 :])
    return None, None


def _unquote(path: str) -> str:
    if not (len(path) >= 2 and path[0] == '"' and path[-1] == '"'):
        return path
    body, out, j = path[1:-1], bytearray(), 0
    while j < len(body):
        ch = body[j]
        if ch == "\\" and j + 1 < len(body):
            nxt = body[j + 1]
            if re.fullmatch(r"[0-7]{3}", body[j + 1 : j + 4]):
                out.append(int(body[j + 1 : j + 4], 8))
                j += 4
                continue
            out.extend(_C_ESCAPES.get(nxt, nxt).encode())
            j += 2
            continue
        out.extend(ch.encode())
        j += 1
    return out.decode("utf-8", "surrogateescape")


def _header_path(raw: str) -> str | None:
    raw = raw.split("\t", 1)[0].rstrip()
    path = _unquote(raw)
    if path == "/dev/null":
        return None
    return _strip(path)


def _strip(path: str, prefix: bool = True) -> str | None:
    """Drop the first path component, as ``git apply`` and ``patch -p1`` do. An absolute
    path is kept whole, so that ``unsafe_path`` refuses it: stripping would quietly
    relocate ``/etc/x`` to ``etc/x`` in the repository (``git apply -p1`` does)."""
    if path == "/dev/null":
        return None
    if not prefix or path.startswith("/"):
        return path
    parts = path.split("/", 1)
    return parts[1] if len(parts) == 2 else path


# ---------------------------------------------------------------------- safety checks


def check_patch(info: PatchInfo) -> None:
    """Refuse a diff that is not one, or that reaches outside the repository."""
    if not info.files:
        raise PatchRejected(
            Reason.PATCH_MALFORMED,
            "the patch contains no file changes: expected a unified diff "
            "(as printed by `git diff`) with ---/+++ headers and @@ hunks",
        )
    symlinks = {f.new_path for f in info.files if f.is_symlink and f.new_path}
    for change in info.files:
        for path in change.paths:
            problem = unsafe_path(path)
            if problem:
                raise PatchRejected(
                    Reason.PATCH_OUTSIDE_REPO, f"the patch touches {path!r}: {problem}"
                )
            for parent in _parents(path):
                if parent in symlinks:
                    raise PatchRejected(
                        Reason.PATCH_OUTSIDE_REPO,
                        f"the patch writes {path!r} through the symlink {parent!r} it creates",
                    )
    links = {
        f.new_path: "".join(f.added_lines[:1]) for f in info.files if f.is_symlink and f.new_path
    }
    for link, target in links.items():
        if _leaves_repo(link, target, links):
            raise PatchRejected(
                Reason.PATCH_OUTSIDE_REPO,
                f"the patch makes {link!r} a symlink to {target!r}, which leads outside "
                "the repository" + (" through the links it makes" if len(links) > 1 else ""),
            )


def check_against_tree(info: PatchInfo, root: Path) -> None:
    """Refuse a patch that would write through a symlink already in the checkout."""
    root = root.resolve()
    for path in info.paths:
        for parent in _parents(path):
            candidate = root / parent
            if candidate.is_symlink():
                resolved = candidate.resolve()
                if not resolved.is_relative_to(root):
                    raise PatchRejected(
                        Reason.PATCH_OUTSIDE_REPO,
                        f"the patch writes {path!r} through the symlink {parent!r}, "
                        f"which points outside the repository ({resolved})",
                    )


def applied_parts(info: PatchInfo) -> list[str]:
    """Every path the patch touched and every directory above it: what ``check_links``
    judges once the patch is applied (each backend resolves them where it applied it)."""
    return list(dict.fromkeys(p for path in info.paths for p in [*_parents(path), path]))


def check_links(resolved: Mapping[str, str], root: str) -> None:
    """After applying: each of ``applied_parts`` that is a symlink (``resolved``: part ->
    where it leads, an absolute path, as the checkout's file system resolves it) must lead
    inside the checkout at ``root``, judged in the tree as it now is, so that chains that
    only escape together (``y -> .``, ``x -> y/..``) are caught."""
    top = posixpath.normpath(root)
    for part, where in resolved.items():
        where = posixpath.normpath(where)
        if where != top and not where.startswith(top.rstrip("/") + "/"):
            raise PatchRejected(
                Reason.PATCH_OUTSIDE_REPO,
                f"after applying, {part!r} is a symlink that leads outside the repository "
                f"({where})",
            )


def check_applied(info: PatchInfo, root: Path) -> None:
    """``check_links`` on the engine's checkout."""
    root = root.resolve()
    links = {p: os.path.realpath(root / p) for p in applied_parts(info) if (root / p).is_symlink()}
    check_links(links, str(root))


def unsafe_path(path: str) -> str | None:
    """Why a repository-relative path is not allowed, or None when it is fine."""
    if not path or path.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", path):
        return "absolute paths are not allowed"
    parts = path.replace("\\", "/").split("/")
    if ".." in parts:
        return "'..' would leave the repository"
    if parts[0] == ".git":
        return "the .git directory is not part of the repository's files"
    if "\x00" in path:
        return "NUL in a path"
    return None


def _parents(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[: k + 1]) for k in range(len(parts))]


MAX_LINK_HOPS = 40  # as the kernel's ELOOP: a longer chain is a loop


def _leaves_repo(link: str, target: str, links: Mapping[str, str]) -> bool:
    """Whether ``link -> target`` leads out of the repository, followed through the other
    symlinks the patch makes (``links``) as the file system would follow them: ``y -> .``
    and ``x -> y/..`` leave it together, though each alone stays."""
    if not target or target.startswith("/"):
        return True
    stack = link.split("/")[:-1]
    todo = target.split("/")[::-1]
    hops = 0
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                return True
            stack.pop()
            continue
        here = "/".join([*stack, part])
        if here in links:
            hops += 1
            nxt = links[here]
            if hops > MAX_LINK_HOPS or not nxt or nxt.startswith("/"):
                return True
            todo.extend(nxt.split("/")[::-1])
            continue
        stack.append(part)
    return False
