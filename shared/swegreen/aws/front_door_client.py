"""A client of the pipeline's front door (infra/front_door.py): send a predictions file,
start a run, read its state, fetch its leaderboard. Requests are signed with SigV4
(``iam``, credentials from the usual AWS chain) or carry an API key."""

from __future__ import annotations

import asyncio
import json
import random
import re
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from swegreen.aws.predictions_upload import DIRECT_LIMIT, checked
from swegreen.aws.run_request import RunRequest
from swegreen.core.errors import PredictionsError, SweGreenError
from swegreen.reports.publish import joined

JSON = "application/json"
NDJSON = "application/x-ndjson"
_REGION_IN_HOST = re.compile(r"\.execute-api\.([a-z0-9-]+)\.amazonaws\.com")


class FrontDoorError(SweGreenError):
    """The API refused a request or answered something unexpected."""


class FrontDoorSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    url: str = Field(description="the API's stage URL, e.g. https://abc.execute-api.../v1/")
    auth: Literal["iam", "api_key"] = "iam"
    region: str | None = Field(None, description="for SigV4; default: from the URL's host")
    api_key: str | None = Field(None, repr=False)
    exchange: Literal["green_agent", "pipeline"] = Field(
        "green_agent",
        description="who asks the participants for their patches: the green agent, where "
        "they are (then only the patches go to AWS), or the pipeline's Dispatch and Watch "
        "functions (the participants must then be reachable from AWS)",
    )
    poll_seconds: float = Field(15.0, gt=0)
    start_timeout: float = Field(
        600.0, gt=0, description="how long a run may take to appear before it counts as lost"
    )
    retry_attempts: int = Field(
        8, ge=1, description="tries of a request the API or the network fails for the moment"
    )
    retry_first: float = Field(1.0, ge=0, description="seconds before the first retry")
    retry_cap: float = Field(60.0, ge=0, description="longest wait between two tries")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"the API URL must be http(s): {value!r}")
        return value.rstrip("/") + "/"

    def signing_region(self) -> str:
        if self.region:
            return self.region
        m = _REGION_IN_HOST.search(self.url)
        if not m:
            raise FrontDoorError(
                f"cannot tell the AWS region of {self.url}; give it (--api-region)"
            )
        return m.group(1)


