"""Python interpreters from conda packages, the way SWE-bench's images get theirs.

The official images run ``conda create -n testbed python=X.Y`` against Miniconda's
channels (``defaults``, then ``conda-forge``); every Verified version (3.5 to 3.11) is
there for linux x86_64, and most for aarch64. This module installs the same packages
without conda, through rattler (``py-rattler`` on PyPI): it solves ``python X.Y.*`` for
the target platform against each channel in turn (the first that has it wins, as
conda's default, flexible channel priority does for one package), downloads the archives
into a package cache where each is checked against the sha256 its channel's index gives,
and links them into one prefix per version, ``<root>/<subdir>/<X.Y>``, shared by every
environment of that version.

The solve sees each channel as it was at ``PUBLISHED_BEFORE``: a machine that installs
3.6 today and an image built next year get the same build. ``swegreen-python.json`` in
the prefix, written last, marks an install complete and says what it is (channel,
package, sha256); an install found without it was interrupted and is made again.

This file needs only the standard library and rattler, so an image's build stage can run
it on its own (``python conda_pythons.py install ...``) for any target platform from any
host: linking a conda package runs nothing of it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import fcntl
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Miniconda's channels in the order SWE-bench's images use them (defaults' main, then the
# conda-forge its Dockerfile appends). Anaconda's terms of service apply to repo.anaconda.com
# for some organisations: SWEGREEN_PYTHON_CHANNELS=https://conda.anaconda.org/conda-forge
# takes conda-forge's builds alone.
OFFICIAL_CHANNELS = (
    "https://repo.anaconda.com/pkgs/main",
    "https://conda.anaconda.org/conda-forge",
)
# What every install sees of a channel, whenever it runs: the builds published before this.
PUBLISHED_BEFORE = datetime.datetime(2025, 7, 1, tzinfo=datetime.UTC)
MARK = "swegreen-python.json"
# Interpreters the Verified recipes ask for (3.5: 2 rows, 3.6: 140, 3.7: 1, 3.8: 42,
# 3.9: 241, 3.10: 22, 3.11: 52).
VERIFIED_VERSIONS = ("3.5", "3.6", "3.7", "3.8", "3.9", "3.10", "3.11")
# The machine a cross-platform install targets (an image's): glibc of Debian bookworm.
TARGET_GLIBC = "2.36"


class CondaUnavailable(Exception):
    """No conda package could be had for a version; the message says why."""


def host_subdir() -> str:
    machine = platform.machine().lower()
    arch = {"x86_64": "64", "amd64": "64", "aarch64": "aarch64", "arm64": "aarch64"}.get(machine)
    if sys.platform != "linux" or arch is None:
        return f"{sys.platform}-{machine}"  # no interpreter of ours runs there; said on use
    return f"linux-{arch}"


@dataclass(frozen=True)
class CondaPythons:
    """Where conda interpreters live and where they come from."""

    root: Path
    channels: tuple[str, ...] = OFFICIAL_CHANNELS
    subdir: str = field(default_factory=host_subdir)
    published_before: datetime.datetime = PUBLISHED_BEFORE

    def prefix(self, version: str) -> Path:
        return self.root / self.subdir / version

    def installed(self, version: str) -> Path | None:
        """The ``pythonX.Y`` of a complete install of ``version``, if there is one."""
        prefix = self.prefix(version)
        exe = prefix / "bin" / f"python{version}"
        return exe if (prefix / MARK).is_file() and exe.is_file() else None

    def provenance(self, version: str) -> dict[str, object] | None:
        try:
            return json.loads((self.prefix(version) / MARK).read_text())
        except (OSError, ValueError):
            return None

    async def install(self, version: str, announce: Callable[[str], None] | None = None) -> Path:
        """Installs ``version`` (X.Y) unless a complete install is there; returns its
        ``pythonX.Y``. Two processes installing at once: one installs, the other waits
        for it and finds it. ``announce`` is told, by the one that installs, before it
        starts. Raises ``CondaUnavailable`` with the reason."""
        if (found := self.installed(version)) is not None:
            return found
        prefix = self.prefix(version)
        prefix.parent.mkdir(parents=True, exist_ok=True)
        with _locked(prefix.with_name(f".{version}.lock")):
            if (found := self.installed(version)) is not None:
                return found
            if announce is not None:
                announce(
                    f"Python {version} is not on this machine: installing it once from conda "
                    f"packages ({', '.join(self.channels)}) into {prefix}; every row that "
                    "needs it uses that install (--no-python-downloads: never install)"
                )
            shutil.rmtree(prefix, ignore_errors=True)  # an interrupted install
            started = time.monotonic()
            records, record, channel = await self._solve(version)
            await self._link(records, record, prefix)
            exe = prefix / "bin" / f"python{version}"
            if not exe.is_file():
                raise CondaUnavailable(
                    f"{record.file_name} from {channel} has no bin/python{version}"
                )
            mark = {
                "python": version,
                "version": str(record.version),
                "source": "conda",
                "channel": channel,
                "package": record.file_name,
                "url": record.url,
                "sha256": _hex(record.sha256),
                "subdir": self.subdir,
                "published_before": self.published_before.date().isoformat(),
                "installed_at": datetime.datetime.now(datetime.UTC).isoformat(),
                "seconds": round(time.monotonic() - started, 1),
                "bytes": _size(prefix),
            }
            tmp = prefix / f".{MARK}.tmp"
            tmp.write_text(json.dumps(mark, indent=1))
            os.replace(tmp, prefix / MARK)
            return exe

    async def _solve(self, version: str) -> tuple[list[Any], Any, str]:
        """The packages to link (python and what it needs), python's record, its channel."""
        import rattler
        from rattler.exceptions import SolverError

        gateway = rattler.Gateway(cache_dir=self.root / "repodata")
        unreachable: list[str] = []
        lacking: list[str] = []
        for channel in self.channels:
            try:
                records = await rattler.solve(
                    sources=[channel],
                    specs=[f"python {version}.*"],
                    gateway=gateway,
                    platforms=[self.subdir, "noarch"],
                    virtual_packages=self._virtual_packages(),
                    exclude_newer=self.published_before,
                    timestamp_policy="allow-missing",
                )
            except SolverError:
                lacking.append(channel)  # no such build there: the next channel
                continue
            except Exception as exc:  # the channel's index could not be read
                unreachable.append(f"{channel}: {_first_line(exc)}")
                continue
            python = next(r for r in records if r.name.normalized == "python")
            return records, python, channel
        why = [f"{', '.join(lacking)} has no Python {version} for {self.subdir}"] if lacking else []
        if unreachable:
            why.append("unreachable: " + "; ".join(unreachable))
        raise CondaUnavailable(f"no conda package of Python {version}: {'; '.join(why)}")

    async def _link(self, records: list[Any], record: Any, prefix: Path) -> None:
        import rattler

        try:
            await rattler.install(
                records,
                target_prefix=prefix,
                cache_dir=self.root / "pkgs",
                platform=rattler.Subdir(self.subdir),
                execute_link_scripts=False,
                show_progress=False,
            )
        except Exception as exc:
            shutil.rmtree(prefix, ignore_errors=True)
            raise CondaUnavailable(f"installing {record.file_name}: {_first_line(exc)}") from exc

    def _virtual_packages(self) -> list[Any]:
        import rattler

        if self.subdir == host_subdir():
            return list(rattler.VirtualPackage.detect())
        return [
            rattler.GenericVirtualPackage(
                rattler.PackageName(name), rattler.Version(version), rattler.BuildString("0")
            )
            for name, version in (("__unix", "0"), ("__linux", "5.10"), ("__glibc", TARGET_GLIBC))
        ]


