"""The sandbox tasks' adapters and decisions, on real files and a real HTTP server: the
pre-signed URLs are the evaluate task's only way in and out (its row's outputs, its
artifacts), and a failed Fargate task is retried only for the infrastructure's failures."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from swegreen.aws.pipeline import (
    CAPACITY_WAIT_SECONDS,
    RETRY_MAX_SECONDS,
    SANDBOX_OUTPUTS,
    TASK_ATTEMPTS,
    Attempt,
    TaskRetryEvent,
    task_retry,
)
from swegreen.aws.pipeline.classify import _failure_of
from swegreen.aws.presigned import PresignedUrlError, UploadArtifacts, download
from swegreen.aws.sandbox_task import main, sandbox_config
from swegreen.core.config import EvalConfig
from swegreen.stores import artifacts as art
from tests.helpers import http_server

ROW = art.instance_key("run", "o__r-1", "")


class Bucket(BaseHTTPRequestHandler):
    """Stands in for S3 behind pre-signed URLs: PUT stores, GET returns; a path can be
    told to answer some status codes first."""

    objects: ClassVar[dict[str, bytes]] = {}
    answers: ClassVar[dict[str, list[tuple[int, bytes]]]] = {}

    def _answer(self) -> bool:
        queued = self.answers.get(self.path)
        if not queued:
            return False
        status, body = queued.pop(0)
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return True

    def do_GET(self) -> None:
        if self._answer():
            return
        body = self.objects.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if not self._answer():
            self.objects[self.path] = body
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def bucket() -> Iterator[str]:
    Bucket.objects, Bucket.answers = {}, {}
    with http_server(Bucket) as url:
        yield url


def uploads(base: str) -> dict[str, str]:
    return {name: f"{base}/{name}?X-Amz-Signature=s" for name in SANDBOX_OUTPUTS}


def test_outputs_go_to_their_own_urls_and_nothing_else_can_be_written(bucket: str) -> None:
    with httpx.Client(timeout=10) as http:
        store = UploadArtifacts(http, ROW, uploads(bucket), {art.PATCH: "the patch"})
        store.write_text(ROW + art.TEST_OUTPUT, "PASSED t1\n\udcff")
        store.write_text(ROW + art.PATCH, "the patch")  # already stored: no upload
        assert Bucket.objects == {
            f"/{art.TEST_OUTPUT}?X-Amz-Signature=s": "PASSED t1\n\udcff".encode(
                "utf-8", "surrogateescape"
            )
        }
        assert store.read_text(ROW + art.TEST_OUTPUT) == "PASSED t1\n\udcff"
        assert store.read_text(ROW + art.PATCH) == "the patch"
        assert store.read_text(ROW + art.REPORT) is None
        with pytest.raises(ValueError, match=r"no upload URL for 'patch\.diff'.*SANDBOX_OUTPUTS"):
            store.write_text(ROW + art.PATCH, "another patch")
        with pytest.raises(ValueError, match=r"no upload URL for 'notes\.txt'"):
            store.write_text(ROW + "notes.txt", "x")
        other_row = art.instance_key("run", "o__r-2", art.TEST_OUTPUT)
        with pytest.raises(ValueError, match="not one of this row's"):
            store.write_text(other_row, "x")
        with pytest.raises(ValueError, match="not one of this row's"):
            store.write_text(ROW + "../o__r-2/" + art.RESULT, "x")


def test_a_refused_url_says_why_and_a_transient_error_is_retried(bucket: str) -> None:
    expired = b"<Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message>"
    Bucket.answers = {
        f"/{art.REPORT}?X-Amz-Signature=s": [(403, expired)],
        f"/{art.RESULT}?X-Amz-Signature=s": [(503, b"SlowDown")],
    }
    with httpx.Client(timeout=10) as http:
        store = UploadArtifacts(http, ROW, uploads(bucket))
        with pytest.raises(
            PresignedUrlError, match=r"PUT \(403\).*ExpiredToken.*docs/security-aws.md"
        ):
            store.write_text(ROW + art.REPORT, "{}")
        store.write_text(ROW + art.RESULT, "{}")  # after one 503
    assert Bucket.objects == {f"/{art.RESULT}?X-Amz-Signature=s": b"{}"}


def test_an_artifact_is_streamed_to_disk_and_a_transient_error_is_retried(
    bucket: str, tmp_path: Path
) -> None:
    body = os.urandom(3 << 20)  # several chunks
    Bucket.objects = {"/env.tar.zst?X-Amz-Signature=s": body}
    Bucket.answers = {"/env.tar.zst?X-Amz-Signature=s": [(503, b"SlowDown")]}
    with httpx.Client(timeout=10) as http:
        download(http, f"{bucket}/env.tar.zst?X-Amz-Signature=s", tmp_path / "a")
        assert (tmp_path / "a").read_bytes() == body
        Bucket.answers = {"/gone?X-Amz-Signature=s": [(403, b"<Code>AccessDenied</Code>")]}
        with pytest.raises(PresignedUrlError, match=r"GET of an artifact \(403\)"):
            download(http, f"{bucket}/gone?X-Amz-Signature=s", tmp_path / "b")


def task_failure(**task: object) -> dict[str, object]:
    """A Catch's error for a stopped ECS task, as Step Functions gives it."""
    return {"Error": "States.TaskFailed", "Cause": json.dumps(task)}


