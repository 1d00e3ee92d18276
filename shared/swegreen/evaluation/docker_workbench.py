"""Interactive mode on the Docker backend: a participant's commands run in a second
container of the row's instance image (never the one that grades it), with the same
limits, no network, and the repository's history cut to its base commit.

The history is cut as the engine's workbench cuts it (workbench.detach_history): the
images' ``/testbed`` keeps every object of the clone it was made from, the fix's commit
among them, so ``.git`` is replaced by a shallow copy of ``HEAD`` alone and what is there
but untracked is excluded. The checkout is then given to the image's user without
privileges (``nonroot`` in the official images), and the participant's commands run as
that user, with no capability, one at a time through ``exec``, in the image's ``testbed``
environment (read-only to them: ``pip install`` falls back to their HOME), under
``timeout`` inside the container (a command past its limit ends; the workbench lives on),
their output capped on the way out. Only the container's root, which runs nothing of the
participant's, keeps the capabilities that set the workbench up and put it back.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
from collections.abc import AsyncIterator
from pathlib import Path

from swegreen.containers.container import RowContainer
from swegreen.core.dataset import Instance
from swegreen.core.errors import EnvSetupFailed, SandboxCrashed
from swegreen.core.ports import CommandRun
from swegreen.evaluation.docker_backend import DockerEvaluator
from swegreen.evaluation.workbench import BYPRODUCTS, CAPTURE_CAP

ACTIVATE = "source /opt/miniconda3/bin/activate && conda activate testbed"
WORKDIR = Path("/testbed")
GRACE = 30.0  # past the command's own limit, the exec itself is given up (container stopped)
DETACH = r"""
set -euo pipefail
cd /testbed
head=$(git rev-parse HEAD)
git ls-files --others --exclude-standard -z > /tmp/.swegreen-untracked
rm -rf /tmp/.swegreen-git
git init --quiet --bare /tmp/.swegreen-git
git -C /tmp/.swegreen-git fetch --quiet --depth=1 "file:///testbed" "$head"
rm -rf .git
mv /tmp/.swegreen-git .git
git config core.bare false
echo "$head" > .git/HEAD
git reset --quiet
{
  echo "# what running the code leaves behind"
  printf '%s\n' {byproducts}
  echo "# present before the participant's first command"
  tr '\0' '\n' < /tmp/.swegreen-untracked | sed 's|^|/|'
} >> .git/info/exclude
rm -f /tmp/.swegreen-untracked
"""
# timeout(1) leads a process group of its own: what the command left running in the
# background is killed when it ends (it would hold the output pipe open).
STEP = """\
{activate} >/dev/null 2>&1 || true
cd /testbed
step() {{
  timeout -k 5 {seconds} bash {command} </dev/null 2>&1 &
  local pid=$!
  wait "$pid"
  local code=$?
  kill -KILL -- "-$pid" 2>/dev/null
  return "$code"
}}
step | head -c {cap}
exit "${{PIPESTATUS[0]}}"
"""


# The checkout given to the images' own user without privileges (the official images
# add ``nonroot``; uid 1000 where an image has none), with a HOME of its own; its uid and
# gid and that HOME are printed. Needs CAP_CHOWN, which only the container's root keeps.
HAND_OVER = r"""
set -euo pipefail
uid=$(id -u nonroot 2>/dev/null || echo 1000)
gid=$(id -g nonroot 2>/dev/null || echo 1000)
home=$(getent passwd nonroot 2>/dev/null | cut -d: -f6 || true)
if [ -z "$home" ] || [ "$home" = / ]; then home=/tmp/.swegreen-home; fi
mkdir -p "$home"
chown -R "$uid:$gid" /testbed "$home"
echo "$uid:$gid $home"
"""
# what the container's root keeps: giving the checkout away (CHOWN), and copying and
# putting it back whatever modes the participant set (DAC_OVERRIDE, FOWNER); a command
# of the participant's runs as the other user, with none
ROOT_CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER")


class DockerWorkbench:
    def __init__(
        self, box: RowContainer, python_version: str, user: str = "", home: str = ""
    ) -> None:
        self.box = box
        self._python = python_version
        self._steps = 0
        self.user = user  # "uid:gid" the commands run as; "" where the image's root
        self._env = {"HOME": home} if home else None

    @property
    def workdir(self) -> Path:
        return WORKDIR

    @property
    def python_version(self) -> str:
        return self._python

    async def run(self, command: str, timeout: float) -> CommandRun:
        self._steps += 1
        path = f"/tmp/.swegreen-command-{self._steps}.sh"
        await asyncio.to_thread(self.box.put_file, path, command.encode("utf-8", "surrogateescape"))
        step = STEP.format(activate=ACTIVATE, seconds=f"{timeout:g}", command=path, cap=CAPTURE_CAP)
        ran = await asyncio.to_thread(self.box.shell, step, timeout + GRACE, self._env, self.user)
        await asyncio.to_thread(self.box.exec, ["rm", "-f", path], GRACE)
        if ran.exit_code is None:
            raise SandboxCrashed(
                "a workbench command outlived its time limit; its container was stopped"
            )
        code = None if ran.exit_code == 124 else ran.exit_code  # timeout(1): past its limit
        return CommandRun(code, ran.output, ran.seconds)

    async def run_discarded(self, command: str, timeout: float) -> CommandRun:
        """``run``, then the repository as it was: a copy made before is put back."""
        keep = f"/tmp/.swegreen-keep-{self._steps + 1}"
        await self._shell(f"rm -rf {keep} && cp -a /testbed {keep}")
        try:
            return await self.run(command, timeout)
        finally:
            await self._shell(f"cd / && rm -rf /testbed && mv {keep} /testbed")

    async def _shell(self, script: str) -> None:
        done = await asyncio.to_thread(self.box.shell, script, 600.0)
        if not done.ok:
            raise SandboxCrashed(f"the workbench could not be restored: {done.output[-500:]}")


class DockerWorkbenches:
    """Workbenches in containers of the rows' instance images (the Docker backend's)."""

    @staticmethod
    async def _hand_over(box: RowContainer) -> tuple[str, str]:
        """The checkout given to a user without privileges: ("uid:gid", its HOME), or
        ("", "") where the image does not allow it (the commands then run as the image's
        root, every capability dropped, as the grading containers do)."""
        done = await asyncio.to_thread(box.shell, HAND_OVER, 600.0)
        fields = done.output.strip().splitlines()[-1].split() if done.ok else []
        if len(fields) != 2 or not re.fullmatch(r"\d+:\d+", fields[0]):
            return "", ""
        return fields[0], fields[1]

    def __init__(self, evaluator: DockerEvaluator) -> None:
        self.evaluator = evaluator

    @property
    def available(self) -> bool:
        return True  # a container sees nothing of the host

    @contextlib.asynccontextmanager
    async def open(self, scope: str, instance: Instance) -> AsyncIterator[DockerWorkbench]:
        ev = self.evaluator
        image = await ev.images.get(ev.image_for(instance))
        box = await ev.container(
            image.id, f"swegreen-bench-{instance.instance_id.lower()}", False,
            {"swegreen.workbench": f"{scope}/{instance.instance_id}"}, ROOT_CAPS,
        )  # fmt: skip
        try:
            script = DETACH.replace("{byproducts}", " ".join(shlex.quote(p) for p in BYPRODUCTS))
            detached = await asyncio.to_thread(box.shell, script, 600.0)
            if not detached.ok:
                raise EnvSetupFailed(
                    "could not prepare the participant's workspace: " + detached.output[-500:]
                )
            user, home = await self._hand_over(box)
            probe = await asyncio.to_thread(
                box.shell,
                f"{ACTIVATE} >/dev/null 2>&1; python -c "
                "'import sys; print(\"%d.%d\" % sys.version_info[:2])'",
                60.0,
                None,
                user,
            )
            version = probe.output.strip().splitlines()[-1] if probe.ok else ""
            yield DockerWorkbench(box, version, user, home)
        finally:
            await asyncio.to_thread(box.remove)
