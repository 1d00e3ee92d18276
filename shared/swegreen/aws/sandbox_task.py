"""The sandbox task: evaluates one instance, as a Fargate task of the AWS pipeline.

The same evaluation code as a local run (``build_evaluator`` and the runner's bounded
infrastructure retries), with artifacts in S3 instead of a directory and the git and
environment caches on EFS, shared by every task. Inputs come as environment variables
(the state machine's container overrides, strings only):

    SWEGREEN_BUCKET, SWEGREEN_RUN_ID, SWEGREEN_INSTANCE_ID   which row
    SWEGREEN_MODEL          the participant's name, recorded on the row
    SWEGREEN_CONFIG         JSON: repo_url_template, eval_timeout, max_attempts, base_validation,
                            max_patch_bytes
    SWEGREEN_CACHE_DIR      the EFS mount (default /var/cache/swegreen)
    SWEGREEN_RUNS_PREFIX    S3 prefix of run artifacts (default runs/)

It reads ``instance.json`` and ``patch.diff`` of the row and writes the eval script, the
test log, report.json and ``result.json`` (the graded row). Exit status 0 means a row was
written, whatever its verdict; anything else is a crash the pipeline records as an error.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path

from swegreen import artifacts as art
from swegreen.artifacts import ScrubbedArtifacts
from swegreen.aws.s3_artifacts import S3Artifacts
from swegreen.config import EvalConfig
from swegreen.dataset import Instance
from swegreen.engine import LocalSettings, build_evaluator
from swegreen.ports import PatchResult
from swegreen.runner import evaluate_with_retries
from swegreen.scrub import Scrubber


def run(env: Mapping[str, str], s3: object) -> int:
    bucket, run_id, iid = (
        env["SWEGREEN_BUCKET"],
        env["SWEGREEN_RUN_ID"],
        env["SWEGREEN_INSTANCE_ID"],
    )
    scrubber = Scrubber.from_env(env)  # the task's secrets stay out of what it writes
    artifacts = ScrubbedArtifacts(
        S3Artifacts(s3, bucket, env.get("SWEGREEN_RUNS_PREFIX", "runs/")), scrubber
    )
    text = artifacts.read_text(art.instance_key(run_id, iid, "instance.json"))
    if text is None:
        print(f"no instance.json for {run_id}/{iid} in s3://{bucket}", file=sys.stderr)
        return 2
    instance = Instance.model_validate_json(text)
    patch = artifacts.read_text(art.instance_key(run_id, iid, art.PATCH))
    config = EvalConfig.model_validate(json.loads(env.get("SWEGREEN_CONFIG", "{}")))
    cache = Path(env.get("SWEGREEN_CACHE_DIR", "/var/cache/swegreen"))
    settings = LocalSettings(output_dir=cache / "unused", cache_dir=cache)
    evaluator = build_evaluator(settings, config, env, artifacts, scrubber=scrubber)
    result = asyncio.run(
        evaluate_with_retries(
            evaluator,
            run_id,
            instance,
            PatchResult(patch, env.get("SWEGREEN_MODEL", "")),
            config.max_attempts,
        )
    )
    artifacts.write_text(
        art.instance_key(run_id, iid, art.RESULT), result.model_dump_json(indent=2)
    )
    print(f"{iid}: {result.status.value} ({result.reason})")
    return 0


def main() -> None:
    import boto3

    try:
        code = run(os.environ, boto3.client("s3"))
    except Exception:  # a crash: no result is written, the pipeline records an error row
        traceback.print_exc()
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
