"""Applying a patch with the official harness's fallback chain.

The commands are swebench's own ``GIT_APPLY_CMDS`` (git apply, --3way, --reject, then
GNU patch with fuzz), tried in order from a clean tree; when all fail, a patch that
``git apply --check --reverse`` accepts is already applied. This is what decides
"Patch applied?" in the decision tree, so it must not be stricter or looser than upstream.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from swegreen.core.upstream import GIT_APPLY_CMDS
from swegreen.processes.procs import run_process

APPLY_TIMEOUT = 300.0


@dataclass(frozen=True)
class ApplyResult:
    applied: bool
    method: str | None
    log: str


async def apply_patch(repo: Path, patch_file: Path, env: Mapping[str, str]) -> ApplyResult:
    log: list[str] = []
    for attempt, command in enumerate(GIT_APPLY_CMDS):
        if attempt:
            # A failed attempt (--reject above all) leaves partial state: start clean.
            await _reset(repo, env)
        argv = [*shlex.split(command), str(patch_file)]
        result = await run_process(argv, cwd=repo, env=env, timeout=APPLY_TIMEOUT)
        log.append(f"$ {command} {patch_file.name}  -> exit {result.returncode}\n{result.output}")
        if result.ok:
            return ApplyResult(True, command, "\n".join(log))
    reverse = await run_process(
        ["git", "apply", "--check", "--reverse", str(patch_file)],
        cwd=repo,
        env=env,
        timeout=APPLY_TIMEOUT,
    )
    log.append(f"$ git apply --check --reverse -> exit {reverse.returncode}\n{reverse.output}")
    if reverse.ok:
        return ApplyResult(True, "already applied", "\n".join(log))
    await _reset(repo, env)
    return ApplyResult(False, None, "\n".join(log))


async def _reset(repo: Path, env: Mapping[str, str]) -> None:
    await run_process(["git", "checkout", "--", "."], cwd=repo, env=env, timeout=APPLY_TIMEOUT)
    await run_process(["git", "clean", "-fd"], cwd=repo, env=env, timeout=APPLY_TIMEOUT)
