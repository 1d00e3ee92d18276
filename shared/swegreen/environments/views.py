"""Private views of a built environment: links to its files, private copies of what
holds its own path (scripts, configuration), so evaluations never write into the build.

Hard links where the sandbox runs as a uid of its own: the files stay the engine's, which
that uid cannot write, only replace in its view. Where it runs as the engine's own uid (a
non-root engine, or root with every capability dropped, as Amber starts one), a hard
link would be its file to write in place, and the write would reach the environment and
every later row that uses it; there the view links symbolically, so every write through
it reaches the source's own path, which the sandbox sees read-only (Landlock, a
read-only bind), and is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

# What an interpreter installation's bin/ holds of its own; the rest belongs to packages.
INTERPRETER_EXECUTABLES = ("python", "pydoc", "idle", "2to3")


MountCopy = Callable[[Path, Path], bool]  # (lower, target): mounted copy-on-write, or not
Links = Literal["hard", "symbolic"]
METADATA_DIRS = (".dist-info", ".egg-info")


def make_view(
    source: Path,
    dest: Path,
    rewrite: Mapping[str, str] | None = None,
    owner: int | None = None,
    mount_copy: MountCopy | None = None,
    links: Links = "hard",
) -> None:
    """What installs may write gets a private copy: ``bin/`` (scripts re-pointed at the
    view) and ``site-packages`` (hardlinks, with its top-level files such as
    ``easy-install.pth``, which setuptools rewrites in place, copied). Everything else (the
    stdlib, headers, shared libraries) is a symlink into the environment, which nothing
    writes to. Python finds its prefix from the view's own ``bin/``, so ``sys.prefix`` and
    every install land in the view. ``rewrite`` maps more paths to replace in the private
    copies: a view of a prepared workspace's view points its editable installs (``.pth``,
    ``.egg-link``, editable finders) at the new checkout. ``owner``: the sandbox's uid,
    given the view's directories, private files and symlinks as it is made, as
    ``LocalSandbox.lend`` would give them afterwards (a second walk over django's 8,000
    entries: 0.1 s of every evaluation). ``mount_copy``: mounts ``site-packages``
    copy-on-write over the source's instead of linking its files one by one (a
    ``source`` whose directories are ``owner``'s already: ``own_tree``); where it cannot,
    the links are made. ``links``: how site-packages' files are linked ("symbolic" for a
    sandbox of the engine's own uid; see the module's docstring), the interpreter's
    binaries then copied."""
    pairs = {str(source): str(dest), **(rewrite or {})}
    own = _owner(owner)
    dest.mkdir(parents=True)
    own(dest)
    for entry in source.iterdir():
        target = dest / entry.name
        if entry.name == "bin":
            _copy_bin(entry, target, pairs, own, links)
        elif entry.name == "lib" and not entry.is_symlink():
            target.mkdir()
            own(target)
            for lib in entry.iterdir():
                if lib.name.startswith("python") and lib.is_dir() and not lib.is_symlink():
                    _view_stdlib(lib, target / lib.name, pairs, owner, mount_copy, links)
                else:
                    (target / lib.name).symlink_to(lib)
                    own(target / lib.name)
        elif entry.name == "pyvenv.cfg":
            shutil.copy2(entry, target)
            own(target)
        else:
            target.symlink_to(entry)
            own(target)


def _owner(uid: int | None) -> Callable[[Path], None]:
    """What ``LocalSandbox.lend`` does to one entry it owns: directories, files of one
    link and symlinks become ``uid``'s; None: nothing (the engine is not root)."""
    if uid is None:
        return lambda path: None

    def own(path: Path) -> None:
        os.lchown(path, uid, uid)

    return own


def _replace_all(data: bytes, pairs: Mapping[str, str]) -> bytes:
    for old, new in pairs.items():
        data = data.replace(old.encode(), new.encode())
    return data


def _view_stdlib(
    source: Path,
    dest: Path,
    pairs: Mapping[str, str],
    owner: int | None,
    mount_copy: MountCopy | None = None,
    links: Links = "hard",
) -> None:
    own = _owner(owner)
    dest.mkdir()
    own(dest)
    for entry in source.iterdir():
        if entry.name == "site-packages":
            if mount_copy is None or not mount_copy(entry, dest / entry.name):
                _link_tree(entry, dest / entry.name, owner, links)
            # what holds a path gets a private copy: in a mounted copy, in its upper layer
            for path in (dest / entry.name).iterdir():
                if path.is_file() and (links == "symbolic" or not path.is_symlink()):
                    _private_copy(path, pairs)
                    own(path)
                elif links == "symbolic" and path.suffix in METADATA_DIRS and path.is_dir():
                    # pip refuses to remove a file whose real path is outside sys.prefix:
                    # a distribution's record stays real, so reinstalling it is as upstream
                    for file in path.rglob("*"):
                        if file.is_symlink() and file.is_file():
                            _private_copy(file)
                            own(file)
        else:
            (dest / entry.name).symlink_to(entry)
            own(dest / entry.name)


def _link_tree(source: Path, dest: Path, owner: int | None, links: Links = "hard") -> None:
    """``cp -al`` (``cp -as``: symbolic), its directories and symlinks then given to
    ``owner``: both in programs of their own, so that the view is made beside the seal's
    walk (testbeds.py) rather than taking turns with it for the interpreter's lock."""
    how = "-al" if links == "hard" else "-as"
    subprocess.run(["cp", how, str(source.absolute()), str(dest)], check=True)
    if owner is not None:
        own_tree(dest, owner)


def own_tree(root: Path, owner: int) -> None:
    """Give ``owner`` the directories and symlinks under ``root``, never a file: what a
    view's sandbox may add to and remove from, files it may replace but never write into."""
    subprocess.run(
        ["find", str(root), "(", "-type", "d", "-o", "-type", "l", ")",
         "-exec", "chown", "-h", f"{owner}:{owner}", "{}", "+"],
        check=True,
    )  # fmt: skip


def _copy_bin(
    source: Path,
    dest: Path,
    pairs: Mapping[str, str],
    own: Callable[[Path], None],
    links: Links = "hard",
) -> None:
    dest.mkdir()
    own(dest)
    for entry in source.iterdir():
        target = dest / entry.name
        if entry.is_symlink():
            target.symlink_to(_replace_all(os.readlink(entry).encode(), pairs).decode())
            own(target)
        elif entry.is_file():
            with entry.open("rb") as fh:
                head = fh.read(1024)
            if b"\0" in head:  # a binary (the interpreter): never rewritten by installs
                if links == "hard":
                    os.link(entry, target)
                    continue
                # a real file (Python finds its prefix through symlinks): a few kB
                shutil.copy2(entry, target)
                own(target)
                continue
            target.write_bytes(_replace_all(entry.read_bytes(), pairs))
            shutil.copymode(entry, target)
            own(target)


def _private_copy(path: Path, pairs: Mapping[str, str] | None = None) -> None:
    """Replace a hardlink by a file of its own (same content and mode), with ``pairs``
    replaced in it when it is text."""
    tmp = path.with_name(path.name + ".swegreen-tmp")
    shutil.copy2(path, tmp)
    if pairs:
        data = tmp.read_bytes()
        if b"\0" not in data[:1024]:
            changed = _replace_all(data, pairs)
            if changed != data:
                tmp.write_bytes(changed)
    os.replace(tmp, path)
