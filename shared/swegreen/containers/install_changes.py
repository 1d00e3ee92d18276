"""What a row container's install phase changed, as the Docker daemon records it, judged.

The eval script's install runs the patch's build code as root in the row's container,
where every file is writable: it could replace ``git``, ``bash``, the C library or the test
runner, leave a ``sitecustomize`` or a ``.pth`` line that runs at every interpreter start,
register a pytest plugin, or forge another distribution's bytecode. No tool of the
container can be trusted to say what changed afterwards, so the daemon says it (the
container's changes against its image, ``GET /containers/{id}/changes``; files are read
with archive calls, never through the container's programs) and this module judges the
list, with the same rules as the engine's environment guard (sandbox/env_guard.py):

- outside the checkout, the environment and scratch places (``/tmp``, caches), nothing may
  change: a changed system is the end of the row;
- in the environment, only what an install of the project writes: its distributions'
  files (those their ``RECORD`` lists, their metadata); no start-up module, no ``.pth``
  line that runs code but setuptools' editable finder's or one the image had, no new
  ``pytest11`` entry point, no launcher named like a command the test phase runs (a word
  of the test command, ``git`` of the test files' reset), no file
  of a distribution the install did not reinstall changed or removed. Bytecode is
  dropped (Python compiles the source again).

Everything here is a plain function of the change list and the files' texts: the backend
fetches what ``wanted`` names and calls ``violations``.
"""

from __future__ import annotations

import ast
import csv
import io
import posixpath
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from swegreen.sandbox.env_guard import (
    FINDER_FILE,
    FINDER_LINE,
    STARTUP_MODULES,
    canonical_name,
    finder_shape,
)

ADDED, CHANGED, DELETED = "A", "C", "D"  # the daemon's kinds 1, 0, 2
KINDS = {0: CHANGED, 1: ADDED, 2: DELETED}
# Places an honest install (pip, setuptools, a build) may write outside the checkout and
# the environment, and what the backend copies in itself.
SCRATCH = ("/tmp", "/var/tmp", "/root/.cache", "/run", "/dev", "/proc", "/sys")
# Written by the daemon itself (``init``), or by upstream's eval script (``git config
# --global --add safe.directory``): the backend's own git calls read no global config.
EXPECTED = frozenset({"/usr/sbin/docker-init", "/root/.gitconfig"})  # the latter: read
_DIST = re.compile(r"^(?P<name>[^/]+?)-[^-/]+\.(dist-info|egg-info)$")
_EGG = re.compile(r"^(?P<name>[^/-]+)-[^/]*\.egg$")
_EGG_INFO = re.compile(r"^(?P<name>[^/-]+)(-[^/]*)?\.egg-info$")
# where a distribution's RECORD may put data files and headers outside site-packages
DATA_DIRS = ("share", "include")
# where setuptools keeps the editable finder's code (its template), read from the image
FINDER_TEMPLATE_AT = "setuptools/command/editable_wheel.py"


@dataclass(frozen=True)
class Change:
    path: str
    kind: str  # ADDED, CHANGED or DELETED


def parse(changes: Iterable[Mapping[str, object]] | None) -> list[Change]:
    """The daemon's list (``[{"Path": ..., "Kind": 0|1|2}]``, or None: nothing changed)."""
    return [Change(str(c["Path"]), KINDS.get(int(c["Kind"]), CHANGED)) for c in changes or []]  # type: ignore[call-overload]


def leaves(changes: list[Change]) -> list[Change]:
    """The changes that are not only a directory holding others (the daemon lists every
    parent of a changed path as changed)."""
    parents = set()
    for c in changes:
        up = posixpath.dirname(c.path)
        while up not in parents and up != "/":
            parents.add(up)
            up = posixpath.dirname(up)
    return [c for c in changes if not (c.kind == CHANGED and c.path in parents)]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def outside(changes: list[Change], env: str, workdir: str, ours: Iterable[str]) -> list[str]:
    """Paths changed outside the checkout, the environment and scratch places."""
    mine = {*ours, *EXPECTED}
    return sorted(
        c.path
        for c in leaves(changes)
        if c.path not in mine
        and not _under(c.path, workdir)
        and not _under(c.path, env)
        and not any(_under(c.path, s) for s in SCRATCH)
    )


