"""Files a build downloads while it runs, served from a local directory instead.

Some recipes fetch source archives during the repository's setup: matplotlib's
pre_install runs ``wget`` for qhull, and its ``setupext.py`` fetches qhull and FreeType
(checking upstream's own sha256). Without the internet those builds fail, and a
different version would silently change what the tests compare against. An offline
sources directory holds such files under their own names; a file is used only when its
sha256 is the one upstream downloads (``data/build_downloads.json``), never another
version. During the setup, a ``wget`` on PATH serves known URLs from the directory (and
anything else from the network, as before), and matplotlib's own download cache
(``~/.cache/matplotlib/<sha256>``) is filled with the files present. What was offered is
recorded in the row's ``environment`` provenance; a setup that still lacks a known file
fails with a reason that names it, its hash and the directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import ssl
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

SHIM_LOG = "served.jsonl"  # in the shim directory: one line per file served
MAX_DOWNLOAD_BYTES = 200 << 20  # a source archive; more is not the file asked for
TABLE = "downloads.json"  # in the shim directory: the downloads it knows


@dataclass(frozen=True)
class Download:
    file: str
    sha256: str
    urls: tuple[str, ...]
    matplotlib_cache: bool = False
    where_else: str = ""
    # byte-identical copies elsewhere (same sha256): tried after ``urls`` (Debian's pool
    # keeps qhull's tarball, and a machine that reaches only Debian's mirror reaches it)
    mirrors: tuple[str, ...] = ()
    # rows whose build asks for it without their recipe naming its URL: (repo, versions)
    needed_by: tuple[tuple[str, str], ...] = ()


def known_downloads(table: str | None = None) -> tuple[Download, ...]:
    """The downloads of ``data/build_downloads.json`` (or of a table a shim was given)."""
    if table is None:
        table = (resources.files("swegreen") / "data" / "build_downloads.json").read_text()
    data = json.loads(table)
    return tuple(
        Download(
            file=d["file"],
            sha256=d["sha256"],
            urls=tuple(d["urls"]),
            matplotlib_cache=d.get("matplotlib_cache", False),
            where_else=d.get("where_else", ""),
            mirrors=tuple(d.get("mirrors", ())),
            needed_by=tuple((n["repo"], n["versions"]) for n in d.get("needed_by", [])),
        )
        for d in data["downloads"]
    )


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class Staged:
    """One setup run's offline sources: its environment, and how to tell what it took."""

    env: dict[str, str]
    shim_dir: Path
    cached: dict[str, tuple[Download, Path]]
    known: dict[str, Download]

    def used(self) -> list[dict[str, str]]:
        """What the build really took (the row's provenance): files served to ``wget``,
        and copies in matplotlib's cache that were read."""
        used: dict[str, dict[str, str]] = {}
        log = self.shim_dir / SHIM_LOG
        if log.exists():
            for line in log.read_text().splitlines():
                d = self.known[json.loads(line)["file"]]
                used[d.file] = {"file": d.file, "sha256": d.sha256, "via": "wget"}
        for name, (d, copy) in self.cached.items():
            if name not in used and copy.exists() and copy.stat().st_atime > 0:
                used[name] = {"file": d.file, "sha256": d.sha256, "via": "matplotlib's cache"}
        return list(used.values())


