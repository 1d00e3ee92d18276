"""The environment belongs to the benchmark too: what the eval-time install may change in it.

The install step runs the participant's build code (``setup.py``, build hooks) with the
evaluation's environment view writable, as upstream's containers do. An honest install
changes only its own distribution there: its ``dist-info``/``egg-info``, the files its
``RECORD`` lists (editable ``.pth`` files and finders, console scripts, a non-editable
copy of the package). Code that writes anything else can change what every later Python
process loads before any test runs: a ``.pth`` line that imports a force-pass plugin, a
``sitecustomize``, a replaced ``_pytest`` module or a forged ``.pyc`` of one, a new
``pytest11`` entry point, a shadowed standard library module.

``EnvGuard`` takes a snapshot of the view before the install (no file is read: kind,
inode, size, mtime, link target, and the change time of the view's private files) and,
after it, puts back every change that is not the project's own: new paths are removed,
replaced ones restored (hardlinks re-linked to the environment's inode, or copied from
it over a view mounted copy-on-write; private copies from a backup, symlinks re-made),
new or changed bytecode dropped (Python compiles it again from the source). Even among
the project's own files, a ``.pth`` line that runs code is allowed only in setuptools'
editable-finder form, and no distribution may add a ``pytest11`` plugin or a start-up
module. Everything put back is listed on the row (``env:<path>``). Nothing is followed
through a symlink.

The project's ``RECORD`` is the build's own word, and the build is the participant's
code, so it proves nothing on its own. Three rules do not trust it: a file another
distribution had (the test runner's launcher, a module of ``_pytest``) or a new file in
another distribution's directory is never the project's to claim; a new launcher named
like a word of the test command is not the project's either; and the code that runs at
every interpreter start, setuptools' editable finder, must be the code the prepared
install wrote, only its data (which package lives where, inside the checkout) may differ.
"""

from __future__ import annotations

import ast
import base64
import csv
import hashlib
import io
import os
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

# setuptools' editable install (PEP 660): `import __editable___<name>_finder; ...install()`
FINDER_LINE = re.compile(r"^import (__editable___\w+_finder); \1\.install\(\)$")
FINDER_FILE = re.compile(r"^__editable___\w+_finder\.py$")
# The finder's data: where each package lives. Everything else in it is code.
_FINDER_DATA = frozenset({"MAPPING", "NAMESPACES", "PATH_PLACEHOLDER"})
STARTUP_MODULES = frozenset({"sitecustomize.py", "usercustomize.py"})
_DIST_DIR = re.compile(r"^(?P<name>[^/]+?)-[^-/]+\.(dist-info|egg-info)$")


@dataclass(frozen=True)
class Entry:
    kind: int  # stat.S_IFMT
    ino: int
    size: int
    mtime_ns: int
    nlink: int
    target: str | None = None  # a symlink's
    ctime_ns: int = 0


def _scan(root: Path) -> dict[str, Entry]:
    out: dict[str, Entry] = {}
    for dirpath, dirnames, filenames in os.walk(root):  # never descends a symlink
        here = Path(dirpath)
        for name in [*dirnames, *filenames]:
            path = here / name
            st = path.lstat()
            kind = stat.S_IFMT(st.st_mode)
            target = os.readlink(path) if kind == stat.S_IFLNK else None
            out[str(path.relative_to(root))] = Entry(
                kind, st.st_ino, st.st_size, st.st_mtime_ns, st.st_nlink, target, st.st_ctime_ns
            )
    return out


