"""The Docker backend: each row evaluated in a fresh container of its instance image,
as the official harness does, with the engine's integrity steps that fit a container.

Per row: the image (pulled once, its digest recorded), a container with no network
(unless the row's tests need it), no capabilities, ``no-new-privileges``, a memory and
pids limit; the patch copied in and applied with the official fallback chain; the test
files and test configuration it changed put back; the eval script's install phase, the
same put-back for what the install wrote, then its test phase; the log read from the
exec's own output and graded by the official grader; the container removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import shlex
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import APIError
from swebench.harness.constants import CONTAINER_PATCH_FILE as DOCKER_PATCH

from swegreen.containers import install_changes
from swegreen.containers.container import (
    WORKDIR,
    ExecResult,
    Limits,
    RowContainer,
    make_pristine,
    read_files,
    remove_container,
)
from swegreen.containers.images import Images
from swegreen.core.dataset import Instance
from swegreen.core.errors import SandboxCrashed, TestTimeout, WorkspaceTampering
from swegreen.core.eval_script import (
    GIT_AS_COMMITTED,
    IMAGE_ACTIVATION,
    IMAGE_SYSTEM_PATH,
    declares_dependencies,
    eval_commands,
    image_eval_commands,
    image_eval_phases,
    reinstall_changes_nothing,
    runs_no_project_code,
    test_command_seconds,
)
from swegreen.core.grading import unapplied_report
from swegreen.core.images import image_name, image_template
from swegreen.core.patches import PatchInfo, PatchRejected, applied_parts, check_links
from swegreen.core.ports import ArtifactStore
from swegreen.core.recipes import Recipe, RecipeBook, tests_need_network
from swegreen.core.results import InstanceResult
from swegreen.core.rows import RowBuilder
from swegreen.core.scrub import NO_SCRUBBING, Scrub
from swegreen.core.upstream import GIT_APPLY_CMDS
from swegreen.evaluation.evaluate import Key, PatchEvaluator
from swegreen.sandbox.env_guard import command_words
from swegreen.sandbox.recorder import (
    CENSUS_VARIABLE,
    MARK_VARIABLE,
    Recorded,
    covers,
    hash_seed,
    new_key,
    new_mark,
    pytest_addopts,
    pytest_recorder,
    runner_kind,
    runner_recorder,
    split_marked,
)
from swegreen.sandbox.tamper import SECTIONED, protected_reason, sections_changed
from swegreen.stores import artifacts as art

EVAL_SCRIPT = "/eval.sh"
PREPARE_SCRIPT = "/eval_prepare.sh"
LEAN_PREPARE_SCRIPT = "/eval_prepare_lean.sh"  # without the reinstall that changes nothing
ENV_PREFIX = "/opt/miniconda3/envs/testbed"  # the official images' environment
LABEL = "swegreen.row"
SETUP_TIMEOUT = 300.0  # git and file checks before the tests
CENSUS_TIMEOUT = 600.0  # pytest's start-up on the base commit, no test collected
DROP_BYTECODE = (
    "find /testbed -path /testbed/.git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +"
)
# the backend's own git calls read no global or system configuration (programs it could
# name: core.fsmonitor, an alias); the checkout's own is judged after the install
OWN_GIT = {
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "PATH": IMAGE_SYSTEM_PATH,  # the system's git, never a launcher the install made
    **GIT_AS_COMMITTED,
}
BUILD_DIRS = frozenset({"build", ".tox", ".eggs"})
# each of the given paths that is a symlink, and where it leads, NUL-separated
RESOLVE_LINKS = (
    f'cd {WORKDIR} && for p; do if [ -L "$p" ]; then '
    'printf \'%s\\0%s\\0\' "$p" "$(realpath -m -- "$p")"; fi; done'
)
# the checkout's bytecode dropped, then what differs from HEAD, untracked files included
# (the checkout's own index is not read: the install can write it, and an entry marked
# assume-unchanged or skip-worktree, or with the stat data of a rewritten file, hides a
# changed test file from git status; a private index made from HEAD's tree knows only
# what HEAD holds, so every file is read for what it is)
_LIST_CHANGES = (
    f"{DROP_BYTECODE}; export {' '.join(f'{k}={v}' for k, v in OWN_GIT.items())}; "
    "GIT_INDEX_FILE=$(mktemp /tmp/.swegreen-index-XXXXXX) && export GIT_INDEX_FILE && "
    "git read-tree HEAD && git status --porcelain -z --untracked-files=all --no-renames; "
    'r=$?; rm -f "$GIT_INDEX_FILE"; exit $r'
)
_SITE = f"{ENV_PREFIX}/lib/python*/site-packages"
# /testbed's names, then the environment's files that name it as an editable install
EDITABLE_PROBE = (
    f"ls -A {WORKDIR}; echo ---; "
    f"grep -ls {WORKDIR} {_SITE}/*.pth {_SITE}/*.egg-link {_SITE}/__editable__*"
)
# The recorder's option and directory added to what the image's environment has of them.
WITH_RECORDER = (
    'export PYTEST_ADDOPTS="${PYTEST_ADDOPTS:+$PYTEST_ADDOPTS }$SWEGREEN_ADDOPTS" '
    'PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$SWEGREEN_PLUGINS"; '
    'unset SWEGREEN_ADDOPTS SWEGREEN_PLUGINS; exec /bin/bash "$1"'
)  # tamper.BUILD_EXCLUDES, as path parts


@dataclass(frozen=True)
class ContainerRecorder:
    """What records a row's test command in its container (``DockerEvaluator._recorder``):
    the exec's environment, the record's key and marker, the files to copy in (path ->
    bytes, mode) in their folder, and the test phase's own line before the test command."""

    environment: dict[str, str]
    key: bytes
    mark: str
    files: dict[str, tuple[bytes, int]]
    folder: str
    setup: str | None