class OfflineSources:
    """A directory of source archives (possibly empty or absent) and what they stand for."""

    def __init__(self, directory: Path | None, downloads: tuple[Download, ...] | None = None):
        self.directory = directory
        self.downloads = known_downloads() if downloads is None else downloads
        self._checked: dict[str, bool] = {}

    def available(self, download: Download) -> Path | None:
        """The file, when the directory has it with upstream's hash."""
        if self.directory is None:
            return None
        path = self.directory / download.file
        if not path.is_file():
            return None
        key = f"{path}:{path.stat().st_mtime_ns}:{path.stat().st_size}"
        if key not in self._checked:
            self._checked[key] = sha256_of(path) == download.sha256
        return path if self._checked[key] else None

    def stage(self, home: Path, shim_dir: Path) -> Staged:
        """Prepare a setup run: a ``wget`` that knows the directory (``Staged.env``: put
        ``shim_dir`` first on PATH) and matplotlib's download cache in ``home``."""
        shim_dir.mkdir(parents=True, exist_ok=True)
        cached: dict[str, tuple[Download, Path]] = {}
        for download in self.downloads:
            path = self.available(download)
            if path is None or not download.matplotlib_cache:
                continue
            cache = home / ".cache" / "matplotlib"
            cache.mkdir(parents=True, exist_ok=True)
            copy = cache / download.sha256
            shutil.copyfile(path, copy)
            # access time before its change time: the first read sets it (relatime)
            os.utime(copy, (0, copy.stat().st_mtime))
            cached[download.file] = (download, copy)
        (shim_dir / TABLE).write_text(
            json.dumps({"downloads": [_table_entry(d) for d in self.downloads]})
        )
        wget = shim_dir / "wget"
        wget.write_text(
            f"#!/bin/sh\nexec {sys.executable} -I -m swegreen.environments.build_sources"
            ' wget "$@"\n'
        )
        wget.chmod(0o755)
        env = {
            "SWEGREEN_OFFLINE_SOURCES": str(self.directory or ""),
            "SWEGREEN_SOURCES_SHIM": str(shim_dir),
        }
        return Staged(env, shim_dir, cached, {d.file: d for d in self.downloads})

    def missing_in(self, output: str) -> list[Download]:
        """Known downloads a failed setup's output asked for that the directory lacks."""
        return [
            d
            for d in self.downloads
            if self.available(d) is None and any(url in output for url in d.urls)
        ]

    def needed_for(self, repo: str, version: str, steps: Sequence[str] = ()) -> list[Download]:
        """Every known download a row's build asks for: named by its recipe's ``steps``
        (a URL in them), or by the table's ``needed_by`` for its repository and version."""
        text = "\n".join(steps)
        return [
            d
            for d in self.downloads
            if any(url in text for url in d.urls)
            or any(r == repo and _version_in(version, spec) for r, spec in d.needed_by)
        ]

    def still_missing(
        self, output: str, repo: str, version: str, steps: Sequence[str] = ()
    ) -> list[Download]:
        """After a failed build: the known files it asked for that are missing, and every
        other missing file that row needs, so that one error names them all."""
        asked = self.missing_in(output)
        if not asked:
            return []
        also = [d for d in self.needed_for(repo, version, steps) if self.available(d) is None]
        return [d for d in self.downloads if d in asked or d in also]

    def fetch_missing(
        self, needed: Sequence[Download], env: Mapping[str, str] | None = None
    ) -> list[Download]:
        """Before a row spends anything on its build: each file it will ask for that the
        directory lacks, fetched into the directory from its URLs, then from the copies
        known to be byte-identical (``mirrors``), each checked against upstream's sha256.
        Returns those that could not be had (the row then fails at once, naming them)."""
        if self.directory is None:
            return [d for d in needed if self.available(d) is None]
        missing = []
        for download in needed:
            if self.available(download) is None and not self._fetch(download, env):
                missing.append(download)
        return missing

    def _fetch(self, download: Download, env: Mapping[str, str] | None) -> bool:
        import httpx

        assert self.directory is not None
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.directory / download.file
        partial = target.with_name(f".{download.file}.{os.getpid()}.part")
        cafile = (env or os.environ).get("SSL_CERT_FILE")  # a proxy's CA, as pip's
        verify: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=cafile) if cafile else True
        )
        for url in (*download.urls, *download.mirrors):
            try:
                with (
                    httpx.stream(
                        "GET",
                        url,
                        follow_redirects=True,
                        timeout=httpx.Timeout(30.0, connect=10.0),
                        verify=verify,
                    ) as answer,
                    partial.open("wb") as out,
                ):
                    if answer.status_code != 200:
                        continue
                    digest, size = hashlib.sha256(), 0
                    for block in answer.iter_bytes(1 << 20):
                        size += len(block)
                        if size > MAX_DOWNLOAD_BYTES:
                            break
                        digest.update(block)
                        out.write(block)
                if size <= MAX_DOWNLOAD_BYTES and digest.hexdigest() == download.sha256:
                    os.replace(partial, target)
                    return True
            except (httpx.HTTPError, OSError):
                continue
            finally:
                partial.unlink(missing_ok=True)
        return False

    def advice(self, missing: list[Download]) -> str:
        """What to fetch and where to put it; the directory is made, ready for them."""
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            where = str(self.directory.resolve())
        else:
            where = "an offline sources directory (--offline-sources DIR)"
        parts = [
            f"{d.file} (sha256 {d.sha256}; from {' or '.join(d.urls)}"
            + (f"; also: {d.where_else}" if d.where_else else "")
            + ")"
            for d in missing
        ]
        return (
            f"the build needs {len(missing)} file(s) this machine could not fetch: "
            f"{'; '.join(parts)}. Put them, under exactly these names, in {where} and run "
            "the row again (docs/environments.md)"
        )


def _wget(argv: list[str]) -> int:
    """``wget [-O FILE] [-q...] URL``: a known URL from the offline directory (hash
    checked), anything else from the real wget."""
    shim = os.environ.get("SWEGREEN_SOURCES_SHIM", "")
    directory = os.environ.get("SWEGREEN_OFFLINE_SOURCES", "")
    urls = [a for a in argv if "://" in a]
    output = None
    for i, arg in enumerate(argv):
        if arg == "-O" and i + 1 < len(argv):
            output = argv[i + 1]
        elif arg.startswith("--output-document="):
            output = arg.split("=", 1)[1]
    table = Path(shim) / TABLE if shim else None
    downloads = known_downloads(table.read_text()) if table and table.is_file() else None
    sources = OfflineSources(Path(directory) if directory else None, downloads)
    if len(urls) == 1:
        for download in sources.downloads:
            if urls[0] in download.urls and (path := sources.available(download)):
                target = Path(output or download.file)
                if str(target) == "-":
                    sys.stdout.buffer.write(path.read_bytes())
                else:
                    shutil.copyfile(path, target)
                if shim:
                    with open(Path(shim) / SHIM_LOG, "a") as fh:
                        fh.write(json.dumps({"file": download.file, "url": urls[0]}) + "\n")
                print(f"swegreen: {urls[0]} served from {path} (sha256 {download.sha256})")
                return 0
    path_dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and d != shim]
    real = shutil.which("wget", path=os.pathsep.join(path_dirs))
    if real is None:
        print("swegreen: wget is not installed, and no offline source has", urls, file=sys.stderr)
        return 127
    return subprocess.run([real, *argv], check=False).returncode


def _table_entry(d: Download) -> dict[str, object]:
    """``d`` as build_downloads.json writes it (what ``known_downloads`` reads back)."""
    entry = dataclasses.asdict(d)
    entry["needed_by"] = [{"repo": r, "versions": v} for r, v in d.needed_by]
    return entry


def _version_in(version: str, spec: str) -> bool:
    """Whether a dataset's version label (``3.5``) is in a specifier (``>=3.3``)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version) in SpecifierSet(spec)
    except (InvalidSpecifier, InvalidVersion):
        return False


if __name__ == "__main__":
    if sys.argv[1:2] == ["wget"]:
        sys.exit(_wget(sys.argv[2:]))
    sys.exit("usage: python -m swegreen.environments.build_sources wget ARGS")