def canonical_name(name: str) -> str:
    """A distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class EnvGuard:
    """Keeps an environment view (``view``) to its state before the install step, except
    for the project's own distributions (``projects``: canonical names)."""

    view: Path
    backup: Path  # the engine's, out of the sandbox's sight: private copies kept here
    source: Path | None = None  # the view this one was made from (its hardlinks' twins)
    projects: frozenset[str] = frozenset()
    # where the project's packages may live (the checkout, as the sandbox sees it)
    roots: tuple[Path, ...] = ()
    # what the test phase runs by name (its test command's words, git): no new launcher
    # may take one of these names
    commands: frozenset[str] = frozenset()
    _before: dict[str, Entry] = field(default_factory=dict)
    _owned_before: dict[str, str | None] = field(default_factory=dict)
    _owned_dirs: set[str] = field(default_factory=set)
    _pth_before: set[str] = field(default_factory=set)
    _finders_before: set[str] = field(default_factory=set)
    _names_before: set[tuple[str, str]] = field(default_factory=set)  # (site dir, import name)

    def snapshot(self) -> None:
        self._before = _scan(self.view)
        self._owned_before = self._project_files(self.projects)
        self._owned_dirs = {
            str(parent) for rel in self._owned_before for parent in Path(rel).parents
        }
        self._finders_before = {
            shape
            for rel, entry in self._before.items()
            if FINDER_FILE.match(rel.rsplit("/", 1)[-1]) and entry.kind == stat.S_IFREG
            if (shape := finder_shape(_read(self.view / rel), ())) is not None
        }
        self._names_before = {
            (site, _import_name(name))
            for rel in self._before
            for site, _, name in [rel.rpartition("/")]
            if site.endswith("site-packages")
        }
        self._pth_before = {
            line
            for rel, entry in self._before.items()
            if rel.endswith(".pth") and entry.kind == stat.S_IFREG
            for line in _code_lines(self.view / rel)
        }
        shutil.rmtree(self.backup, ignore_errors=True)
        self.backup.mkdir(parents=True)
        for rel, entry in self._before.items():
            if entry.kind == stat.S_IFREG and entry.nlink == 1:
                dest = self.backup / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(self.view / rel, dest, follow_symlinks=False)

    def changes(self) -> tuple[list[str], list[str]]:
        """(changed or new paths, removed paths) since the snapshot."""
        after = _scan(self.view)
        changed = [
            rel
            for rel, entry in after.items()
            if (old := self._before.get(rel)) is None or _differs(old, entry)
        ]
        removed = [rel for rel in self._before if rel not in after]
        return sorted(changed), sorted(removed)

    def put_back(self) -> list[str]:
        """Undo what is not the project's; returns the paths put back (``env:`` ones)."""
        changed, removed = self.changes()
        metas = self._metadata_dirs()
        owned = self._project_files(self.projects, metas)
        needed = self._project_files(self.dependencies(metas) - self.projects, metas)
        allowed = {**self._owned_before, **needed, **owned}
        dependency = {rel for rel in needed if rel not in owned}
        kept = {
            rel
            for rel in changed
            if self._allowed(rel, allowed) and not (rel in dependency and self._shadows(rel))
        }
        # a new directory stays when it holds something that does (a dependency's package)
        holders = {str(parent) for rel in kept for parent in Path(rel).parents}
        doomed = [
            rel
            for rel in changed
            if rel not in kept and not (rel in holders and self._new_dir(rel))
        ]
        doomed += [rel for rel in removed if not self._allowed(rel, allowed)]
        doomed = sorted(set(doomed))
        # what is there now goes first, deepest first; then what was there comes back,
        # parents before their contents (a directory replaced by a link, say)
        for rel in sorted(doomed, key=lambda r: (-r.count("/"), r)):
            if _through_real_dirs(self.view, rel):  # never through a link the install made
                _remove(self.view / rel)
        for rel in sorted(doomed, key=lambda r: (r.count("/"), r)):
            self._restore(rel)
        # bytecode is dropped without a word: an honest install compiles its own too
        shown = (r for r in doomed if not r.endswith((".pyc", ".pyo", "__pycache__")))
        return [f"env:{rel}" for rel in sorted(set(shown))]

    # -- what is the project's --------------------------------------------------------

    def _metadata_dirs(self) -> list[tuple[str, Path]]:
        """Every distribution's metadata directory in the view: (canonical name, path)."""
        found = []
        for site in self.view.glob("lib/python*/site-packages"):
            if site.is_symlink() or not site.is_dir():
                continue
            for meta in site.iterdir():
                match = _DIST_DIR.match(meta.name)
                if match and not meta.is_symlink() and meta.is_dir():
                    found.append((canonical_name(match["name"]), meta))
        return found

    def dependencies(self, metas: list[tuple[str, Path]] | None = None) -> frozenset[str]:
        """Distributions new since the snapshot that the project requires, directly or
        through one another: what upstream's install fetches when a patch adds a
        requirement (pylint-4661's ``appdirs``). A distribution that was there before is
        never one of them: an upgrade would replace files another one had."""
        metas = self._metadata_dirs() if metas is None else metas
        new = {
            name: meta
            for name, meta in metas
            if str(meta.relative_to(self.view)) not in self._before
        }
        wanted: set[str] = set()
        for name, meta in metas:
            if name in self.projects:
                wanted |= _requirements(meta)
        for root in self.roots:  # ``setup.py develop``: the egg-info lives in the checkout
            for meta in [*root.glob("*.egg-info"), *root.glob("*/*.egg-info")]:
                name = canonical_name(meta.name.removesuffix(".egg-info"))
                if name in self.projects and meta.is_dir() and not meta.is_symlink():
                    wanted |= _requirements(meta)
        found: set[str] = set()
        while pending := (wanted & new.keys()) - found:
            for name in pending:
                found.add(name)
                wanted |= _requirements(new[name])
        return frozenset(found)

    def _shadows(self, rel: str) -> bool:
        """Whether a dependency's file would take an import name that something else had:
        a module or package of the checkout or one already in site-packages. A new
        dependency adds names; it never stands in for code the tests already import."""
        parts = Path(rel).parts
        if "site-packages" not in parts[:-1]:
            return False  # a launcher, data files: the other rules judge those
        at = parts.index("site-packages") + 1
        if _DIST_DIR.match(parts[at]):
            return False
        top = _import_name(parts[at])
        if ("/".join(parts[:at]), top) in self._names_before:
            return True
        return any((root / top).exists() or (root / f"{top}.py").exists() for root in self.roots)

    def _new_dir(self, rel: str) -> bool:
        path = self.view / rel
        return rel not in self._before and path.is_dir() and not path.is_symlink()

    def _project_files(
        self, names: frozenset[str], metas: list[tuple[str, Path]] | None = None
    ) -> dict[str, str | None]:
        """Paths (relative to the view) that these distributions' RECORDs list, with their
        recorded hashes, and the distributions' own metadata directories."""
        files: dict[str, str | None] = {}
        for name, meta in self._metadata_dirs() if metas is None else metas:
            if name in names:
                base = meta.relative_to(self.view).parent
                files[str(meta.relative_to(self.view))] = None
                record = meta / "RECORD"
                if record.is_file() and not record.is_symlink():
                    text = record.read_text(errors="replace")
                    for row in csv.reader(io.StringIO(text)):
                        if not row or not row[0]:
                            continue
                        rel = os.path.normpath(base / row[0])
                        files[rel] = row[1] if len(row) > 1 and row[1] else None
        return files

    def _allowed(self, rel: str, project: dict[str, str | None]) -> bool:
        name = rel.rsplit("/", 1)[-1]
        path = self.view / rel
        if name in STARTUP_MODULES or name.endswith((".pyc", ".pyo")):
            return False  # bytecode: dropped, Python compiles the source again
        if _startup_package(rel):
            return False  # sitecustomize/__init__.py runs at every start as the module does
        if name.endswith(".pth") and (path.is_symlink() or not self._harmless_pth(path)):
            return False  # a linked .pth could say anything by the time Python reads it
        if self._unchanged_copy(rel):
            return True  # rewritten with the same bytes (setuptools' easy-install.pth)
        if self._others(rel):
            return False  # another distribution's: no RECORD makes it the project's
        if FINDER_FILE.match(name) and not self._finder_as_prepared(path):
            return False  # code at every interpreter start that the prepared one is not
        owner = next((m for m in project if _inside(rel, m) and m.endswith("-info")), None)
        if owner is not None:
            return not (name == "entry_points.txt" and _plugs_into_pytest(path))
        if rel not in project and not self._project_link(rel):
            return False
        if path.is_symlink() or not path.is_file():
            return True  # removed, a link or a directory: nothing of its own to run
        recorded = project.get(rel)
        return recorded is None or _matches(path, recorded)

    def _others(self, rel: str) -> bool:
        """Whether ``rel`` was another distribution's before the install: a path that
        existed and was not the project's, a new one in a directory that existed and
        held nothing of the project's, or a new launcher named like a test command word."""
        if rel in self._before:
            return rel not in self._owned_before and rel not in self._owned_dirs
        parent = str(Path(rel).parent)
        if parent == "bin":
            return rel.rsplit("/", 1)[-1] in self.commands
        shared = parent in ("bin", ".") or parent.endswith("/site-packages")
        return not shared and parent in self._before and parent not in self._owned_dirs

    def _finder_as_prepared(self, path: Path) -> bool:
        if path.is_symlink() or not path.is_file():
            return True  # removed or a link: nothing of its own to run (.pth rules apply)
        shape = finder_shape(_read(path), self.roots)
        return shape is not None and shape in self._finders_before

    def _harmless_pth(self, path: Path) -> bool:
        """Only paths in a .pth, or lines that run code which were there before the
        install (setuptools' own) or setuptools' editable finder: nothing new runs."""
        return all(
            line in self._pth_before or FINDER_LINE.match(line) for line in _code_lines(path)
        )

    def _unchanged_copy(self, rel: str) -> bool:
        old, path = self._before.get(rel), self.view / rel
        if old is None or old.kind != stat.S_IFREG or old.nlink != 1:
            return False
        if path.is_symlink() or not path.is_file():
            return False
        return path.read_bytes() == (self.backup / rel).read_bytes()

    def _project_link(self, rel: str) -> bool:
        """``setup.py develop``'s ``<name>.egg-link`` for one of the project's names."""
        name = rel.rsplit("/", 1)[-1]
        return (
            "/site-packages/" in f"/{rel}"
            and name.endswith(".egg-link")
            and canonical_name(name.removesuffix(".egg-link")) in self.projects
        )

    # -- putting back -----------------------------------------------------------------

    def _restore(self, rel: str) -> None:
        path = self.view / rel
        old = self._before.get(rel)
        if old is None or rel.endswith((".pyc", ".pyo")):
            return  # old bytecode may claim the changed source: Python compiles it again
        if path.is_symlink() or path.exists():
            _remove(path)  # made again by a restored parent's contents? not here: cleared
        path.parent.mkdir(parents=True, exist_ok=True)
        if old.kind == stat.S_IFLNK:
            assert old.target is not None
            path.symlink_to(old.target)
        elif old.kind == stat.S_IFDIR:
            path.mkdir(exist_ok=True)
        elif old.nlink == 1:
            shutil.copy2(self.backup / rel, path, follow_symlinks=False)
        elif self.source is not None and (self.source / rel).is_file():
            try:
                os.link(self.source / rel, path, follow_symlinks=False)
            except OSError:  # a view mounted copy-on-write: another device; its bytes, root's
                shutil.copy2(self.source / rel, path, follow_symlinks=False)


