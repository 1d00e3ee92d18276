"""The aws backend's client settings and how it words a failed run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from swegreen.aws.front_door_client import FrontDoorError, FrontDoorSettings, failure_message


def test_the_signing_region_comes_from_the_api_host_unless_given() -> None:
    url = "https://abc123.execute-api.eu-west-3.amazonaws.com/v1"
    settings = FrontDoorSettings(url=url)
    assert settings.url.endswith("/v1/")
    assert settings.signing_region() == "eu-west-3"
    assert FrontDoorSettings(url=url, region="us-east-2").signing_region() == "us-east-2"
    with pytest.raises(FrontDoorError, match="--api-region"):
        FrontDoorSettings(url="http://127.0.0.1:4566/restapis/x/v1/").signing_region()


@pytest.mark.parametrize("field", [{"url": "ftp://x"}, {"url": "http://x", "poll_seconds": 0}])
def test_bad_settings_are_refused(field: dict) -> None:
    with pytest.raises(ValidationError):
        FrontDoorSettings(**field)


def test_a_lambda_error_document_becomes_one_line() -> None:
    doc = {"errorType": "DatasetError", "errorMessage": "no such file", "stackTrace": ["..."]}
    assert failure_message(json.dumps(doc)) == "DatasetError: no such file"
    assert failure_message("States.Timeout after 3600 s") == "States.Timeout after 3600 s"
    assert failure_message("[1, 2]") == "[1, 2]"


class ScriptedApi:
    """An HTTP server on 127.0.0.1 standing for the API: answers each request with the
    next of ``script`` (status, or "drop": the connection closed without an answer), then
    200 with ``{"state": "running"}``; records (method, path) of every request."""

    def __init__(self, script: list[int | str], body: dict | None = None) -> None:
        import contextlib
        import http.server

        from tests.helpers import http_server

        self.script = list(script)
        self.body = body
        self.bodies: list[bytes] = []
        self.seen: list[tuple[str, str]] = []
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                api.bodies.append(self.rfile.read(length))
                api.seen.append((self.command, self.path))
                step = api.script.pop(0) if api.script else 200
                if step == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                blob = json.dumps(api.body or {"state": "running", "run_id": "r1"}).encode()
                self.send_response(int(step))
                if step == 429:
                    self.send_header("Retry-After", "0")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(blob)))
                self.end_headers()
                self.wfile.write(blob)

            do_GET = do_POST = do_DELETE = do_PUT = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.stack = contextlib.ExitStack()
        self.url = self.stack.enter_context(http_server(Handler)) + "/v1/"

    def close(self) -> None:
        self.stack.close()


def client_for(url: str, **settings: object):
    import httpx

    from swegreen.aws.front_door_client import FrontDoorClient

    fast = {"retry_first": 0.01, "retry_cap": 0.05, "auth": "api_key", "api_key": "k"}
    return FrontDoorClient(
        FrontDoorSettings(url=url, **{**fast, **settings}), httpx.AsyncClient(timeout=5)
    )


def test_a_read_outlives_throttling_and_service_errors() -> None:
    import asyncio

    api = ScriptedApi([429, 503, 502, 504, 500])
    try:
        state = asyncio.run(client_for(api.url).run("r1"))
    finally:
        api.close()
    assert state == {"state": "running", "run_id": "r1"}
    assert api.seen == [("GET", "/v1/runs/r1")] * 6


def test_a_read_gives_up_after_its_tries_with_the_api_s_answer() -> None:
    import asyncio

    api = ScriptedApi([503] * 10)
    try:
        with pytest.raises(FrontDoorError, match="503"):
            asyncio.run(client_for(api.url, retry_attempts=3).run("r1"))
    finally:
        api.close()
    assert len(api.seen) == 3


def test_a_start_is_tried_again_only_where_it_surely_did_not_start_a_run() -> None:
    """Throttled (429: API Gateway refused it): tried again. A 502 or a lost answer may
    come after the execution started: not tried again (that would start a second run)."""
    import asyncio

    import httpx

    throttled = ScriptedApi([429, 429, 202], body={"run_id": "r1"})
    failed = ScriptedApi([502])
    dropped = ScriptedApi(["drop"])
    try:
        assert asyncio.run(client_for(throttled.url).start({"patches": "gold"})) == "r1"
        with pytest.raises(FrontDoorError, match="502"):
            asyncio.run(client_for(failed.url).start({"patches": "gold"}))
        with pytest.raises(httpx.HTTPError):
            asyncio.run(client_for(dropped.url).start({"patches": "gold"}))
    finally:
        for api in (throttled, failed, dropped):
            api.close()
    assert throttled.seen == [("POST", "/v1/runs")] * 3
    assert failed.seen == dropped.seen == [("POST", "/v1/runs")]


def test_a_connection_that_cannot_be_made_is_tried_again_then_raised() -> None:
    import asyncio
    import socket

    import httpx

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(httpx.ConnectError):
        asyncio.run(client_for(f"http://127.0.0.1:{port}/v1/", retry_attempts=2).run("r1"))


def test_an_assessment_whose_api_fails_stops_the_runs_it_started(tmp_path) -> None:
    """Two participants: the first run starts, the second start is refused (the API's
    400): the assessment fails, and the first run is stopped rather than left billing."""
    import asyncio

    from swegreen.agent.assessment import AgentSettings, AssessmentFailed
    from swegreen.agent.remote import RemoteAssessment
    from swegreen.agent.request import AssessmentRequest
    from swegreen.evaluation.settings import LocalSettings

    api = ScriptedApi([202, 400, 202], body={"run_id": "r1", "state": "cancelled"})
    settings = AgentSettings(
        local=LocalSettings(output_dir=tmp_path, cache_dir=tmp_path),
        front_door=FrontDoorSettings(
            url=api.url,
            auth="api_key",
            api_key="k",
            retry_first=0.01,
            retry_cap=0.05,
            exchange="pipeline",
        ),
    )
    request = AssessmentRequest(participants={"a": "http://127.0.0.1:9/", "b": "http://b/"})

    async def notify(message: str) -> None:
        pass

    try:
        with pytest.raises(AssessmentFailed, match="400"):
            asyncio.run(RemoteAssessment(settings, request, notify).run())
    finally:
        api.close()
    assert api.seen[:3] == [("POST", "/v1/runs"), ("POST", "/v1/runs"), ("DELETE", "/v1/runs/r1")]


def test_predictions_are_uploaded_and_a_throttled_upload_is_tried_again() -> None:
    import asyncio

    api = ScriptedApi([429, 201], body={"patches": "predictions/uploads/abc"})
    try:
        key = asyncio.run(client_for(api.url).upload_predictions(GOOD_LINE + "\n"))
    finally:
        api.close()
    assert key == "predictions/uploads/abc"
    assert api.seen == [("PUT", "/v1/predictions")] * 2


def test_a_malformed_predictions_file_is_refused_before_it_is_sent() -> None:
    import asyncio

    api = ScriptedApi([201], body={"patches": "k"})
    try:
        with pytest.raises(FrontDoorError, match=r"not sent: .*:2: not valid JSON"):
            asyncio.run(client_for(api.url).upload_predictions(GOOD_LINE + "\n{oops\n"))
    finally:
        api.close()
    assert api.seen == []


GOOD_LINE = json.dumps({"instance_id": "a__b-1", "model_patch": "", "model_name_or_path": "m"})


def test_a_predictions_file_too_large_for_the_api_goes_straight_to_s3() -> None:
    """Over what a request through the API takes: a pre-signed PUT asked for, then the
    file sent to that URL alone (no signature: the URL is the credential); a refused
    upload is an error, not a key."""
    import asyncio

    from swegreen.aws.predictions_upload import DIRECT_LIMIT

    big = json.dumps(
        {"instance_id": "a__b-1", "model_patch": "", "padding": "x" * (DIRECT_LIMIT + 1)}
    )
    s3 = ScriptedApi([200])
    api = ScriptedApi(
        [201], body={"patches": "predictions/uploads/r1", "upload_url": s3.url + "put?sig=1"}
    )
    try:
        key = asyncio.run(client_for(api.url).upload_predictions(big + "\n"))
        assert key == "predictions/uploads/r1"
        assert api.seen == [("POST", "/v1/predictions/uploads")]
        assert s3.seen == [("PUT", "/v1/put?sig=1")]
        refusing = ScriptedApi([403])
        api.script = [201]
        api.body = {"patches": "k", "upload_url": refusing.url + "put"}
        try:
            with pytest.raises(FrontDoorError, match=r"upload to S3 .*: 403"):
                asyncio.run(client_for(api.url).upload_predictions(big + "\n"))
        finally:
            refusing.close()
    finally:
        api.close()
        s3.close()
    small = ScriptedApi([201], body={"patches": "predictions/uploads/r2"})
    try:
        assert asyncio.run(client_for(small.url).upload_predictions(GOOD_LINE)) == (
            "predictions/uploads/r2"
        )
        assert small.seen == [("PUT", "/v1/predictions")]
    finally:
        small.close()


def test_a_pipeline_that_grades_other_rows_than_the_participant_saw_is_not_published(
    tmp_path,
) -> None:
    """The green agent's exchange: the run's dataset digest must be the one whose rows the
    participant was shown, or the assessment fails."""
    import asyncio

    from swegreen.agent.assessment import AgentSettings, AssessmentFailed
    from swegreen.agent.remote import RemoteAssessment
    from swegreen.agent.request import AssessmentRequest
    from swegreen.core.config import EvalConfig
    from swegreen.evaluation.settings import LocalSettings
    from swegreen.sample import SAMPLE_DATASET

    settings = AgentSettings(
        local=LocalSettings(output_dir=tmp_path, cache_dir=tmp_path),
        front_door=FrontDoorSettings(url="http://127.0.0.1:9/v1/", auth="api_key", api_key="k"),
    )
    request = AssessmentRequest(participants={"a": "http://127.0.0.1:9/"})

    async def notify(message: str) -> None:
        pass

    remote = RemoteAssessment(
        settings, request, notify, EvalConfig(dataset=SAMPLE_DATASET, max_rows=1)
    )
    said = asyncio.run(remote.prepare())
    assert "asking a for 1 instance(s)" in said
    _, dataset, _ = remote._rows
    remote._same_rows("a", "r1", {"run": {"dataset_digest": dataset.digest}})  # the same: fine
    with pytest.raises(AssessmentFailed, match="upload the green agent's copy"):
        remote._same_rows("a", "r1", {"run": {"dataset_digest": "0" * 64}})


def test_the_aws_backend_is_configured_by_flags_or_by_the_environment() -> None:
    """What an Amber manifest sets (SWEGREEN_*), what a flag overrides, and a clear error
    without the API's URL."""
    import argparse

    from swegreen.cli.serve import front_door_settings
    from swegreen.core.errors import ConfigError

    flags = argparse.Namespace(
        api_url=None, api_auth=None, api_region=None, api_poll=15.0, exchange=None
    )
    env = {"SWEGREEN_API_URL": "https://x.execute-api.eu-west-3.amazonaws.com/v1"}
    settings = front_door_settings(flags, {**env, "SWEGREEN_API_KEY": "k"})
    assert (settings.auth, settings.exchange, settings.signing_region()) == (
        "api_key",
        "green_agent",
        "eu-west-3",
    )
    assert front_door_settings(flags, env).auth == "iam"  # no key: SigV4
    given = argparse.Namespace(**{**vars(flags), "exchange": "pipeline", "api_auth": "iam"})
    assert front_door_settings(given, {**env, "SWEGREEN_API_KEY": "k"}).exchange == "pipeline"
    with pytest.raises(ConfigError, match=r"--api-url or \$SWEGREEN_API_URL"):
        front_door_settings(flags, {})
    with pytest.raises(ConfigError, match="green_agent"):
        front_door_settings(flags, {**env, "SWEGREEN_EXCHANGE": "nobody"})