def git_changes(changes: list[Change], workdir: str) -> list[str]:
    """What changed of the checkout's ``.git`` but its index (which git's own status and
    checkout refresh): configuration and hooks name programs the later git calls would
    run; refs (``refs/replace/``, ``packed-refs``), grafts and alternates
    (``objects/info/``) change which tree a commit names, so that the test files would be
    put back from a forged one. No install writes them."""
    git = f"{workdir.rstrip('/')}/.git"
    return sorted(
        c.path for c in leaves(changes) if _under(c.path, git) and c.path != f"{git}/index"
    )


GITCONFIG = "/root/.gitconfig"


def gitconfig_added(now: str | None, before: str | None) -> list[str]:
    """Settings the global git configuration gained beyond ``safe.directory`` (which
    upstream's eval script adds): a ``core.fsmonitor``, an alias, an include would run
    programs in the test phase's own git calls."""

    def settings(text: str | None) -> set[str]:
        found, section = set(), ""
        for raw in (text or "").splitlines():
            line = raw.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line.strip("[] ").lower()
                continue
            key = line.split("=", 1)[0].strip().lower()
            if (section, key) != ("safe", "directory"):
                found.add(f"{section}.{line}")
        return found

    return sorted(settings(now) - settings(before))


@dataclass(frozen=True)
class EnvChanges:
    """The environment's part of the change list, sorted out."""

    env: str
    leaves: tuple[Change, ...]
    workdir: str = "/testbed"  # where an editable finder's packages may live
    # the daemon's own kind of each directory it lists (a directory added is new)
    dirs: tuple[tuple[str, str], ...] = ()
    # canonical names of the checkout's own ``*.egg-info`` the install wrote
    projects: frozenset[str] = frozenset()

    @classmethod
    def of(cls, changes: list[Change], env: str, workdir: str = "/testbed") -> EnvChanges:
        env = env.rstrip("/")
        kept = tuple(c for c in leaves(changes) if _under(c.path, env) and c.path != env)
        dirs = tuple((c.path, c.kind) for c in changes if _under(c.path, env))
        projects = frozenset(
            canonical_name(m["name"])
            for c in changes
            if _under(c.path, workdir) and c.path.count("/") - workdir.count("/") <= 3
            for m in [_EGG_INFO.match(posixpath.basename(c.path))]
            if m is not None
        )
        return cls(env, kept, workdir, dirs, projects)

    def eggs(self) -> dict[str, bool]:
        """The eggs (``setup.py install``'s ``<Name>-<version>-pyX.Y.egg``) the install
        touched, and whether each is the project's to rewrite: one the image had, or a
        new one of the checkout's own name (never a new egg of another name, which the
        image's ``easy-install.pth`` could put before the test runner)."""
        kinds = dict(self.dirs)
        found: dict[str, bool] = {}
        for c, top_dir, top in self._tops():
            if (match := _EGG.match(top)) is not None:
                new = kinds.get(top_dir) == ADDED or (top_dir == c.path and c.kind == ADDED)
                found[top_dir] = not new or canonical_name(match["name"]) in self.projects
        return found

    def _tops(self) -> Iterator[tuple[Change, str, str]]:
        """Each change in a site-packages directory, with the top-level entry it is in
        (its path, its name)."""
        for c in self.leaves:
            if (site := self.site(c.path)) is not None:
                top = c.path[len(site) + 1 :].split("/")[0]
                yield c, f"{site}/{top}", top

    def site(self, path: str) -> str | None:
        """The site-packages directory ``path`` is in (None: elsewhere)."""
        parts = path.split("/")
        if "site-packages" not in parts:
            return None
        return "/".join(parts[: parts.index("site-packages") + 1])

    def reinstalled(self) -> dict[str, str]:
        """Metadata directories the install added, changed or removed (path -> kind: the
        directory's own, ADDED only for one that is new, DELETED for one now gone)."""
        kinds = dict(self.dirs)
        return {
            top_dir: kinds.get(top_dir, CHANGED)
            for _, top_dir, top in self._tops()
            if _DIST.match(top)
        }

    def bytecode(self) -> list[str]:
        """Bytecode added or changed: dropped, whoever wrote it."""
        return sorted(
            c.path for c in self.leaves if c.kind != DELETED and c.path.endswith((".pyc", ".pyo"))
        )

    def wanted(self) -> tuple[list[str], list[str]]:
        """(files to read from the row's container, files to read from the image): the
        records of what was reinstalled, and the ``.pth`` and entry point files changed."""
        now, before = [], []
        for meta, kind in self.reinstalled().items():
            if kind != DELETED:
                now.append(f"{meta}/RECORD")
            if kind != ADDED:
                before.append(f"{meta}/RECORD")
        for c in self.leaves:
            name = posixpath.basename(c.path)
            if c.kind != DELETED and (name.endswith(".pth") or name == "entry_points.txt"):
                now.append(c.path)
                if c.kind == CHANGED:
                    before.append(c.path)
            if c.kind != DELETED and FINDER_FILE.match(name) and (site := self.site(c.path)):
                now.append(c.path)
                before.append(f"{site}/{FINDER_TEMPLATE_AT}")
        return sorted(set(now)), sorted(set(before))

    def violations(
        self,
        now: Mapping[str, str | None],
        before: Mapping[str, str | None],
        commands: frozenset[str],
        unchanged: frozenset[str] = frozenset(),
    ) -> list[tuple[str, str]]:
        """What the install changed that an install of the project does not: (path, why).
        ``now``/``before``: the texts of ``wanted``'s files (None: absent); ``unchanged``:
        changed files whose bytes are the image's (see ``changed``)."""
        reinstalled = self.reinstalled()
        owned_now = _recorded(now, reinstalled, ADDED)
        owned_before = _recorded(before, reinstalled, DELETED)
        metas = set(reinstalled)
        eggs = self.eggs()
        found = []
        for c in self.leaves:
            name = posixpath.basename(c.path)
            if c.path.endswith((".pyc", ".pyo")) or "/__pycache__" in c.path:
                continue  # dropped
            if c.kind == CHANGED and c.path in unchanged:
                continue  # written again with the image's bytes (a develop reinstall)
            why = None
            site = self.site(c.path)
            in_meta = any(_under(c.path, m) for m in metas)
            egg = next((e for e in eggs if _under(c.path, e)), None)
            if name in STARTUP_MODULES or (
                site is not None and c.path.startswith(f"{site}/sitecustomize/")
            ):
                why = "a module that runs at every interpreter start"
            elif c.kind != DELETED and name.endswith(".pth"):
                why = _pth_runs_code(now.get(c.path), before.get(c.path))
            elif c.kind != DELETED and name == "entry_points.txt":
                if _pytest_plugins(now.get(c.path)) - _pytest_plugins(before.get(c.path)):
                    why = "a new pytest plugin entry point"
            elif c.kind != DELETED and FINDER_FILE.match(name) and site is not None:
                template = before.get(f"{site}/{FINDER_TEMPLATE_AT}")
                if not _setuptools_finder(now.get(c.path), template, self.workdir):
                    why = "an editable finder whose code is not setuptools'"
            elif site is None:
                bin_dir = f"{self.env}/bin/"
                data = any(_under(c.path, f"{self.env}/{d}") for d in DATA_DIRS)
                recorded = c.path in (owned_now if c.kind != DELETED else owned_before)
                if not c.path.startswith(bin_dir) and not (data and recorded):
                    # the project's data files and headers aside: never the standard
                    # library, never conda's activation scripts (etc/conda/activate.d)
                    why = "outside site-packages and bin/"
                elif c.kind != DELETED and name in commands:
                    why = "a launcher named like a command the test phase runs"
                elif c.kind == DELETED and c.path not in owned_before:
                    why = "another distribution's file removed"
                elif c.kind != DELETED and c.path not in owned_now | owned_before:
                    why = "no reinstalled distribution's record lists it"
            elif in_meta:
                why = None  # a reinstalled distribution's metadata
            elif egg is not None:
                why = None if eggs[egg] else "a new egg that is not the project's"
            elif name.endswith(".egg-link") and posixpath.dirname(c.path) == site:
                why = None  # ``setup.py develop``'s link: a path, never run
            elif c.kind in (CHANGED, DELETED) and c.path not in owned_before:
                why = (
                    "another distribution's file changed"
                    if c.kind == CHANGED
                    else ("another distribution's file removed")
                )
            elif c.kind == ADDED and c.path not in owned_now and not _is_dir_of(c.path, owned_now):
                why = "no reinstalled distribution's record lists it"
            if why is not None:
                found.append((c.path, why))
        return found

    def changed(self, paths: Iterable[str]) -> list[str]:
        """Those of ``paths`` that were changed (not added or removed): worth comparing
        with the image, since a reinstall may write the same bytes again."""
        kinds = {c.path: c.kind for c in self.leaves}
        return [p for p in paths if kinds.get(p) == CHANGED]