def _differs(old: Entry, new: Entry) -> bool:
    if old.kind != new.kind or old.target != new.target:
        return True
    if old.kind == stat.S_IFDIR:
        return False  # its entries are compared one by one
    if (old.ino, old.size, old.mtime_ns) != (new.ino, new.size, new.mtime_ns):
        return True
    # A private file (one link: a copy the view owns, the sandbox's to write) rewritten in
    # place keeps its inode, and its size and mtime can be set back; its change time
    # cannot. A hardlink's is the build's inode, which the sandbox cannot write, and whose
    # change time other views' links move.
    return old.kind == stat.S_IFREG and old.nlink == 1 and old.ctime_ns != new.ctime_ns


def _through_real_dirs(root: Path, rel: str) -> bool:
    """Whether every directory between ``root`` and ``rel`` is a real one (no symlink)."""
    path = root
    for part in Path(rel).parts[:-1]:
        path = path / part
        if path.is_symlink() or not path.is_dir():
            return False
    return True


def _startup_package(rel: str) -> bool:
    """Whether ``rel`` lies in a site-packages package named like a start-up module."""
    parts = Path(rel).parts
    if "site-packages" not in parts[:-1]:
        return False
    top = parts[parts.index("site-packages") + 1]
    return f"{_import_name(top)}.py" in STARTUP_MODULES