def _hex(digest: object) -> str:
    return digest.hex() if isinstance(digest, bytes) else str(digest)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())[:400]


def _size(root: Path) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*") if not p.is_dir())


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """A blocking lock: installs run in a worker thread or a build step, never on an event
    loop that other work shares."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def main(argv: Sequence[str] | None = None) -> int:
    """``install [--dir D] [--subdir S] [--channels A,B] [VERSION ...]``: what an image's
    build stage runs with this file alone."""
    parser = argparse.ArgumentParser(prog="conda_pythons.py")
    sub = parser.add_subparsers(dest="command", required=True)
    inst = sub.add_parser("install")
    inst.add_argument("--dir", type=Path, required=True)
    inst.add_argument("--subdir", default=host_subdir())
    inst.add_argument("--channels", default=",".join(OFFICIAL_CHANNELS))
    inst.add_argument("versions", nargs="*", default=list(VERIFIED_VERSIONS))
    args = parser.parse_args(argv)
    pythons = CondaPythons(
        args.dir,
        tuple(c.strip() for c in args.channels.split(",") if c.strip()),
        args.subdir,
    )
    for version in args.versions:
        try:
            asyncio.run(pythons.install(version))
        except CondaUnavailable as exc:
            print(f"conda_pythons: {exc}", file=sys.stderr)
            return 1
        mark = pythons.provenance(version) or {}
        print(
            f"conda_pythons: Python {mark.get('version')} ({mark.get('package')}, "
            f"sha256 {str(mark.get('sha256'))[:12]}...) from {mark.get('channel')}: "
            f"{int(mark.get('bytes', 0)) / 1e6:.0f} MB in {mark.get('seconds')} s"
        )
    return 0


if __name__ == "__main__":
    code = main()
    # py-rattler's native threads can crash the interpreter's teardown (SIGSEGV in about 1
    # of 15 exits after a failed solve, here): the answer is printed, the exit is plain
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