def test_patches_whose_upload_fails_are_kept_and_graded_later_without_asking_again(
    tmp_path, session_cache
) -> None:
    """The participant's patches are on disk before the upload starts: an API that
    refuses it fails the assessment with the file and the command that sends it again;
    that command (`swegreen upload-predictions --start`) sends the same bytes and starts
    the run with the config kept beside them."""
    import asyncio
    import subprocess
    import sys

    from swegreen.agent.assessment import AgentSettings, AssessmentFailed
    from swegreen.agent.remote import RemoteAssessment
    from swegreen.agent.request import AssessmentRequest
    from swegreen.core.config import EvalConfig
    from swegreen.core.ports import PatchResult
    from swegreen.evaluation.settings import LocalSettings
    from swegreen.sample import SAMPLE_DATASET

    refusing = ScriptedApi([500] * 3)
    settings = AgentSettings(
        local=LocalSettings(output_dir=tmp_path, cache_dir=session_cache),
        front_door=FrontDoorSettings(
            url=refusing.url, auth="api_key", api_key="k", retry_attempts=3,
            retry_first=0.01, retry_cap=0.05,
        ),
    )  # fmt: skip
    request = AssessmentRequest(participants={"a": "http://127.0.0.1:9/"})

    async def notify(message: str) -> None:
        pass

    class Answered(RemoteAssessment):
        """The participant's answers as an exchange returns them (what is tested is what
        happens to them after)."""

        async def _exchange(self, role, url, config, instances):  # type: ignore[no-untyped-def]
            return {i.instance_id: PatchResult("diff --git a/x b/x\n", role) for i in instances}

    remote = Answered(settings, request, notify, EvalConfig(dataset=SAMPLE_DATASET, max_rows=2))
    asyncio.run(remote.prepare())
    try:
        with pytest.raises(AssessmentFailed) as failed:
            asyncio.run(remote.run())
    finally:
        refusing.close()
    said = str(failed.value)
    assert "2 patch(es) could not be sent" in said and "PUT /predictions: 500" in said
    kept = Path(said.split("kept at ")[1].split(";")[0])
    assert kept.is_file() and kept.parent == tmp_path / "aws-predictions"
    assert f"swegreen upload-predictions {kept} --api-url {refusing.url} --start" in said
    lines = kept.read_text().splitlines()
    assert [json.loads(x)["model_name_or_path"] for x in lines] == ["a", "a"]
    taking = ScriptedApi([201, 202], body={"patches": "predictions/uploads/r9", "run_id": "r9"})
    try:
        done = subprocess.run(
            [sys.executable, "-m", "swegreen", "upload-predictions", str(kept),
             "--api-url", taking.url, "--start"],
            env={**os.environ, "SWEGREEN_API_KEY": "k"},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        taking.close()
    assert done.returncode == 0, done.stdout + done.stderr
    assert taking.seen == [("PUT", "/v1/predictions"), ("POST", "/v1/runs")]
    assert "patches predictions/uploads/r9" in done.stdout and "started run r9" in done.stdout
    assert taking.bodies[0] == kept.read_bytes()
    started = json.loads(taking.bodies[1])
    assert started["patches"] == "predictions/uploads/r9"
    assert started["config"]["max_rows"] == -1 and len(started["config"]["instance_ids"]) == 2


def test_the_green_agents_aws_backend_imports_without_an_aws_sdk() -> None:
    """The green agent's image has no boto3 or botocore (the platform check found the
    client importing the pipeline's package, which does): the aws backend's modules
    import without them (api_key auth needs none; SigV4 imports botocore when it signs)."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('botocore', 'boto3'):\n"
        "            raise ImportError('no ' + name + ' in the green image')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import swegreen.agent.remote, swegreen.aws.front_door_client\n"
        "import swegreen.aws.predictions_upload, swegreen.aws.run_request\n"
        "print('imported')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "imported", done.stderr[-2000:]


def test_upload_predictions_names_a_bad_config_before_sending(tmp_path: Path) -> None:
    import subprocess
    import sys

    kept = tmp_path / "a-1.jsonl"
    kept.write_text(GOOD_LINE + "\n")
    kept.with_suffix(".config.json").write_text("{not json")
    done = subprocess.run(
        [sys.executable, "-m", "swegreen", "upload-predictions", str(kept),
         "--api-url", "http://127.0.0.1:9/v1/", "--start"],
        env={**os.environ, "SWEGREEN_API_KEY": "k"}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{kept.with_suffix('.config.json')} is not JSON" in done.stdout + done.stderr