def _import_name(entry: str) -> str:
    """The name a site-packages entry is imported by: pkg, pkg.py, pkg.cpython-311-....so."""
    return entry.split(".", 1)[0]


def _inside(rel: str, directory: str) -> bool:
    return rel == directory or rel.startswith(directory + "/")


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _code_lines(path: Path) -> list[str]:
    """The lines of a .pth file that Python executes (those starting with ``import``)."""
    if path.is_symlink() or not path.is_file():
        return []
    lines = (ln.strip() for ln in path.read_text(errors="replace").splitlines())
    return [ln for ln in lines if ln.startswith(("import ", "import\t"))]


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def finder_shape(text: str, roots: tuple[Path, ...]) -> str | None:
    """setuptools' editable finder with its data taken out: the code it runs, to compare
    with the prepared install's. None where it is not of that form: its data must be
    literals, and every path in it inside ``roots`` (when given)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        if not names & _FINDER_DATA:
            continue
        if len(targets) != 1 or node.value is None:
            return None
        value = _literal(node.value)
        if value is None or not _paths_inside(value, next(iter(names)), roots):
            return None
        node.value = ast.Constant(None)
    return ast.dump(tree)


def _literal(node: ast.expr) -> object | None:
    """A literal's value; a sum of strings counts (setuptools writes one)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal(node.left), _literal(node.right)
        return left + right if isinstance(left, str) and isinstance(right, str) else None
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _paths_inside(value: object, name: str, roots: tuple[Path, ...]) -> bool:
    if name == "PATH_PLACEHOLDER":
        return isinstance(value, str)
    if not isinstance(value, dict):
        return False
    paths: list[object] = []
    for key, item in value.items():
        if not isinstance(key, str):
            return False
        paths += item if isinstance(item, list) else [item]
    if not all(isinstance(p, str) for p in paths):
        return False
    if not roots:
        return True
    resolved = [os.path.normpath(str(p)) for p in paths]
    return all(any(_inside(p, os.path.normpath(r)) for r in roots) for p in resolved)


