"""The AWS pipeline's two Fargate tasks for one row: ``prepare``, then ``evaluate``.

Both run the same evaluation code as a local run, as a non-root user (container/Dockerfile).

``prepare`` runs no participant code. It mounts the shared cache (EFS) read-write and
fills it (``shared_cache.fill``): the git mirror with the row's commits, the environment
and the services' environments, the base run. It reads the row's ``instance.json`` with
its task role, which may read nothing else.

``evaluate`` applies the participant's patch and runs the tests. It holds no AWS
credentials: its input (the row, the patch) and one upload URL per output come from the
pre-signed URL ``SWEGREEN_INPUT_URL`` (the Presign step's), reaching this row's objects
only. It mounts the shared cache read-only, copies what it needs to its own disk and
evaluates there (``shared_cache``), so nothing a patch does reaches another row.

Environment (the task definitions', plus the state machine's container overrides, all
strings):

    SWEGREEN_RUN_ID, SWEGREEN_INSTANCE_ID    which row
    SWEGREEN_CONFIG         JSON: repo_url_template, eval_timeout, max_attempts, base_validation
    SWEGREEN_ISOLATION      the sandbox's isolation mode: ``process`` on Fargate, which cannot
                            run bubblewrap (docs/security-aws.md); it overrides the config's
    SWEGREEN_CACHE_DIR      prepare: the shared cache; evaluate: the task's own cache, at the
                            path where the prepare task mounts the shared one
    prepare:  SWEGREEN_BUCKET, SWEGREEN_RUNS_PREFIX   where ``instance.json`` is
    evaluate: SWEGREEN_INPUT_URL       pre-signed GET of ``sandbox-input.json``
              SWEGREEN_SHARED_CACHE    the shared cache, read-only (unset: SWEGREEN_CACHE_DIR
                                       is the cache, as on a single machine)
              SWEGREEN_MODEL           the participant's name, recorded on the row

Exit status 0: ``prepare`` did what it could (what it could not fetch or build, the
evaluate task's row reports, with its reason); ``evaluate`` uploaded a graded row,
whatever its verdict. Anything else is a crash the pipeline records as an error row.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from swegreen import artifacts as art
from swegreen.artifacts import ScrubbedArtifacts
from swegreen.aws.pipeline import INSTANCE, SandboxInput
from swegreen.aws.presigned import TIMEOUT, UploadArtifacts, fetch
from swegreen.aws.s3_artifacts import S3Artifacts
from swegreen.aws.shared_cache import SharedBaseValidation, SharedEnvs, SharedRepos, fill
from swegreen.base_validation import BaseValidator
from swegreen.config import EvalConfig
from swegreen.dataset import Instance
from swegreen.engine import LocalSettings, build_evaluator, build_testbeds
from swegreen.errors import EvaluationFailure
from swegreen.evaluate import Evaluator
from swegreen.ports import ArtifactStore, PatchResult
from swegreen.runner import evaluate_with_retries
from swegreen.scrub import Scrubber

DEFAULT_CACHE = "/var/cache/swegreen"
PHASES = ("prepare", "evaluate")
SECRET_ENV = ("SWEGREEN_INPUT_URL",)
_PR_SET_DUMPABLE = 4


def sandbox_config(env: Mapping[str, str]) -> EvalConfig:
    """The row's config; the task definition's isolation mode wins over the request's (the
    task, not the request, knows what its host can do)."""
    values = json.loads(env.get("SWEGREEN_CONFIG", "{}"))
    if env.get("SWEGREEN_ISOLATION"):
        values["isolation"] = env["SWEGREEN_ISOLATION"]
    return EvalConfig.model_validate(values)


def prepare(env: Mapping[str, str], s3: Any) -> int:
    run_id, iid = env["SWEGREEN_RUN_ID"], env["SWEGREEN_INSTANCE_ID"]
    artifacts = S3Artifacts(s3, env["SWEGREEN_BUCKET"], env.get("SWEGREEN_RUNS_PREFIX", "runs/"))
    text = artifacts.read_text(art.instance_key(run_id, iid, INSTANCE))
    if text is None:
        print(f"no {INSTANCE} for {run_id}/{iid} in s3://{artifacts.bucket}", file=sys.stderr)
        return 2
    instance = Instance.model_validate_json(text)
    config = sandbox_config(env)
    cache = Path(env.get("SWEGREEN_CACHE_DIR", DEFAULT_CACHE))
    settings = LocalSettings(output_dir=cache / "unused", cache_dir=cache)
    testbeds = build_testbeds(settings, config, env)
    validator = (
        BaseValidator(testbeds, cache / "base-validation") if config.base_validation else None
    )
    try:
        asyncio.run(fill(testbeds, validator, instance))
    except EvaluationFailure as exc:  # the evaluate task's row reports it, with its reason
        print(f"{iid}: {exc.reason}: {exc}\n{exc.log_tail}", file=sys.stderr)
    else:
        print(f"{iid}: the shared cache is ready")
    return 0


def evaluate(env: Mapping[str, str], http: Any) -> int:
    run_id, iid = env["SWEGREEN_RUN_ID"], env["SWEGREEN_INSTANCE_ID"]
    given = SandboxInput.model_validate_json(fetch(http, env["SWEGREEN_INPUT_URL"]))
    if given.instance.instance_id != iid:
        print(f"the input is {given.instance.instance_id}'s, not {iid}'s", file=sys.stderr)
        return 2
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
    shared = Path(env["SWEGREEN_SHARED_CACHE"]) if env.get("SWEGREEN_SHARED_CACHE") else None
    evaluator = shared_cache_evaluator(local, shared, config, host_env, artifacts, scrubber)
    result = asyncio.run(
        evaluate_with_retries(
            evaluator,
            run_id,
            given.instance,
            PatchResult(given.patch, env.get("SWEGREEN_MODEL", "")),
            config.max_attempts,
        )
    )
    artifacts.write_text(
        art.instance_key(run_id, iid, art.RESULT), result.model_dump_json(indent=2)
    )
    print(f"{iid}: {result.status.value} ({result.reason})")
    return 0


def shared_cache_evaluator(
    local: Path,
    shared: Path | None,
    config: EvalConfig,
    host_env: Mapping[str, str],
    artifacts: ArtifactStore,
    scrubber: Scrubber | None = None,
) -> Evaluator:
    """The local engine's evaluator with its git mirrors, environments and base runs read
    from ``shared`` (never written) and everything else on ``local``."""
    settings = LocalSettings(output_dir=local / "unused", cache_dir=local)
    if shared is None or shared.resolve() == local.resolve():
        return build_evaluator(settings, config, host_env, artifacts, scrubber=scrubber)
    testbeds = build_testbeds(settings, config, host_env)
    testbeds.repos = SharedRepos(
        local / "repos", shared / "repos", config.repo_url_template, host_env
    )
    testbeds.envs = SharedEnvs(testbeds.envs.root, shared / "envs", testbeds.envs.search, host_env)
    validator = (
        SharedBaseValidation(testbeds, shared / "base-validation")
        if config.base_validation
        else None
    )
    scrub = scrubber or Scrubber.from_env(host_env)
    return Evaluator(
        testbeds=testbeds,
        artifacts=artifacts,
        base_validator=validator,
        max_patch_bytes=config.max_patch_bytes,
        scrub=scrub,
    )


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
        if phase == "prepare":
            import boto3

            code = prepare(os.environ, boto3.client("s3"))
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