class FrontDoorClient:
    def __init__(self, settings: FrontDoorSettings, http: httpx.AsyncClient) -> None:
        if settings.auth == "api_key" and not settings.api_key:
            raise FrontDoorError("api_key auth needs a key (SWEGREEN_API_KEY)")
        self.settings = settings
        self.http = http

    async def start(self, request: dict[str, Any]) -> str:
        """POST /runs: the run's id. The request is checked here first, as the pipeline
        checks it: the API's own refusal says only "Invalid request body"."""
        try:
            RunRequest.model_validate(request)
        except ValidationError as exc:
            reasons = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
            raise FrontDoorError(f"POST /runs: not a request the API takes: {reasons}") from None
        body = json.dumps(request)
        answer = await self._send("POST", "runs", body)
        if answer.status_code != 202:
            raise FrontDoorError(f"POST /runs: {answer.status_code} {answer.text[:500]}")
        return str(answer.json()["run_id"])

    async def upload_predictions(self, text: str) -> str:
        """A predictions file into the stack's bucket: the key a run's ``patches`` names.
        Checked here first (the parser Resolve uses); sent in the request up to
        ``DIRECT_LIMIT`` (PUT /predictions, which checks it again), else straight to S3
        through a pre-signed PUT (POST /predictions/uploads), any size. A retried upload
        that had landed leaves one more file, never a second run."""
        try:
            checked(text)
        except PredictionsError as exc:
            raise FrontDoorError(f"not sent: {exc}") from None
        body = text.encode()
        if len(body) <= DIRECT_LIMIT:
            answer = await self._send("PUT", "predictions", text, content_type=NDJSON)
            if answer.status_code != 201:
                raise FrontDoorError(f"PUT /predictions: {answer.status_code} {answer.text[:500]}")
            return str(answer.json()["patches"])
        answer = await self._send("POST", "predictions/uploads", "{}")
        if answer.status_code != 201:
            raise FrontDoorError(
                f"POST /predictions/uploads: {answer.status_code} {answer.text[:500]}"
            )
        ticket = answer.json()
        for attempt in range(1, self.settings.retry_attempts + 1):
            try:  # the URL is the credential: no signature, no key
                put = await self.http.put(ticket["upload_url"], content=body)
            except httpx.TransportError:
                if attempt == self.settings.retry_attempts:
                    raise
                await asyncio.sleep(min(self.settings.retry_cap, 2.0**attempt))
                continue
            if put.status_code == 200:
                return str(ticket["patches"])
            if put.status_code not in RETRIED_STATUS or attempt == self.settings.retry_attempts:
                raise FrontDoorError(
                    f"upload to S3 ({len(body) / 1e6:.1f} MB): {put.status_code} {put.text[:300]}"
                )
            await asyncio.sleep(min(self.settings.retry_cap, 2.0**attempt))
        raise AssertionError("unreachable")

    async def run(self, run_id: str) -> dict[str, Any] | None:
        """GET /runs/{id}: state, rows done, record, leaderboard; None until it exists."""
        answer = await self._send("GET", f"runs/{run_id}")
        if answer.status_code == 404:
            return None
        if answer.status_code != 200:
            raise FrontDoorError(f"GET /runs/{run_id}: {answer.status_code} {answer.text[:500]}")
        state = answer.json()
        if "error" in state:
            state["error"] = failure_message(state["error"])
        return state

    async def stop(self, run_id: str) -> bool:
        """DELETE /runs/{id}: stop the run's execution (and its sandbox tasks); False when
        there is no such execution, or it has ended already."""
        answer = await self._send("DELETE", f"runs/{run_id}")
        if answer.status_code == 404:
            return False
        if answer.status_code != 202:
            raise FrontDoorError(f"DELETE /runs/{run_id}: {answer.status_code} {answer.text[:500]}")
        return True

    async def results(self, run_id: str) -> dict[str, Any]:
        """The published results.json, read page by page (GET /runs/{id}/results, then
        /results/2 ... as many as page 1 says)."""
        first = await self._page(run_id, "results")
        rest = [
            await self._page(run_id, f"results/{n}") for n in range(2, first.get("pages", 1) + 1)
        ]
        return joined([first, *rest])

    async def _page(self, run_id: str, path: str) -> dict[str, Any]:
        answer = await self._send("GET", f"runs/{run_id}/{path}")
        if answer.status_code != 200:
            raise FrontDoorError(
                f"GET /runs/{run_id}/{path}: {answer.status_code} {answer.text[:500]}"
            )
        return answer.json()

    async def _send(
        self, method: str, path: str, body: str | None = None, content_type: str = JSON
    ) -> httpx.Response:
        """The request, tried again while the API or the network fails for the moment
        (throttled, 5xx, a timeout, a dropped connection), with exponential backoff and
        jitter or the wait the API asks for (Retry-After), up to ``retry_attempts``. A
        start (POST) is tried again only where it surely did not reach the service (429,
        or no connection made): a second start after a lost answer would be a second run.
        The last answer is returned (its caller words the error); a network error that
        outlived the tries is raised."""
        safe = method != "POST"
        attempts = self.settings.retry_attempts
        for attempt in range(1, attempts + 1):
            wait: float | None = None
            try:
                answer = await self._send_once(method, path, body, content_type)
            except (httpx.ConnectError, httpx.ConnectTimeout):
                if attempt == attempts:
                    raise
            except (httpx.TimeoutException, httpx.TransportError):
                if not safe or attempt == attempts:
                    raise
            else:
                retried = answer.status_code == 429 or (
                    safe and answer.status_code in RETRIED_STATUS
                )
                if not retried or attempt == attempts:
                    return answer
                wait = retry_after(answer)
            backoff = min(self.settings.retry_cap, self.settings.retry_first * 2 ** (attempt - 1))
            await asyncio.sleep(wait if wait is not None else backoff * random.uniform(0.5, 1.0))
        raise AssertionError("unreachable")

    async def _send_once(
        self, method: str, path: str, body: str | None, content_type: str
    ) -> httpx.Response:
        url = self.settings.url + path
        headers = {"Content-Type": content_type, "Accept": JSON}
        if self.settings.auth == "api_key":
            assert self.settings.api_key is not None
            headers["x-api-key"] = self.settings.api_key
        else:
            headers = _sigv4(method, url, body, headers, self.settings.signing_region())
        return await self.http.request(method, url, content=body, headers=headers)


# Answers that say "not now" rather than "no": API Gateway's throttling and quota (429),
# a failed integration (500, 502), Step Functions or DynamoDB throttled behind it (503), a
# Lambda that timed out (504).
RETRIED_STATUS = frozenset({429, 500, 502, 503, 504})


def retry_after(answer: httpx.Response) -> float | None:
    """The seconds a Retry-After header asks for (at most 5 minutes), if it names some."""
    raw = answer.headers.get("Retry-After", "").strip()
    try:
        return min(max(float(raw), 0.0), 300.0) if raw else None
    except ValueError:
        return None


def _sigv4(
    method: str, url: str, body: str | None, headers: dict[str, str], region: str
) -> dict[str, str]:
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.session import Session

    credentials = Session().get_credentials()
    if credentials is None:
        raise FrontDoorError("no AWS credentials to sign API requests with (iam auth)")
    request = AWSRequest(method=method, url=url, data=body or "", headers=headers)
    SigV4Auth(credentials.get_frozen_credentials(), "execute-api", region).add_auth(request)
    return dict(request.headers.items())


def failure_message(cause: str) -> str:
    """A failed run's cause in a line: a Lambda's error document (type, message) becomes
    ``Type: message``; anything else is kept as it is."""
    try:
        doc = json.loads(cause)
    except ValueError:
        return cause
    if isinstance(doc, dict) and "errorMessage" in doc:
        kind = doc.get("errorType")
        return f"{kind}: {doc['errorMessage']}" if kind else str(doc["errorMessage"])
    return cause