_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _requirements(meta: Path) -> set[str]:
    """The distribution names a metadata directory requires (canonical), extras and
    markers included: a name that is installed only under a marker was still asked for."""
    names: set[str] = set()
    metadata = meta / ("PKG-INFO" if meta.name.endswith(".egg-info") else "METADATA")
    for line in _read(metadata).splitlines():
        if line.startswith("Requires-Dist:") and (m := _REQ_NAME.match(line[14:])):
            names.add(canonical_name(m[1]))
    for line in _read(meta / "requires.txt").splitlines():  # egg-info's own list
        if not line.startswith("[") and (m := _REQ_NAME.match(line)):
            names.add(canonical_name(m[1]))
    return names


def _plugs_into_pytest(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    text = path.read_text(errors="replace")
    return re.search(r"^\s*\[\s*pytest11\s*\]", text, re.M) is not None


def _matches(path: Path, recorded: str) -> bool:
    algo, _, expected = recorded.partition("=")
    try:
        digest = hashlib.new(algo, path.read_bytes()).digest()
    except ValueError:
        return False
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode() == expected


def command_words(test_cmd: str) -> frozenset[str]:
    """The names a launcher could take to run in the test command's place: every word of
    it that could name a program (``pytest``, ``tox``, ``python``)."""
    words = re.findall(r"[A-Za-z0-9_.+-]+", test_cmd)
    return frozenset(w for w in words if not w.startswith("-") and "=" not in w)


def project_names(view: Path, env_prefix: Path) -> frozenset[str]:
    """The distributions the prepared install added to the environment (canonical names):
    what the eval-time install of the same project may change."""

    def names(prefix: Path) -> set[tuple[str, str]]:
        found = set()
        for site in prefix.glob("lib/python*/site-packages"):
            for meta in site.iterdir():
                match = _DIST_DIR.match(meta.name)
                if match:
                    found.add((canonical_name(match["name"]), meta.name))
                elif meta.name.endswith(".egg-link"):
                    found.add((canonical_name(meta.name.removesuffix(".egg-link")), meta.name))
        return found

    added = names(view) - names(env_prefix)
    return frozenset(name for name, _ in added)
