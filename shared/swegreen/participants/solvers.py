"""Deterministic solvers: gold (validates the whole chain), empty, and scripted fakes."""

from __future__ import annotations

import asyncio
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from swegreen.core.dataset import Dataset
from swegreen.core.sources import load_predictions
from swegreen.participants.server import Reply, Shell


class GoldSolver:
    """Answers with the dataset's own fix: every instance should resolve."""

    def __init__(self, dataset: Dataset) -> None:
        self.patches = {i.instance_id: i.patch for i in dataset.instances}

    async def __call__(self, data: dict[str, Any], text: str) -> Reply:
        patch = self.patches.get(str(data.get("instance_id")))
        if patch is None:
            return Reply(None, f"unknown instance {data.get('instance_id')!r}")
        return Reply(patch, "the gold patch", usage={"prompt_tokens": 0, "completion_tokens": 0})


class PredictionsSolver:
    """Answers with the patches of a SWE-bench predictions file: replays another system's
    predictions over A2A (and lets tests stand up an adversarial participant)."""

    def __init__(self, path: Path) -> None:
        self.predictions = load_predictions(path)

    async def __call__(self, data: dict[str, Any], text: str) -> Reply:
        pred = self.predictions.get(str(data.get("instance_id")))
        if pred is None:
            return Reply(None, f"no prediction for {data.get('instance_id')!r}")
        return Reply(pred.model_patch, f"the prediction of {pred.model_name_or_path}")


async def empty_solver(data: dict[str, Any], text: str) -> Reply:
    """Answers with no change at all: every instance should be no_op."""
    return Reply("", "no change")


class ScriptedSolver:
    """Misbehaviours on demand, for tests: ``hang`` never answers, ``prose`` answers without a
    diff, ``fenced`` wraps the gold patch in a ```diff block inside prose, ``slow`` answers
    with the gold patch after ``SLOW_SECONDS`` (a participant that must be waited for)."""

    MODES = ("hang", "prose", "fenced", "slow")
    SLOW_SECONDS = 5.0

    def __init__(self, mode: str, dataset: Dataset | None = None) -> None:
        if mode not in self.MODES:
            raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(self.MODES)}")
        self.mode = mode
        self.gold = GoldSolver(dataset) if dataset is not None else None

    async def __call__(self, data: dict[str, Any], text: str) -> Reply:
        if self.mode == "hang":
            await asyncio.Event().wait()  # until cancelled
        if self.mode == "prose":
            return Reply(None, "I looked into this issue carefully but could not find a fix.")
        assert self.gold is not None
        gold = await self.gold(data, text)
        if self.mode == "slow":
            await asyncio.sleep(self.SLOW_SECONDS)
            return gold
        return Reply(None, f"Here is my fix:\n\n```diff\n{gold.patch}```\n\nIt adds the check.")


class ScriptedShellSolver:
    """Interactive-mode participants for tests, each a fixed script of shell commands.

    ``explore`` looks around, reproduces the issue from the ``>>>`` lines of its
    statement, applies the gold patch in its copy, runs the reproduction again and submits
    what ``git diff`` shows there. ``greedy`` runs commands until its budget ends. ``snoop``
    looks for what it must not find (``SNOOP``'s commands, given the paths to try as the
    ``paths`` of its constructor) and submits nothing.
    """

    MODES = ("explore", "greedy", "snoop")
    interactive = True

    def __init__(
        self, mode: str, dataset: Dataset | None = None, paths: Sequence[str] = ()
    ) -> None:
        if mode not in self.MODES:
            raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(self.MODES)}")
        self.mode = mode
        self.gold = GoldSolver(dataset) if dataset is not None else None
        self.paths = list(paths)

    async def __call__(self, data: dict[str, Any], text: str, shell: Shell | None) -> Reply:
        if shell is None:
            return Reply(None, "no interactive mode was offered")
        if self.mode == "greedy":
            while True:
                await shell.run("echo another step")
        if self.mode == "snoop":
            said = []
            for command in snoop_commands(self.paths):
                said.append(f"$ {command}\n{(await shell.run(command))['output']}")
            return Reply(None, "\n".join(said))
        assert self.gold is not None
        gold = await self.gold(data, text)
        await shell.run("git status --short && ls")
        reproduce = reproduction(str(data.get("problem_statement", "")))
        if reproduce:
            await shell.run(reproduce)
        await shell.run(f"git apply --verbose - <<'{_EOF}'\n{gold.patch}{_EOF}\n")
        if reproduce:
            await shell.run(reproduce)
        diff = await shell.run("git add -A && git diff --cached")
        if diff["exit_code"] != 0 or diff.get("truncated"):
            return Reply(None, "could not read my diff back")
        return Reply(diff["output"], "fixed in the prepared workspace")


_EOF = "SWEGREEN_SCRIPTED_EOF"


def reproduction(statement: str) -> str | None:
    """A command that runs the ``>>>`` lines of an issue's example, if it has any."""
    lines = [m.group(1) for m in re.finditer(r"^>>> (.*)$", statement, re.M)]
    if not lines:
        return None
    return "python - <<'{eof}'\n{code}\n{eof}".format(eof=_EOF, code="\n".join(lines))


def snoop_commands(paths: Sequence[str]) -> list[str]:
    """What a participant would try to find the hidden tests or the graded workspace."""
    commands = [
        f"ls -la {shlex.quote(p)} 2>&1; cat {shlex.quote(p)} 2>&1 | head -c 300" for p in paths
    ]
    commands += [
        "git log --all --oneline | wc -l",
        "git rev-list --all | wc -l",
        "cat .git/objects/info/alternates 2>&1",
    ]
    return commands
