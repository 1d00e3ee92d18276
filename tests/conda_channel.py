"""A conda channel made here, in conda's own format, for the interpreter tests: conda's
channels are out of reach of this machine and CI (only PyPI and Debian's mirror are), so
the tests package this machine's own CPython builds the way conda-build packages
CPython (a relocatable tree; the prefix it was built at named as a placeholder that the
installer rewrites), index them with rattler's indexer, and serve the channel over HTTP
on 127.0.0.1. What the tests then exercise is the project's real installation code:
rattler's solve, download, hash check and link, into the cache, found by a row's build."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers import serve_directory

PUBLISHED_MS = 1_704_067_200_000  # 2024-01-01
# Left out to keep the package small (site-packages is a package of its own in conda).
SKIPPED = ("site-packages", "idlelib", "tkinter", "turtledemo", "lib2to3/tests", "unittest/test")
# Of CPython's regression suite (lib/pythonX.Y/test), what stands for it: its package, the
# test.support helpers projects import, and one test module.
KEPT_OF_TEST = ("__init__.py", "support", "test_os.py")


def _skipped(rel: str) -> bool:
    parts = rel.split("/")
    if len(parts) < 3 or parts[0] != "lib" or not parts[1].startswith("python"):
        return False
    inner = "/".join(parts[2:]) + "/"
    if any(inner.startswith(f"{s}/") for s in SKIPPED):
        return True
    return parts[2] == "test" and len(parts) > 3 and parts[3] not in KEPT_OF_TEST


def pyenv_tree(version: str) -> Path | None:
    """This machine's pyenv build of ``version`` (X.Y), if it has one."""
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found = sorted(root.glob(f"{version}.*"), key=lambda p: [int(n) for n in p.name.split(".")])
    found = [p for p in found if (p / "bin" / f"python{version}").is_file()]
    return found[-1] if found else None


def _relocated(data: bytes, libdir: bytes, depth: int) -> bytes:
    """An ELF file's RUNPATH into the build tree, pointed at the package's own lib (as
    conda-build makes them: ``$ORIGIN``-relative); the new string NUL-padded in place."""
    old = libdir + b"\0"
    new = b"$ORIGIN/" + b"../" * depth + b"lib"
    if old not in data or len(new) >= len(old):
        return data
    return data.replace(old, new + b"\0" * (len(old) - len(new)))


def package_python(tree: Path, channel: Path, build: str = "swegreen_test_0") -> Path:
    """``tree`` (a CPython installation) as the conda package ``python-<v>-<build>.tar.bz2``
    in ``channel/linux-64``; text files naming the tree's prefix carry it as their
    placeholder, which the installer replaces with the prefix it installs at."""
    version = tree.name
    prefix = str(tree).encode()
    subdir = channel / "linux-64"
    subdir.mkdir(parents=True, exist_ok=True)
    (channel / "noarch").mkdir(exist_ok=True)
    out = subdir / f"python-{version}-{build}.tar.bz2"
    entries: list[dict[str, object]] = []
    with tarfile.open(out, "w:bz2", compresslevel=1) as tar:
        for path in sorted(tree.rglob("*")):
            rel = path.relative_to(tree).as_posix()
            if "__pycache__" in rel.split("/") or _skipped(rel):
                continue
            if path.is_dir() and not path.is_symlink():
                continue
            info = tarfile.TarInfo(rel)
            info.mtime = int(time.time())
            if path.is_symlink():
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
                tar.addfile(info)
                entries.append({"_path": rel, "path_type": "softlink", "size_in_bytes": 0})
                continue
            data = path.read_bytes()
            entry: dict[str, object] = {"_path": rel, "path_type": "hardlink"}
            if data.startswith(b"\x7fELF"):
                data = _relocated(data, prefix + b"/lib", rel.count("/"))
            elif prefix in data and b"\0" not in data:
                entry.update(prefix_placeholder=str(tree), file_mode="text")
            entry.update(sha256=hashlib.sha256(data).hexdigest(), size_in_bytes=len(data))
            info.size, info.mode = len(data), path.stat().st_mode & 0o777
            tar.addfile(info, io.BytesIO(data))
            entries.append(entry)
        major_minor = ".".join(version.split(".")[:2])
        meta = {
            "info/index.json": {
                "name": "python",
                "version": version,
                "build": build,
                "build_number": 0,
                "depends": [],
                "license": "Python-2.0",
                "subdir": "linux-64",
                "arch": "x86_64",
                "platform": "linux",
                # as published before the installer's cut-off date (PUBLISHED_BEFORE)
                "timestamp": PUBLISHED_MS,
            },
            "info/paths.json": {"paths": entries, "paths_version": 1},
            "info/about.json": {"summary": f"CPython {major_minor}, packaged for a test"},
        }
        for name, content in meta.items():
            blob = json.dumps(content, indent=1).encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(blob), int(time.time())
            tar.addfile(info, io.BytesIO(blob))
        files = "\n".join(str(e["_path"]) for e in entries).encode() + b"\n"
        info = tarfile.TarInfo("info/files")
        info.size = len(files)
        tar.addfile(info, io.BytesIO(files))
    return out


def index(channel: Path) -> None:
    """repodata.json for every subdir, as a channel serves it (rattler's indexer), each
    package as uploaded when it was built (the indexer stamps the time it ran: an
    installer that sees channels as of a date would see none of them)."""
    import asyncio

    from rattler.index import index_fs

    asyncio.run(index_fs(channel, write_zst=False, write_shards=False, force=True))
    for repodata in channel.glob("*/repodata.json"):
        data = json.loads(repodata.read_text())
        for record in data.get("packages", {}).values():
            record["indexed_timestamp"] = record.get("timestamp", PUBLISHED_MS)
        repodata.write_text(json.dumps(data))


@contextmanager
def served(channel: Path) -> Iterator[str]:
    """The channel over HTTP on 127.0.0.1; yields its URL."""
    with serve_directory(channel) as url:
        yield url
