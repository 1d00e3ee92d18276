"""Where this machine keeps things (``LocalSettings``) and the process environment, read
once at a composition root: apart from the engine, so that a command reads them without
importing the engine (seconds of imports; the green agent's card must answer first)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from swegreen.core.errors import ConfigError
from swegreen.environments.conda_pythons import OFFICIAL_CHANNELS


def default_cache_dir(env: Mapping[str, str]) -> Path:
    """~/.cache/swegreen; for root /var/cache/swegreen, which the sandbox's uid can reach
    (root's home is closed to others)."""
    if os.geteuid() == 0 and not env.get("XDG_CACHE_HOME"):
        return Path("/var/cache/swegreen")
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", str(Path.home()))) / ".cache")
    return Path(base) / "swegreen"


class LocalSettings(BaseModel):
    """Where this machine keeps things; not part of an assessment's config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    output_dir: Path = Field(
        Path("results"), description="Results, artifacts and the SQLite store."
    )
    cache_dir: Path = Field(description="Repository, environment and sample caches.")
    keep_workspaces: bool = False
    python_downloads: bool = Field(
        True,
        description="Install an interpreter a recipe asks for and this machine lacks from "
        "conda packages, once (conda_pythons.py); off: --no-python-downloads, "
        "SWEGREEN_PYTHON_DOWNLOADS=0.",
    )
    python_channels: tuple[str, ...] = Field(
        OFFICIAL_CHANNELS,
        min_length=1,
        description="The conda channels interpreters come from, first match wins "
        "(SWEGREEN_PYTHON_CHANNELS, comma-separated); default: SWE-bench's images' own.",
    )
    pythons_dir: Path | None = Field(
        None,
        description="Where conda interpreters are installed (SWEGREEN_PYTHONS_DIR; an "
        "image's are in /opt/swegreen/pythons); default: <cache_dir>/pythons.",
    )
    rebuild_envs: bool = Field(
        False, description="Build again environments whose earlier build failed (remembered)."
    )
    memory_mb: int | None = Field(
        16384,
        gt=0,
        description="Memory of one sandbox (where a memory cgroup is writable) and address "
        "space of each of its processes, in MB.",
    )
    max_processes: int | None = Field(4096, gt=0, description="Process limit of a test run.")
    disk_mb: int | None = Field(
        10240, gt=0, description="MB one sandboxed run may add to its workspace and temp dirs."
    )
    pythons: dict[str, Path] = Field(
        default_factory=dict,
        description="Interpreters to use for recipe versions this machine has no standard "
        'install of: {"3.5": "/opt/python3.5/bin/python3.5"} (--python, SWEGREEN_PYTHONS).',
    )
    offline_sources: Path | None = Field(
        None,
        description="Source archives that builds download while they run (build_sources.py), "
        "used when their sha256 is upstream's; default: <cache_dir>/sources.",
    )
    copy_on_write: bool = Field(
        True,
        description="Mount each evaluation's checkout copy-on-write over the prepared one "
        "where the engine may (root; overlay.py); off: copy it.",
    )
    content_keyed_envs: bool = Field(
        True,
        description="Key an environment whose recipe reads only requirements files by their "
        "text, so that commits with the same requirements share one build (index: "
        "<cache_dir>/envs/index.jsonl); off: by the commit they are read at (the AWS "
        "pipeline, which plans its builds before any clone).",
    )
    disk_reserve_gb: float = Field(
        5.0,
        ge=0,
        description="Free disk (GiB; at most a tenth of the filesystem) a new environment or "
        "prepared workspace must leave on the cache's disk; below it the row ends "
        "error/disk_full, saying how to make room (`swegreen cache prune`), instead of "
        "filling the disk. 0: no check.",
    )
    dataset_snapshots: Path | None = Field(
        None,
        description="A folder of hub datasets kept as files with an index.json (the "
        "green-docker image's: SWEGREEN_DATASET_SNAPSHOTS); a hub id found there is read "
        "from it, not fetched (core/dataset.py).",
    )
    compile_cache: bool = Field(
        True,
        description="Compile an instance's extensions once, where the host has ccache "
        "(compile_cache.py); off: every evaluation's install compiles them again.",
    )

    @property
    def conda_pythons_dir(self) -> Path:
        return self.pythons_dir or self.cache_dir / "pythons"

    @property
    def store_path(self) -> Path:
        return self.output_dir / "swegreen.sqlite"

    @property
    def parsed_datasets(self) -> Path:
        """Local dataset files' validated rows, kept by their bytes' hash (core/dataset.py)."""
        return self.cache_dir / "datasets"


def interpreter_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """LocalSettings' interpreter fields the environment sets: SWEGREEN_PYTHON_DOWNLOADS,
    SWEGREEN_PYTHON_CHANNELS (comma-separated) and SWEGREEN_PYTHONS_DIR (an image sets
    them where its interpreters are)."""
    out: dict[str, Any] = {}
    raw = env.get("SWEGREEN_PYTHON_DOWNLOADS", "").strip().lower()
    if raw:
        if raw not in ("0", "1", "false", "true", "no", "yes", "off", "on"):
            raise ConfigError(
                f"SWEGREEN_PYTHON_DOWNLOADS={raw!r}: give 0 (rows whose Python this machine "
                "lacks fail) or 1 (it is installed once from conda packages, the default)"
            )
        out["python_downloads"] = raw in ("1", "true", "yes", "on")
    channels = tuple(c.strip() for c in env.get("SWEGREEN_PYTHON_CHANNELS", "").split(","))
    if any(channels):
        out["python_channels"] = tuple(c for c in channels if c)
    if raw_dir := env.get("SWEGREEN_PYTHONS_DIR", "").strip():
        out["pythons_dir"] = Path(raw_dir).expanduser()
    return out


def host_environment() -> dict[str, str]:
    """The process environment, read once at a composition root."""
    return dict(os.environ)
