"""The AWS pipeline's Fargate tasks: ``build`` and ``prepare`` (the build phase), and
``evaluate`` (one row). All run the same code as a local run, as a non-root user
(container/Dockerfile), on the task's own disk: there is no shared file system.

``build`` and ``prepare`` run no participant code (swegreen.aws.build_phase). Their item
is the ``SWEGREEN_ITEM_INDEX``-th of the JSON list at ``SWEGREEN_ITEMS_KEY`` (the run's
``builds.json`` or ``prepares.json``); their role may read the run's items and
``instance.json`` files and read and write ``artifacts/``, nothing else.

``evaluate`` applies the participant's patch and runs the tests, for one row or for each
row of a batch in turn (the task's start is paid once for them). It holds no AWS
credentials: its input (the row, the patch), the prebuilt artifacts it starts from and
one upload URL per output come from the pre-signed URL ``SWEGREEN_INPUT_URL`` (the
Presign step's), reaching this row's objects and those artifacts only. It unpacks the
artifacts into its cache (where they were built: absolute paths inside them hold) and
evaluates with the local engine.

Environment (the task definitions', plus the state machine's container overrides, all
strings):

    SWEGREEN_RUN_ID         the run
    SWEGREEN_CONFIG         JSON: repo_url_template, eval_timeout, max_attempts, base_validation
    SWEGREEN_ISOLATION      the sandbox's isolation mode: ``process`` on Fargate, which cannot
                            run bubblewrap (docs/security-aws.md); it overrides the config's
    SWEGREEN_CACHE_DIR      the task's cache, on its own disk
    build, prepare: SWEGREEN_BUCKET, SWEGREEN_RUNS_PREFIX, SWEGREEN_ITEMS_KEY,
                    SWEGREEN_ITEM_INDEX
    evaluate:       SWEGREEN_INSTANCE_ID, SWEGREEN_INPUT_URL (pre-signed GET of
                    ``sandbox-input.json``, or of a batch's ``sandbox-batch.json``),
                    SWEGREEN_MODEL (the participant's name),
                    SWEGREEN_TASK_IS_MACHINE=1 (the task definition's: every process
                    and temporary file of the tests' uid is the task's own, cleared
                    between a batch's rows)

Exit status 0: the task did what it could (``evaluate``: it uploaded a graded row,
whatever its verdict; ``build``/``prepare``: what they could not make, the rows report
with its reason). ``EXIT_TEMPFAIL`` (75): a failure of the moment, worth a retry.
Anything else is a crash, which the pipeline records as an error row.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import shutil
import signal
import sys
import tempfile
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from swegreen.aws import prebuilt
from swegreen.aws.build_phase import ArtifactBucket, build, prepare
from swegreen.aws.pipeline import SandboxBatch, SandboxInput
from swegreen.aws.presigned import TIMEOUT, UploadArtifacts, download, fetch
from swegreen.core.config import EvalConfig
from swegreen.core.ports import PatchResult
from swegreen.core.scrub import Scrubber
from swegreen.evaluation.base_validation import BaseValidator
from swegreen.evaluation.engine import LocalSettings, build_evaluator, build_testbeds
from swegreen.evaluation.runner import evaluate_with_retries
from swegreen.evaluation.settings import interpreter_settings
from swegreen.sandbox.isolation import DEFAULT_SANDBOX_UID
from swegreen.stores import artifacts as art
from swegreen.stores.artifacts import ScrubbedArtifacts

DEFAULT_CACHE = "/var/cache/swegreen"
PHASES = ("build", "prepare", "evaluate")
SECRET_ENV = ("SWEGREEN_INPUT_URL",)
_PR_SET_DUMPABLE = 4


def sandbox_config(env: Mapping[str, str]) -> EvalConfig:
    """The row's config; the task definition's isolation mode wins over the request's (the
    task, not the request, knows what its host can do). Installs are always offline: a
    row's task may have no network at all (prebuilt.row_needs names its prepared
    workspace so)."""
    values = json.loads(env.get("SWEGREEN_CONFIG", "{}"))
    if env.get("SWEGREEN_ISOLATION"):
        values["isolation"] = env["SWEGREEN_ISOLATION"]
    values["offline_installs"] = True
    return EvalConfig.model_validate(values)


def build_phase(phase: str, env: Mapping[str, str], s3: Any) -> int:
    """One item of the build phase: ``build`` (a mirror or an environment) or ``prepare``
    (prepared workspaces and their base runs)."""
    bucket = ArtifactBucket(s3, env["SWEGREEN_BUCKET"], env.get("SWEGREEN_RUNS_PREFIX", "runs/"))
    listing = bucket.get_text(env["SWEGREEN_ITEMS_KEY"])
    if listing is None:
        print(f"no {env['SWEGREEN_ITEMS_KEY']} in s3://{bucket.bucket}", file=sys.stderr)
        return 2
    raw = json.loads(listing)[int(env["SWEGREEN_ITEM_INDEX"])]
    config = sandbox_config(env)
    cache = Path(env.get("SWEGREEN_CACHE_DIR", DEFAULT_CACHE))
    settings = LocalSettings(
        output_dir=cache / "unused",
        cache_dir=cache,
        content_keyed_envs=False,
        **interpreter_settings(env),  # the image's interpreters (container/Dockerfile)
    )
    testbeds = build_testbeds(settings, config, env)
    try:
        if phase == "build":
            return asyncio.run(build(prebuilt.BuildItem.model_validate(raw), bucket, testbeds))
        validator = (
            BaseValidator(testbeds, cache / "base-validation") if config.base_validation else None
        )
        item = prebuilt.PrepareItem.model_validate(raw)
        return asyncio.run(prepare(item, bucket, testbeds, validator))
    finally:
        testbeds.close()


def evaluate(env: Mapping[str, str], http: Any) -> int:
    """The row, or each row of a batch in turn (a manifest of rows: ``SandboxBatch``)."""
    iid = env["SWEGREEN_INSTANCE_ID"]
    document = json.loads(fetch(http, env["SWEGREEN_INPUT_URL"]))
    unpacked: set[str] = set()  # artifacts a batch's earlier rows unpacked already
    if "rows" not in document:
        given = SandboxInput.model_validate(document)
        if given.instance.instance_id != iid:
            print(f"the input is {given.instance.instance_id}'s, not {iid}'s", file=sys.stderr)
            return 2
        return evaluate_row(env, http, given, env.get("SWEGREEN_MODEL", ""), unpacked)
    batch = SandboxBatch.model_validate(document)
    for n, row in enumerate(batch.rows):
        given = SandboxInput.model_validate_json(fetch(http, row.input_url))
        if given.instance.instance_id != row.instance_id:
            print(f"row {n}'s input is another row's", file=sys.stderr)
            return 2
        code = evaluate_row(env, http, given, row.model, unpacked)
        if code:
            return code
        if env.get("SWEGREEN_TASK_IS_MACHINE") != "1":
            continue  # no machine of its own (a test's host): nothing of the uid is ours
        leftovers = clear_sandbox_uid()
        if leftovers:
            print(f"{row.instance_id}: cleared what its tests left: {leftovers}")
    return 0


def clear_sandbox_uid(uid: int = DEFAULT_SANDBOX_UID) -> list[str]:
    """What one row's tests left behind for the next row of a batch, gone: every process
    of the tests' uid (killed) and its files in the world-writable temporary directories
    (removed). The engine made everything else of the row (its workspace, its logs) in
    directories of its own, which the next row does not use."""
    left: list[str] = []
    for _ in range(10):  # processes may fork while they are being killed
        pids = [p for p in _pids_of(uid) if p != os.getpid()]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        left += [f"process {p}" for p in pids]
    for tmp in ("/tmp", "/var/tmp", "/dev/shm"):
        root = Path(tmp)
        if not root.is_dir():
            continue
        for entry in root.iterdir():
            with contextlib.suppress(OSError):
                if entry.lstat().st_uid != uid:
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink()
                left.append(str(entry))
    return left


def _pids_of(uid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
    return pids


def evaluate_row(
    env: Mapping[str, str], http: Any, given: SandboxInput, model: str, unpacked: set[str]
) -> int:
    """One row: its artifacts unpacked (those not unpacked for an earlier row of the
    batch), evaluated, its graded row uploaded."""
    run_id, iid = env["SWEGREEN_RUN_ID"], given.instance.instance_id
    host_env = {k: v for k, v in env.items() if k not in SECRET_ENV}
    config = sandbox_config(host_env)
    scrubber = Scrubber.from_env(env)  # the task's secrets stay out of what it uploads
    artifacts = ScrubbedArtifacts(
        UploadArtifacts(
            # the pipeline keeps the patch: writing it again (redacted as every write is)
            # is no upload
            http,
            art.instance_key(run_id, iid, ""),
            given.uploads,
            {art.PATCH: scrubber(given.patch)},
        ),
        scrubber,
    )
    local = Path(env.get("SWEGREEN_CACHE_DIR", DEFAULT_CACHE))
    local.mkdir(parents=True, exist_ok=True)
    for name, url in given.artifacts.items():  # in order: the mirror, environments, prepared
        key = url.split("?", 1)[0]  # the object, whatever the signature
        if key in unpacked:
            continue
        unpacked.add(key)
        with tempfile.TemporaryDirectory(dir=local) as tmp:
            archive = Path(tmp) / f"{name}.tar.zst"
            download(http, url, archive)
            prebuilt.unpack(archive, local)
    settings = LocalSettings(
        output_dir=local / "unused",
        cache_dir=local,
        content_keyed_envs=False,
        **interpreter_settings(host_env),
    )
    evaluator = build_evaluator(settings, config, host_env, artifacts, scrubber=scrubber)
    result = asyncio.run(
        evaluate_with_retries(
            evaluator,
            run_id,
            given.instance,
            PatchResult(given.patch, model),
            config.max_attempts,
        )
    )
    artifacts.write_text(
        art.instance_key(run_id, iid, art.RESULT), result.model_dump_json(indent=2)
    )
    print(f"{iid}: {result.status.value} ({result.reason})")
    return 0


def forbid_inspection() -> None:
    """Make this process's memory and /proc entries unreadable to the tests it starts,
    which run as the same user: its environment holds the task's URLs (or, in the prepare
    task, the path to its role's credentials). Children are dumpable again after exec."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    phase = args[0] if args else "evaluate"
    if phase not in PHASES or len(args) > 1:
        print(f"usage: python -m swegreen.aws.sandbox_task [{'|'.join(PHASES)}]", file=sys.stderr)
        sys.exit(2)
    try:
        forbid_inspection()
        if phase in ("build", "prepare"):
            import boto3

            code = build_phase(phase, os.environ, boto3.client("s3"))
        else:
            import httpx

            with httpx.Client(timeout=TIMEOUT) as http:
                code = evaluate(os.environ, http)
    except Exception:  # a crash: no result is uploaded, the pipeline records an error row
        traceback.print_exc()
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