def _is_dir_of(path: str, files: set[str]) -> bool:
    return any(f.startswith(path + "/") for f in files)


def _recorded(texts: Mapping[str, str | None], metas: Mapping[str, str], skip: str) -> set[str]:
    """Absolute paths the RECORDs among ``texts`` list (of the metadata not ``skip``)."""
    files: set[str] = set()
    for meta, kind in metas.items():
        if kind == skip:
            continue
        text = texts.get(f"{meta}/RECORD")
        if not text:
            continue
        base = posixpath.dirname(meta)
        for row in csv.reader(io.StringIO(text)):
            if row and row[0]:
                files.add(posixpath.normpath(posixpath.join(base, row[0])))
    return files


def _code_lines(text: str | None) -> set[str]:
    return {
        line.strip()
        for line in (text or "").splitlines()
        if line.strip().startswith(("import ", "import\t"))
    }


def _pth_runs_code(now: str | None, before: str | None) -> str | None:
    new = _code_lines(now) - _code_lines(before)
    if any(not FINDER_LINE.match(line) for line in new):
        return "a .pth line that runs code"
    return None


def _pytest_plugins(text: str | None) -> set[str]:
    found, section = set(), ""
    for line in (text or "").splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[] ")
        elif section == "pytest11" and "=" in line:
            found.add(line.replace(" ", ""))
    return found


def _setuptools_finder(text: str | None, editable_wheel: str | None, workdir: str) -> bool:
    """Whether ``text`` is setuptools' editable finder (its code as the image's setuptools
    writes it; its data, where each package lives, inside the checkout)."""
    if text is None or editable_wheel is None:
        return False
    try:
        tree = ast.parse(editable_wheel)
    except SyntaxError:
        return False
    template = next(
        (
            node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "_FINDER_TEMPLATE" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ),
        None,
    )
    if template is None:
        return False
    try:
        data = _Data(mapping={}, namespaces={}, name="__editable___swegreen_finder")
        rendered = template.format_map(data)
    except (ValueError, KeyError, IndexError):
        return False
    expected = finder_shape(rendered, ())
    return expected is not None and finder_shape(text, (PurePosixPath(workdir),)) == expected


class _Data(dict):
    """A finder's data for rendering setuptools' template: empty (any other field too)."""

    def __missing__(self, key: str) -> str:
        return "swegreen"
