"""Private views of a built environment: hard links to its files, private copies of what
holds its own path (scripts, configuration), so evaluations never write into the build."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

# What an interpreter installation's bin/ holds of its own; the rest belongs to packages.
INTERPRETER_EXECUTABLES = ("python", "pydoc", "idle", "2to3")


def make_view(source: Path, dest: Path, rewrite: Mapping[str, str] | None = None) -> None:
    """What installs may write gets a private copy: ``bin/`` (scripts re-pointed at the
    view) and ``site-packages`` (hardlinks, with its top-level files such as
    ``easy-install.pth``, which setuptools rewrites in place, copied). Everything else (the
    stdlib, headers, shared libraries) is a symlink into the environment, which nothing
    writes to. Python finds its prefix from the view's own ``bin/``, so ``sys.prefix`` and
    every install land in the view. ``rewrite`` maps more paths to replace in the private
    copies: a view of a prepared workspace's view points its editable installs (``.pth``,
    ``.egg-link``, editable finders) at the new checkout."""
    pairs = {str(source): str(dest), **(rewrite or {})}
    dest.mkdir(parents=True)
    for entry in source.iterdir():
        target = dest / entry.name
        if entry.name == "bin":
            _copy_bin(entry, target, pairs)
        elif entry.name == "lib" and not entry.is_symlink():
            target.mkdir()
            for lib in entry.iterdir():
                if lib.name.startswith("python") and lib.is_dir() and not lib.is_symlink():
                    _view_stdlib(lib, target / lib.name, pairs)
                else:
                    (target / lib.name).symlink_to(lib)
        elif entry.name == "pyvenv.cfg":
            shutil.copy2(entry, target)
        else:
            target.symlink_to(entry)


def _replace_all(data: bytes, pairs: Mapping[str, str]) -> bytes:
    for old, new in pairs.items():
        data = data.replace(old.encode(), new.encode())
    return data


def _view_stdlib(source: Path, dest: Path, pairs: Mapping[str, str]) -> None:
    dest.mkdir()
    for entry in source.iterdir():
        if entry.name == "site-packages":
            subprocess.run(["cp", "-al", str(entry), str(dest / entry.name)], check=True)
            for path in (dest / entry.name).iterdir():
                if path.is_file() and not path.is_symlink():
                    _private_copy(path, pairs)
        else:
            (dest / entry.name).symlink_to(entry)


def _copy_bin(source: Path, dest: Path, pairs: Mapping[str, str]) -> None:
    dest.mkdir()
    for entry in source.iterdir():
        target = dest / entry.name
        if entry.is_symlink():
            target.symlink_to(_replace_all(os.readlink(entry).encode(), pairs).decode())
        elif entry.is_file():
            with entry.open("rb") as fh:
                head = fh.read(1024)
            if b"\0" in head:  # a binary (the interpreter): never rewritten by installs
                os.link(entry, target)
                continue
            target.write_bytes(_replace_all(entry.read_bytes(), pairs))
            shutil.copymode(entry, target)


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