SPOT = task_failure(
    StopCode="SpotInterruption",
    StoppedReason="Your Spot Task was interrupted.",
    Containers=[{"Name": "sandbox"}],
)
OOM = task_failure(
    StopCode="EssentialContainerExited",
    StoppedReason="Essential container in task exited",
    Containers=[
        {"Name": "sandbox", "ExitCode": 137, "Reason": "OutOfMemoryError: Container killed"}
    ],
)
CRASH = task_failure(StopCode="EssentialContainerExited", Containers=[{"ExitCode": 1}])
TEMPFAIL = task_failure(Containers=[{"Name": "builder", "ExitCode": 75}])
PULL = task_failure(StoppedReason="CannotPullContainerError: pull rate limit", Containers=[{}])


def test_infrastructure_failures_are_retried_with_jitter_then_on_demand() -> None:
    rng = random.Random(7)
    attempt = Attempt()
    seen = []
    for _ in range(TASK_ATTEMPTS - 1):
        attempt = task_retry(TaskRetryEvent(error=SPOT, attempt=attempt), rng)
        assert attempt.retry, attempt
        seen.append((attempt.capacity, attempt.wait_seconds))
    # Spot twice, then on-demand; full jitter, capped, growing ceilings
    assert [c for c, _ in seen] == ["FARGATE_SPOT", "FARGATE", "FARGATE", "FARGATE"]
    assert all(1 <= w <= RETRY_MAX_SECONDS for _, w in seen)
    last = task_retry(TaskRetryEvent(error=SPOT, attempt=attempt), rng)
    assert not last.retry and "attempts made" in last.why
    for error in (
        TEMPFAIL,
        PULL,
        {"Error": "ECS.AmazonECSException", "Cause": "Capacity is unavailable at this time"},
    ):
        assert task_retry(TaskRetryEvent(error=error), rng).retry, error


# RunTask's answer when the account's vCPU quota is used up, as the .sync state's error
QUOTA = {
    "Error": "AmazonECS.Unknown",
    "Cause": json.dumps(
        {
            "Failures": [
                {
                    "Arn": "arn:aws:ecs:us-east-1:123456789012:cluster/c",
                    "Reason": "You've reached the limit on the number of vCPUs you can run "
                    "concurrently",
                }
            ],
            "Tasks": [],
        }
    ),
}
THROTTLED = {"Error": "ECS.ThrottlingException", "Cause": "Rate exceeded"}


