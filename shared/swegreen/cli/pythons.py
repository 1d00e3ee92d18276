"""`swegreen pythons`: which interpreter each Verified version gets here and where it comes
from; `pythons install` gets conda packages of them ahead of a run (or on an image)."""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING

from swegreen.core.errors import ConfigError, InterpreterNotFound
from swegreen.environments.conda_pythons import VERIFIED_VERSIONS, CondaPythons, CondaUnavailable
from swegreen.environments.interpreters import VERSION

if TYPE_CHECKING:
    from rich.console import Console

    from swegreen.evaluation.settings import LocalSettings


def pythons_command(
    args: argparse.Namespace, settings: LocalSettings, env: dict[str, str], console: Console
) -> int:
    from swegreen.cli.common import said
    from swegreen.environments.interpreters import InterpreterSearch, find_interpreter

    conda = CondaPythons(settings.conda_pythons_dir, settings.python_channels)
    versions = tuple(args.versions) or VERIFIED_VERSIONS
    if args.action == "install":
        bad = [v for v in versions if not VERSION.match(v)]
        if bad:
            raise ConfigError(f"not a Python version: {', '.join(bad)} (give X.Y, e.g. 3.6)")
        failed = 0
        for version in versions:
            already = conda.installed(version) is not None
            if not already:
                console.print(f"Python {version}: installing from {', '.join(conda.channels)}")
            try:
                asyncio.run(conda.install(version))
            except CondaUnavailable as exc:
                console.print(said("error:", "red", f"Python {version}: {exc}"))
                failed += 1
                continue
            mark = conda.provenance(version) or {}
            took = "already there" if already else f"{mark.get('seconds')} s"
            console.print(
                f"Python {mark.get('version')}: {conda.prefix(version)} ({took}; "
                f"{mark.get('package')} from {mark.get('channel')}, sha256 {mark.get('sha256')})",
                markup=False,
            )
        return 2 if failed else 0
    search = InterpreterSearch.from_environ(env, given=settings.pythons, conda=conda)
    console.print(f"conda interpreters: {conda.root}", markup=False)
    for version in versions:
        try:
            found = find_interpreter(version, search)
        except InterpreterNotFound:
            how = "installed on first use" if settings.python_downloads else "missing"
            console.print(f"  {version:<5} {how} (`swegreen pythons install {version}`)")
            continue
        source = search.source_of(found, version)
        origin = source.get("channel") or source.get("source") or "given by you"
        console.print(f"  {version:<5} {found}  [{origin}]", markup=False)
    return 0
