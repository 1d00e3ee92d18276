"""TaskRetry: after a Fargate task failed, whether to run it again, on what capacity,
after how long."""

from __future__ import annotations

import contextlib
import json
import random
import time
from typing import Any

from swegreen.aws.pipeline.models import (
    CAPACITY_WAIT_SECONDS,
    EXIT_TEMPFAIL,
    RETRY_BASE_SECONDS,
    RETRY_MAX_SECONDS,
    SPOT_ATTEMPTS,
    TASK_ATTEMPTS,
    Attempt,
    TaskRetryEvent,
)

# A task that never started because the account had no room for it: RunTask's
# ``failures`` (the .sync state fails with AmazonECS.Unknown and the refusal in its cause)
# or RunTask throttled. Matched in the state's error and cause.
_NO_ROOM = (
    "You've reached the limit on the number of vCPUs",
    "vCPU limit",
    "Capacity is unavailable",
    "RESOURCE:FARGATE",
    "ThrottlingException",
    "Rate exceeded",
    "LimitExceededException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
)


# What a stopped task's description (or a task that did not start) says when the
# infrastructure, not the row, failed it: Spot reclaimed it, the image or the network did
# not come up, ECS failed.
_INFRASTRUCTURE = (
    "SpotInterruption",
    "TerminationNotice",
    "CannotPullContainerError",
    "ResourceInitializationError",
    "TaskFailedToStart",
    "Timeout waiting for network interface",
    "ServiceUnavailable",
    "AmazonECS.Unknown",
    "ECS.AmazonECSException",
    "ECS.ServerException",
)


def task_description(error: dict[str, Any]) -> dict[str, Any] | None:
    with contextlib.suppress(ValueError, TypeError):
        document = json.loads(str(error.get("Cause", "")))
        if isinstance(document, dict) and "Containers" in document:
            return document
    return None


def out_of_memory(task: dict[str, Any]) -> bool:
    texts = [str(task.get("StoppedReason", ""))]
    texts += [str(c.get("Reason", "")) for c in task.get("Containers", [])]
    return any("OutOfMemory" in t for t in texts)


def task_retry(
    event: TaskRetryEvent, rng: random.Random | None = None, now: float | None = None
) -> Attempt:
    """After a Fargate task failed: whether to run it again, on what capacity, after how
    long. A task the account had no room for (vCPU quota, no capacity, RunTask throttled)
    waits for room with full jitter until CAPACITY_WAIT_SECONDS after the first refusal,
    however many attempts that takes: a quota is a wait, never a verdict. Other
    infrastructure failures (Spot reclaimed the task, the image did not pull, the network
    did not come up, the task's own "try again" exit status) are retried TASK_ATTEMPTS
    times in all; both go on-demand once Spot failed twice. An out-of-memory kill or a
    crash of the task's own code is not retried (the row's error says which)."""
    rng = rng or random.Random()
    now = time.time() if now is None else now
    attempt = event.attempt
    name = str(event.error.get("Error", ""))
    cause = str(event.error.get("Cause", ""))
    task = task_description(event.error)
    codes = [c.get("ExitCode") for c in (task or {}).get("Containers", [])]
    waiting_since, refusals = attempt.waiting_since, attempt.refusals
    if task is not None and out_of_memory(task):
        why, retry = "the container ran out of memory", False
    elif EXIT_TEMPFAIL in codes:
        why, retry = "the task asked to be tried again", True
    elif any(marker in name or marker in cause for marker in _NO_ROOM):
        waiting_since, refusals = waiting_since or now, refusals + 1
        waited = now - waiting_since
        why = f"no room in the account ({name}: {reason_of(cause)}); waited {waited:.0f} s"
        if waited >= CAPACITY_WAIT_SECONDS:
            return attempt.model_copy(
                update={
                    "retry": False,
                    "wait_seconds": 0,
                    "why": f"{why}, past the {CAPACITY_WAIT_SECONDS} s a row waits for room",
                    "waiting_since": waiting_since,
                    "refusals": refusals,
                }
            )
        number = attempt.number + 1
        ceiling = min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** (refusals - 1))
        left = CAPACITY_WAIT_SECONDS - waited
        return Attempt(
            number=number,
            capacity="FARGATE" if number > SPOT_ATTEMPTS else "FARGATE_SPOT",
            wait_seconds=max(1, int(min(left, rng.uniform(1, ceiling)))),
            retry=True,
            why=why,
            waiting_since=waiting_since,
            refusals=refusals,
        )
    elif any(marker in name or marker in cause for marker in _INFRASTRUCTURE):
        why, retry = f"infrastructure ({name})", True
    else:
        why, retry = f"the task failed ({name}, exit codes {codes})", False
    tries = attempt.number - attempt.refusals  # refusals never ran: they do not count
    if retry and tries >= TASK_ATTEMPTS:
        why, retry = f"{why}; {tries} attempts made", False
    number = attempt.number + 1
    ceiling = min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** (tries - 1))
    return Attempt(
        number=number,
        capacity="FARGATE" if number > SPOT_ATTEMPTS else "FARGATE_SPOT",
        wait_seconds=int(rng.uniform(1, ceiling)) if retry else 0,
        retry=retry,
        why=why,
        waiting_since=waiting_since,
        refusals=refusals,
    )


def reason_of(cause: str) -> str:
    """RunTask's refusal reason when the cause carries its ``failures``, else the cause."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        document = json.loads(cause)
        failures = document.get("Failures") or document.get("failures") or []
        reasons = [str(f.get("Reason") or f.get("reason") or "") for f in failures]
        if any(reasons):
            return "; ".join(r for r in reasons if r)[:300]
    return cause[:300]
