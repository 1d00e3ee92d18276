"""Compiled extensions built once per instance: an evaluation's install reuses the objects
its prepared workspace compiled, through ccache.

Upstream's eval script installs the project again (``pip install -e .[test]``). Where
that install builds in an isolated PEP 517 environment with a PEP 660 editable build
(astropy 4.x/5.x), every extension is compiled again in fresh temporary directories:
minutes per evaluation against a test command of seconds. ccache hands back the object
the compiler produced for the same preprocessed source, flags and compiler, so the
install's result is the same; what defeats it is pip's random build-environment
directory (its numpy headers appear on the command line and in the preprocessor's line
markers). The compiler shim below shows that directory to the compiler through a link at
a fixed place in the workspace (``LINK_NAME`` beside ``repo``), and ccache's base_dir
turns workspace paths into relative ones, so a prepared workspace's compile and an
evaluation's copy of it name the same files the same way.

Trust: the cache is written only while a prepared workspace is built (the repository's
own code at the base commit, as trusted as the environment build), and evaluations read
it read-only (the sandbox mounts it so, and CCACHE_READONLY): a participant's build cannot
change what a later evaluation gets. Without ccache on the host only the time differs.
"""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Names Python's build configuration and common build tools call compilers by.
COMPILERS = ("gcc", "g++", "cc", "c++")
SHIM_DIR = ".swegreen-cc"  # beside ``repo`` in a workspace: the shims
LINK_NAME = ".swegreen-build-env"  # beside ``repo``: pip's build environment, seen stably
CACHE_DIR = "ccache"  # in a prepared workspace

_SHIM = """#!/bin/bash
# swegreen's compiler shim (compile_cache.py): pip's build environment through a stable
# link, then ccache with the real compiler.
args=()
for a in "$@"; do
  if [[ -n ${{SWEGREEN_CC_LINK:-}} && -n ${{TMPDIR:-}} \\
        && $a =~ ^(.*)("$TMPDIR"/pip-build-env-[^/]+)(.*)$ ]]; then
    dir=${{BASH_REMATCH[2]}}
    if [[ $(readlink "$SWEGREEN_CC_LINK") != "$dir" ]]; then
      ln -s "$dir" "$SWEGREEN_CC_LINK.$$" && mv -T "$SWEGREEN_CC_LINK.$$" "$SWEGREEN_CC_LINK"
    fi
    a=${{BASH_REMATCH[1]}}$SWEGREEN_CC_LINK${{BASH_REMATCH[3]}}
  fi
  args+=("$a")
done
exec {ccache} {compiler} "${{args[@]}}"
"""


@dataclass(frozen=True)
class CompileCache:
    """ccache and the host's compilers, found once at the composition root."""

    ccache: str
    compilers: Mapping[str, str]  # shim name -> the real compiler

    @classmethod
    def find(cls, host_env: Mapping[str, str]) -> CompileCache | None:
        """None where the host has no ccache or no C compiler (then nothing is cached)."""
        path = host_env.get("PATH")
        ccache = shutil.which("ccache", path=path)
        compilers = {name: shutil.which(name, path=path) for name in COMPILERS}
        found = {name: real for name, real in compilers.items() if real}
        if not ccache or not found:
            return None
        return cls(ccache, found)

    def environment(
        self, workspace: Path, cache: Path, tmpdir: Path, *, writable: bool
    ) -> tuple[Path, dict[str, str]]:
        """Write the shims into ``workspace`` and return their directory (to put first on
        PATH) and the variables that point ccache at ``cache``. ``writable`` only where the
        prepared workspace is built; evaluations read."""
        shims = workspace / SHIM_DIR
        shims.mkdir(exist_ok=True)
        for name, real in self.compilers.items():
            shim = shims / name
            shim.write_text(
                _SHIM.format(ccache=shlex.quote(self.ccache), compiler=shlex.quote(real))
            )
            shim.chmod(0o755)
        env = {
            "CCACHE_DIR": str(cache),
            "CCACHE_BASEDIR": str(workspace),
            "CCACHE_NOHASHDIR": "1",  # -g puts the directory in the hash otherwise
            "CCACHE_TEMPDIR": str(tmpdir),
            "CCACHE_NOSTATS": "1",
            "SWEGREEN_CC_LINK": str(workspace / LINK_NAME),
        }
        if not writable:
            env["CCACHE_READONLY"] = "1"
        return shims, env