def test_quota_refusals_and_throttles_wait_for_room_until_the_rows_deadline() -> None:
    rng = random.Random(3)
    attempt, now = Attempt(), 1000.0
    # far more refusals than TASK_ATTEMPTS: a quota is a wait, not a verdict
    for n in range(3 * TASK_ATTEMPTS):
        attempt = task_retry(
            TaskRetryEvent(error=QUOTA if n % 2 else THROTTLED, attempt=attempt), rng, now
        )
        assert attempt.retry, attempt
        assert attempt.waiting_since == 1000.0 and attempt.refusals == n + 1
        assert 1 <= attempt.wait_seconds <= RETRY_MAX_SECONDS
        now += attempt.wait_seconds
    assert (
        "vCPUs you can run concurrently"
        in task_retry(TaskRetryEvent(error=QUOTA, attempt=attempt), rng, now).why
    )
    # the wait never runs past the deadline, and the deadline ends it
    late = task_retry(TaskRetryEvent(error=QUOTA, attempt=attempt), rng, 1000.0 + 1790)
    assert late.retry and late.wait_seconds <= 10
    over = task_retry(TaskRetryEvent(error=QUOTA, attempt=attempt), rng, 1000.0 + 1800)
    assert not over.retry and f"past the {CAPACITY_WAIT_SECONDS} s" in over.why
    # refusals did not use up the task's own attempts: a Spot reclaim after them is retried
    after = task_retry(TaskRetryEvent(error=SPOT, attempt=attempt), rng, now)
    assert after.retry and after.capacity == "FARGATE"
    # a row refused past its deadline: a sandbox failure of the infrastructure
    refused = _failure_of(QUOTA)
    assert refused.reason == "sandbox_crashed" and refused.infrastructure
    assert "vCPUs you can run concurrently" in str(refused)
    # an ECS failure that is no refusal stays an infrastructure failure: attempts counted
    unknown = {"Error": "AmazonECS.Unknown", "Cause": "something else"}
    first = task_retry(TaskRetryEvent(error=unknown), rng, now)
    assert first.retry and first.refusals == 0


def test_out_of_memory_and_crashes_are_the_rows_verdict_never_retried() -> None:
    for error in (OOM, CRASH, {"Error": "States.Timeout", "Cause": ""}):
        assert not task_retry(TaskRetryEvent(error=error)).retry, error
    oom = _failure_of(OOM)
    assert (oom.reason, oom.infrastructure) == ("out_of_memory", False)
    crash = _failure_of(CRASH)
    assert crash.reason == "sandbox_crashed" and "exit codes [1]" in str(crash)
    # a Lambda step's own failure keeps its reason (Presign: a remembered build failure)
    remembered = {
        "Error": "EnvSetupFailed",
        "Cause": json.dumps({"errorType": "EnvSetupFailed", "errorMessage": "no numpy 0.9"}),
    }
    failure = _failure_of(remembered)
    assert failure.reason == "env_setup_failed" and "no numpy 0.9" in str(failure)


def test_the_task_definition_chooses_the_isolation_and_a_bad_phase_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {"SWEGREEN_CONFIG": json.dumps({"max_attempts": 2}), "SWEGREEN_ISOLATION": "process"}
    config = sandbox_config(env)
    assert config.max_attempts == 2
    if "isolation" in EvalConfig.model_fields:  # the task's mode wins over the request's
        request = {"max_attempts": 2, "isolation": "bwrap"}
        assert sandbox_config({**env, "SWEGREEN_CONFIG": json.dumps(request)}).isolation == (
            "process"
        )
    with pytest.raises(SystemExit) as exit_:
        main(["evaluate", "now"])
    assert exit_.value.code == 2
    assert (
        "usage: python -m swegreen.aws.sandbox_task [build|prepare|evaluate]"
        in capsys.readouterr().err
    )