@dataclass(frozen=True)
class Probe:
    reinstall: bool  # the eval-time install may change nothing: read the tree to be sure
    tokens: tuple[str, ...]  # the test command's words that may name a repository file


def _status_paths(status: str) -> list[str]:
    """The paths of ``git status --porcelain -z --no-renames``."""
    return [entry[3:] for entry in status.split("\0") if len(entry) > 3]


def trusted_lines(recipe: Recipe) -> tuple[str, ...]:
    """The prepare phase's lines that run only the image's programs, never the patch's:
    the conda activation and upstream's eval commands (django's locale-gen)."""
    return (*IMAGE_ACTIVATION, *(e.strip() for e in image_eval_commands(recipe)))


class DockerEvaluator(PatchEvaluator):
    backend = "docker"

    def __init__(
        self,
        *,
        client: docker.DockerClient,
        images: Images,
        recipes: RecipeBook,
        artifacts: ArtifactStore,
        image_source: str = "official",
        limits: Limits | None = None,
        eval_timeout: float | None = None,
        network_instances: frozenset[str] = frozenset(),
        max_patch_bytes: int,
        scrub: Scrub = NO_SCRUBBING,
    ) -> None:
        super().__init__(
            recipes=recipes, artifacts=artifacts, max_patch_bytes=max_patch_bytes, scrub=scrub
        )
        self.client = client
        self.images = images
        self.image_source = image_source
        self.limits = limits or Limits()
        self.eval_timeout = eval_timeout
        self.network_instances = network_instances

    def image_for(self, instance: Instance) -> str:
        return image_name(instance.instance_id, self.image_source)

    def plan(self, instances: Sequence[Instance]) -> list[Instance]:
        """Rows of one repository and version together (their images share the
        environment layer), and their images pulled ahead, in that order."""
        ordered = sorted(instances, key=lambda i: (i.repo, i.version, i.instance_id))
        self.images.prefetch(self.image_for(i) for i in ordered)
        return ordered

    def describe(self) -> dict[str, object]:
        try:
            version = self.client.api.version().get("Version")
        except APIError:
            version = None
        return {
            "isolation": "docker",
            "docker_engine": version,
            "images": image_template(self.image_source),
            "pull": self.images.pull_policy,
            "container": {
                "cap_drop": "ALL",
                "no_new_privileges": True,
                "memory_bytes": self.limits.memory_bytes,
                "pids": self.limits.pids,
                "network": "none unless the row's tests need it",
            },
        }

    def close(self) -> None:
        self.images.close()
        self.client.close()

    async def _run_patch(
        self, run_id: str, key: Key, row: RowBuilder, text: str, notes: list[str]
    ) -> InstanceResult:
        instance = row.instance
        recipe = self.recipes.for_instance(instance)
        row.begin("setup")
        image = await self.images.get(self.image_for(instance))
        row.durations.env_build += image.pull_seconds
        row.environment = {"backend": self.backend, **image.provenance()}
        row.isolation = "docker"
        notes.append(
            f"image {image.name} ({image.digest or image.id})"
            + (f", pulled in {image.pull_seconds:.1f}s" if image.pulled else ", already here")
        )
        network = tests_need_network(recipe, instance.instance_id, self.network_instances)
        if not network and (why := self._install_downloads(instance, recipe, row)):
            network = True
            notes.append(why)
            row.environment["network"] = why
        # what configures pytest on the base commit, in a container of its own meanwhile
        census = asyncio.create_task(self._census(run_id, instance, recipe, image.id, network))
        try:
            box = await self.container(
                image.id, f"swegreen-{instance.instance_id.lower()}", network,
                {LABEL: f"{run_id}/{instance.instance_id}"},
            )  # fmt: skip
            try:
                return await self._in_container(
                    key, row, recipe, box, image.id, text, notes, census
                )
            finally:
                await asyncio.to_thread(box.remove)
        finally:
            census.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await census

    async def _census(
        self, run_id: str, instance: Instance, recipe: Recipe, image_id: str, network: bool
    ) -> tuple[dict[str, object] | None, float]:
        """The engine's census (``EvalRuns.take_census``) in a fresh container of the
        row's image: the eval script's test phase with the recorder ending the session
        before any test is collected (None where the test command is not pytest's), and
        the seconds it took."""
        t0 = time.monotonic()
        recorder = self._recorder(recipe)
        if recorder is None or runner_kind(recipe.log_parser) is not None:
            return None, 0.0
        phases = image_eval_phases(instance, recipe, test_setup=recorder.setup)
        creating = asyncio.ensure_future(
            self.container(
                image_id, f"swegreen-census-{instance.instance_id.lower()}", network,
                {LABEL: f"{run_id}/{instance.instance_id}"},
            )
        )  # fmt: skip
        try:
            box = await asyncio.shield(creating)
        except asyncio.CancelledError:
            # the row ended first (its patch did not apply): the container being made
            # in a thread is made all the same, and removed
            with contextlib.suppress(Exception):
                await asyncio.to_thread((await creating).remove)
            raise
        try:
            files = {**recorder.files, EVAL_SCRIPT: (phases.test.encode(), 0o644)}
            await asyncio.to_thread(box.put_files, files, {recorder.folder: 0o755})
            done = await asyncio.to_thread(
                box.exec,
                ["/bin/bash", "-c", WITH_RECORDER, "eval", EVAL_SCRIPT],
                CENSUS_TIMEOUT,
                environment={**recorder.environment, CENSUS_VARIABLE: "1"},
            )
            _, record = split_marked(done.output, recorder.mark)
            return Recorded.parse(record, recorder.key).census, time.monotonic() - t0
        finally:
            await asyncio.to_thread(box.remove)

    @staticmethod
    def _install_downloads(instance: Instance, recipe: Recipe, row: RowBuilder) -> str | None:
        """Why the row's container keeps the network although its tests do not need it:
        the patch changes where the project declares its dependencies, and the eval
        script's install runs, which may download one the image lacks, as it does in
        upstream's containers (the network cannot be taken away between the two phases:
        the platform's gateway refuses network disconnect)."""
        declared = declares_dependencies(row.info.paths if row.info else [])
        prepare = image_eval_phases(instance, recipe).prepare
        if not declared or runs_no_project_code(prepare, trusted_lines(recipe)):
            return None
        return (
            f"network on: the patch changes {', '.join(declared)}, and the eval-time install "
            "may download what it declares"
        )

    async def container(
        self,
        image_id: str,
        prefix: str,
        network: bool,
        labels: dict[str, str],
        cap_add: Sequence[str] = (),
    ) -> RowContainer:
        """A started container of ``image_id`` under this backend's limits."""
        limits = Limits(
            self.limits.memory_bytes, self.limits.pids, network, self.limits.network_mode
        )
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        try:
            return await asyncio.to_thread(
                RowContainer.create, self.client, image_id, name, limits, labels, cap_add
            )
        except APIError as exc:
            raise SandboxCrashed(
                f"the container could not be made: {exc.explanation or exc}"
            ) from None

    async def _in_container(
        self,
        key: Key,
        row: RowBuilder,
        recipe: Recipe,
        box: RowContainer,
        image_id: str,
        text: str,
        notes: list[str],
        census: asyncio.Task[tuple[dict[str, object] | None, float]],
    ) -> InstanceResult:
        instance = row.instance
        assert row.info is not None
        row.begin("apply")
        probe = self._probe(recipe, row.info.paths)
        recorder = self._recorder(recipe)
        setup = recorder.setup if recorder is not None else None
        full = image_eval_phases(instance, recipe, test_setup=setup)
        lean = (
            image_eval_phases(instance, recipe, skip_install=True, test_setup=setup)
            if probe.reinstall
            else None
        )
        files = {
            DOCKER_PATCH: (text.encode("utf-8", "surrogateescape"), 0o644),
            PREPARE_SCRIPT: (full.prepare.encode(), 0o644),
        }
        if lean is not None:  # which of the two runs is known once the image's tree is read
            files[LEAN_PREPARE_SCRIPT] = (lean.prepare.encode(), 0o644)
        await asyncio.to_thread(box.put_files, files)
        method, skip, runner = await self._apply(box, recipe, row.info.paths, probe, notes)
        if recipe.install:
            row.environment["eval_install"] = "skipped (no build input changed)" if skip else "ran"
        if method is None:
            return self._does_not_apply(key, row, text)
        row.apply_method = method
        try:
            await self._check_links(box, row.info)
        except PatchRejected as exc:
            return self._finish(
                key, row.unapplied(exc.reason, str(exc)), unapplied_report(instance, text)
            )
        base = instance.base_commit
        row.tampered_files += await self._revert(box, base, row.info.paths, runner)
        if row.tampered_files:
            notes.append("put back before the tests: " + ", ".join(row.tampered_files))

        phases = lean if skip and lean is not None else full
        self.artifacts.write_text(key(art.EVAL_SCRIPT), phases.script)
        timeout = self.eval_timeout or recipe.eval_timeout or 1800.0
        deadline = time.monotonic() + timeout
        # nothing but the image's programs runs in the install phase: the checkout's
        # changes are listed in the same exec, right after it
        trusted = runs_no_project_code(phases.prepare, trusted_lines(recipe))
        row.begin("tests")
        prepare, listed, listing = await self._prepare(
            box, LEAN_PREPARE_SCRIPT if phases is lean else PREPARE_SCRIPT, trusted, timeout
        )
        log = prepare.output
        test = None
        recorded: Recorded | None = None
        if prepare.exit_code is not None:
            # the checks between the phases are the backend's own time, not the script's
            row.begin("apply")
            row.durations.tests -= listing
            row.durations.apply += listing
            if listed is None:
                # nothing the install started runs on, and nothing of the container's is
                # used until the daemon's record says the install left the system as it was
                await asyncio.to_thread(box.stop_processes)
                commands = command_words(recipe.test_cmd) | eval_commands(phases.test)
                dropped = await self._judge_install(box, image_id, commands, notes)
                listed = await self._changed(box, dropped)
            # only the sources count: a cache the install left could hold other code
            reverted = await self._revert(box, base, listed, runner)
            row.tampered_files += reverted
            if reverted:
                notes.append("put back after the install: " + ", ".join(reverted))
            left = max(deadline - time.monotonic(), 1.0)
            command = ["/bin/bash", EVAL_SCRIPT]
            files, dirs = {}, {}
            if recorder is not None:
                # after what the image sets of them, as the engine adds its own
                command = ["/bin/bash", "-c", WITH_RECORDER, "eval", EVAL_SCRIPT]
                files, dirs = dict(recorder.files), {recorder.folder: 0o755}
            # written now, once nothing the install started runs: it could have written
            # a script put there before (its own passes, exit 0)
            files[EVAL_SCRIPT] = (phases.test.encode(), 0o644)
            await asyncio.to_thread(box.put_files, files, dirs)
            row.begin("tests")
            environment = recorder.environment if recorder is not None else None
            test = await asyncio.to_thread(box.exec, command, left, environment=environment)
            output = test.output
            if recorder is not None:
                output, record_text = split_marked(output, recorder.mark)
                recorded = Recorded.parse(record_text, recorder.key)
                self.artifacts.write_text(key(art.TEST_RECORD), recorded.text)
            log += output
        row.begin("grading")
        row.test_exit_code = test.exit_code if test is not None else None
        timed_out = test is None or test.exit_code is None
        row.test_command_seconds = test_command_seconds(log) or (
            row.durations.tests if timed_out else 0.0
        )
        self.artifacts.write_text(key(art.TEST_OUTPUT), log)
        if test is None or test.exit_code is None:
            raise TestTimeout(f"the eval script ran past its {timeout:g} s time limit")
        try:
            base_census, seconds = await census
        except (APIError, SandboxCrashed) as exc:
            notes.append(f"pytest's session on the base commit could not be read: {exc}")
            base_census, seconds = None, 0.0
        self._keep_census(key, base_census, notes, seconds)
        with tempfile.TemporaryDirectory(prefix="swegreen-log-") as tmp:
            log_path = Path(tmp) / art.TEST_OUTPUT
            log_path.write_text(log)
            return self._grade(
                key, row, recipe, log_path, text, recorded, test.exit_code, base_census
            )

    async def _prepare(
        self, box: RowContainer, script: str, trusted: bool, timeout: float
    ) -> tuple[ExecResult, list[str] | None, float]:
        """The eval script's install phase; where it runs only the image's programs
        (``trusted``), the checkout's bytecode dropped and its changes listed in the same
        exec, after a marker of this row's own and the time: (its exec, the changed paths
        or None, the seconds the listing took, which are the backend's own)."""
        if not trusted:
            return await asyncio.to_thread(box.exec, ["/bin/bash", script], timeout), None, 0.0
        mark = f"@@swegreen-prepared-{secrets.token_hex(8)}@@"
        then = f"printf '%s%s ' {mark} \"$(date +%s.%N)\"; {_LIST_CHANGES}"
        done = await asyncio.to_thread(
            box.exec, ["/bin/bash", "-c", f"/bin/bash {script}; {then}"], timeout
        )
        ended = time.time()
        output, found, rest = done.output.rpartition(mark)
        if done.exit_code is None or not found:
            return ExecResult(done.exit_code, done.output, done.seconds), None, 0.0
        stamp, _, status = rest.partition(" ")
        if done.exit_code != 0:
            raise SandboxCrashed(f"the checkout's changes could not be listed: {status[-500:]}")
        try:
            listing = min(max(ended - float(stamp), 0.0), done.seconds)
        except ValueError:
            listing = 0.0
        return ExecResult(0, output, done.seconds - listing), _status_paths(status), listing

    @staticmethod
    def _recorder(recipe: Recipe) -> ContainerRecorder | None:
        """The recorder for the test phase: pytest's plugin where the test command is
        pytest, else the runner recorder for django's and sympy's runners (its
        ``sitecustomize`` on PYTHONPATH, the variables that start it set by ``setup``, the
        line just before the test command: conda's own Python, which the image's
        activation runs before, must not take it). Each under names of this run's own,
        with its key (a file the recorder removes when it is imported, before any of the
        project's code runs), copied in after the install; the record comes back on the
        test command's stderr, each line after a marker of this run's own. None where
        nothing records the test command."""
        kind = runner_kind(recipe.log_parser)
        if kind is None and not covers(recipe.log_parser, recipe.test_cmd):
            return None
        record_key, mark = new_key(), new_mark()
        folder = f"/run/swegreen-{secrets.token_hex(8)}"
        environment = {
            "SWEGREEN_PLUGINS": folder,
            "SWEGREEN_RECORD": "stderr",
            MARK_VARIABLE: mark,
            "SWEGREEN_RECORD_KEY_FILE": f"{folder}/key",
            "SWEGREEN_REPO": WORKDIR,
            "SWEGREEN_ADDOPTS": "",
        }
        setup = None
        if kind is None:
            written = pytest_recorder()
            texts = written.files
            environment["SWEGREEN_ADDOPTS"] = pytest_addopts(None, written.module)
        else:
            runner = runner_recorder(kind, WORKDIR)
            texts = runner.files
            variables = runner.environ(folder)
            if kind == "sympy":
                variables["PYTHONHASHSEED"] = hash_seed()
            setup = "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in variables.items())
        files = {f"{folder}/{name}": (text.encode(), 0o444) for name, text in texts.items()}
        files[f"{folder}/key"] = (record_key.encode(), 0o400)
        return ContainerRecorder(environment, record_key.encode(), mark, files, folder, setup)

    async def _judge_install(
        self, box: RowContainer, image_id: str, commands: frozenset[str], notes: list[str]
    ) -> list[str]:
        """What the install changed, by the daemon's record (install_changes.py): the
        system as the image has it, the environment as an install of the project leaves
        it, or the row ends ``workspace_tampering``. Returns the bytecode it wrote, to drop.
        The image's own files are read from a container of it never started, made while
        the daemon computes its record."""
        name = f"swegreen-pristine-{uuid.uuid4().hex[:12]}"
        made = asyncio.create_task(
            asyncio.to_thread(make_pristine, self.client, image_id, name)
        )  # fmt: skip
        try:
            return await self._judged(box, made, commands, notes)
        finally:
            with contextlib.suppress(APIError):
                await asyncio.to_thread(remove_container, self.client, await made)

    async def _judged(
        self,
        box: RowContainer,
        made: asyncio.Task[str],
        commands: frozenset[str],
        notes: list[str],
    ) -> list[str]:
        async def image_files(paths: list[str]) -> dict[str, str | None]:
            try:
                return await asyncio.to_thread(read_files, self.client, await made, paths)
            except APIError as exc:
                raise SandboxCrashed(
                    f"the image's files could not be read: {exc.explanation or exc}"
                ) from None

        changes = install_changes.parse(await asyncio.to_thread(box.changes))
        ours = (DOCKER_PATCH, PREPARE_SCRIPT, LEAN_PREPARE_SCRIPT)  # no test script yet
        system = install_changes.outside(changes, ENV_PREFIX, WORKDIR, ours)
        system += install_changes.git_changes(changes, WORKDIR)
        if any(c.path == install_changes.GITCONFIG for c in changes):
            gitconfig = install_changes.GITCONFIG
            now_cfg, old_cfg = await asyncio.gather(
                asyncio.to_thread(box.read_files, [gitconfig]), image_files([gitconfig])
            )
            system += [
                f"{gitconfig} ({setting})"
                for setting in install_changes.gitconfig_added(
                    now_cfg[gitconfig], old_cfg[gitconfig]
                )
            ]
        if system:
            raise WorkspaceTampering(
                "the install changed the container outside the checkout and the "
                f"environment: {', '.join(system[:8])}" + (" ..." if len(system) > 8 else "")
            )
        env = install_changes.EnvChanges.of(changes, ENV_PREFIX, WORKDIR)
        now_paths, before_paths = env.wanted()
        now, before = await asyncio.gather(
            asyncio.to_thread(box.read_files, now_paths), image_files(before_paths)
        )
        bad = env.violations(now, before, commands)
        if changed := env.changed(path for path, _ in bad):
            # written again with the bytes the image has (a develop reinstall's launchers)
            mine, image = await asyncio.gather(
                asyncio.to_thread(box.read_files, changed), image_files(changed)
            )
            same = frozenset(p for p in changed if mine[p] is not None and mine[p] == image[p])
            bad = env.violations(now, before, commands, same)
        if bad:
            shown = [f"{path} ({why})" for path, why in bad[:8]]
            raise WorkspaceTampering(
                "the install changed the environment as no install of the project does: "
                + "; ".join(shown)
                + (" ..." if len(bad) > 8 else "")
            )
        dropped = env.bytecode()
        notes.append(
            f"the install's changes checked by the daemon's record: {len(changes)} paths, "
            f"{len(env.reinstalled())} distribution metadata, {len(dropped)} bytecode dropped"
        )
        return dropped

    @staticmethod
    def _probe(recipe: Recipe, paths: Sequence[str]) -> Probe:
        """What is to be read of the image's own tree before the patch (the engine's rule,
        ``reinstall_changes_nothing``): whether upstream's eval-time install may change
        nothing here (an editable install, no build input touched; to be confirmed: no
        top-level directory added to ``/testbed``, and the environment holding that
        editable install, a .pth, .egg-link or editable finder naming ``/testbed``), and
        which of the repository's files the test command may itself run (sympy's
        ``bin/test``)."""
        heads = {p.partition("/")[0] for p in paths}
        tokens = tuple(
            t.removeprefix("./")
            for t in shlex.split(recipe.test_cmd)
            if t and not t.startswith(("-", "/"))
        )
        # not even with every top-level directory present: no need to look
        return Probe(reinstall_changes_nothing(recipe.install, paths, heads), tokens)

    async def _apply(
        self,
        box: RowContainer,
        recipe: Recipe,
        paths: Sequence[str],
        probe: Probe,
        notes: list[str],
    ) -> tuple[str | None, bool, frozenset[str]]:
        """In one exec: the image's tree read as ``probe`` says, then the official chain
        (run_evaluation.run_instance), with its reset between attempts and the reverse
        check at the end, each step's exit after a marker of this row's own. (The command
        that applied the patch or None, whether the eval-time install is left out, the
        runner files present.)"""
        mark = f"@@swegreen-step-{secrets.token_hex(8)}@@"
        steps = []
        if probe.reinstall or probe.tokens:
            check = "".join(
                f"[ -f {shlex.quote(t)} ] && echo {shlex.quote(t)}; " for t in probe.tokens
            )
            # /testbed's names --- editable installs naming it --- the runner files present
            looked = EDITABLE_PROBE if probe.reinstall else "echo ---"
            steps.append(f"{{ {looked}; echo ---; {check}}} 2>&1; echo {mark} 0")
        reset = "{ git checkout -- . ; git clean -fd; } >/dev/null 2>&1"
        for attempt, command in enumerate(GIT_APPLY_CMDS):
            argv = shlex.join([*shlex.split(command), DOCKER_PATCH])
            steps.append(
                (reset + "; " if attempt else "")
                + f"{argv} 2>&1; r=$?; echo; echo {mark} $r; [ $r = 0 ] && exit 0"
            )
        reverse = shlex.join(["git", "apply", "--check", "--reverse", DOCKER_PATCH])
        steps.append(f"{reverse} >/dev/null 2>&1; r=$?; echo {mark} $r; [ $r = 0 ] && exit 0")
        steps.append(reset + "; exit 1")
        done = await asyncio.to_thread(box.shell, "\n".join(steps), SETUP_TIMEOUT)
        if done.exit_code is None:
            raise SandboxCrashed(f"applying the patch ran past {SETUP_TIMEOUT:g} s")
        parts = re.split(rf"{mark} (-?\d+)\n", done.output)
        outputs, codes = parts[:-1:2], [int(c) for c in parts[1::2]]
        skip, runner = False, frozenset[str]()
        if probe.reinstall or probe.tokens:
            if not codes:
                raise SandboxCrashed(f"the image's tree could not be read: {done.output[-500:]}")
            top, _, rest = outputs.pop(0).partition("---\n")
            markers, _, runners = rest.partition("---\n")
            codes.pop(0)
            skip = (
                probe.reinstall
                and bool(markers.strip())
                and reinstall_changes_nothing(recipe.install, paths, top.splitlines())
            )
            runner = frozenset(line for line in runners.splitlines() if line in probe.tokens)
        for command, output, code in zip(GIT_APPLY_CMDS, outputs, codes, strict=False):
            notes.append(f"$ {command} patch.diff  -> exit {code}\n{output.removesuffix(chr(10))}")
            if code == 0:
                return command, skip, runner
        if len(codes) > len(GIT_APPLY_CMDS):
            notes.append(f"$ git apply --check --reverse -> exit {codes[-1]}")
            if codes[-1] == 0:
                return "already applied", skip, runner
        return None, skip, runner

    @staticmethod
    async def _check_links(box: RowContainer, info: PatchInfo) -> None:
        """The engine's check after applying (``check_links``), with each symlink among
        the parts resolved by the container's own ``realpath``: nothing of the patch's has
        run yet, the tools are the image's."""
        parts = applied_parts(info)
        listed = await asyncio.to_thread(
            box.exec, ["/bin/bash", "-c", RESOLVE_LINKS, "links", *parts], SETUP_TIMEOUT
        )
        if not listed.ok:
            raise SandboxCrashed(f"the patch's symlinks could not be read: {listed.output[-500:]}")
        fields = listed.output.split("\0")
        check_links(dict(zip(fields[0:-1:2], fields[1::2], strict=False)), WORKDIR)

    async def _changed(self, box: RowContainer, dropped: Sequence[str] = ()) -> list[str]:
        """Paths that differ from HEAD (the base commit), untracked ones included, after
        ``dropped`` (an install's bytecode in the environment) and every ``__pycache__``
        of the checkout are removed (one exec; the system's programs, which the daemon's
        record vouches for)."""
        argv = ["/bin/bash", "-c", f'/bin/rm -f -- "$@" && {_LIST_CHANGES}', "changed", *dropped]
        status = await asyncio.to_thread(box.exec, argv, SETUP_TIMEOUT)
        if not status.ok:
            raise SandboxCrashed(
                f"the checkout's changes could not be listed: {status.output[-500:]}"
            )
        return _status_paths(status.output)

    async def _revert(
        self, box: RowContainer, base: str, paths: Sequence[str], runner: frozenset[str]
    ) -> list[str]:
        """Put every protected path of ``paths`` back to the base commit (tamper.py's rules)."""
        reverted = []
        for path in dict.fromkeys(paths):
            if BUILD_DIRS.intersection(path.split("/")[:-1]) or ".egg-info/" in path:
                continue  # an install's copies, which no test runs
            if not await self._protected(box, base, path, runner):
                continue
            quoted = shlex.quote(path)
            done = await asyncio.to_thread(
                box.shell,
                f"if git cat-file -e {base}:{quoted} 2>/dev/null; "
                f"then git checkout {base} -- {quoted}; else rm -f -- {quoted}; fi",
                SETUP_TIMEOUT,
                OWN_GIT,
            )
            if not done.ok:
                raise SandboxCrashed(f"{path} could not be put back: {done.output[-500:]}")
            reverted.append(path)
        return reverted

    async def _protected(
        self, box: RowContainer, base: str, path: str, runner: frozenset[str]
    ) -> bool:
        if protected_reason(path, runner):
            return True
        name = path.rsplit("/", 1)[-1]
        if name not in SECTIONED:
            return False
        quoted = shlex.quote(path)
        before = await asyncio.to_thread(
            box.shell, f"git show {base}:{quoted}", SETUP_TIMEOUT, OWN_GIT
        )
        after = await asyncio.to_thread(
            box.shell, f"[ -f {quoted} ] && [ ! -L {quoted} ] && cat -- {quoted}", SETUP_TIMEOUT
        )
        return sections_changed(
            name, before.output if before.ok else None, after.output if after.ok else None
        )
