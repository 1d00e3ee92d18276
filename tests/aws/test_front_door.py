"""The front door in LocalStack (see localstack.py): the real API Gateway mapping templates
and request validation, Step Functions started by the API, run state read back from
DynamoDB and results from S3, and the green agent's ``aws`` backend driving all of it over
HTTP as an AgentBeats assessment would. Sandbox tasks cannot run here (no ECS in LocalStack
community), so every row ends ``error``; verdicts are test_pipeline_e2e.py's job."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from swegreen.aws.front_door_client import FrontDoorClient, FrontDoorSettings
from swegreen.aws.pipeline import ExecutionStopped, StartEvent
from swegreen.core.stop_rule import EVALUATOR_REASONS
from swegreen.reports.publish import pages
from swegreen.sample import SampleBenchmark
from tests.aws.conftest import STACK
from tests.aws.local_services import FAKE_CREDENTIALS
from tests.aws.localstack import LocalStack
from tests.helpers import Server, start
from tests.private_network import PRIVATE_HOST, ForwardProxy, forward_proxy
from tests.test_agent import assess


@dataclass
class Deployed:
    localstack: LocalStack
    outputs: dict[str, str]
    api: str
    sample: SampleBenchmark

    @property
    def bucket(self) -> str:
        return self.outputs["BucketName"]

    def config(self, **extra: Any) -> dict[str, Any]:
        return {
            "dataset": f"s3://{self.bucket}/datasets/sample.jsonl",
            "repo_url_template": self.sample.url_template,
            "max_rows": 2,
            **extra,
        }

    def follow(self, run_id: str, timeout: float = 300.0) -> dict[str, Any]:
        """GET /runs/{id} until the run is no longer running."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = httpx.get(f"{self.api}runs/{run_id}", timeout=30)
            if answer.status_code == 200 and answer.json()["state"] != "running":
                return answer.json()
            time.sleep(1.0)
        raise TimeoutError(f"run {run_id} still running after {timeout:g} s")


@pytest.fixture(scope="module")
def deployed(
    assembly: Path,
    lambda_python: Path,
    sample: SampleBenchmark,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployed]:
    with LocalStack(tmp_path_factory.mktemp("localstack"), lambda_python) as localstack:
        outputs = localstack.deploy(assembly, STACK)
        deployed = Deployed(localstack, outputs, localstack.api_url(outputs["ApiUrl"]), sample)
        localstack.client("s3").put_object(
            Bucket=deployed.bucket, Key="datasets/sample.jsonl", Body=sample.dataset.read_bytes()
        )
        yield deployed


@pytest.mark.parametrize(
    "body",
    [
        {"participants": {"agent": "ftp://example.org"}},
        {"participants": {"a": "http://a", "b": "http://b"}},
        {"patches": ""},
        {"config": {}, "extra": 1},
        {"config": "max_rows=2"},
        # over the deployment's ceilings (swegreen:guardrails, defaults)
        {"patches": "gold", "config": {"max_concurrent_rows": 201}},
        {"patches": "gold", "config": {"eval_timeout": 7201}},
        {"patches": "gold", "config": {"participant_timeout": 86400}},
    ],
)
def test_bad_requests_are_refused_at_the_gateway(deployed: Deployed, body: dict) -> None:
    answer = httpx.post(f"{deployed.api}runs", json=body, timeout=30)
    assert answer.status_code == 400, answer.text
    assert "Invalid request body" in answer.text


def test_an_unknown_run_is_404(deployed: Deployed) -> None:
    answer = httpx.get(f"{deployed.api}runs/no-such-run", timeout=30)
    assert answer.status_code == 404
    assert answer.json() == {"error": "no such run"}


def test_a_run_started_through_the_api_reports_progress_and_its_leaderboard(
    deployed: Deployed,
) -> None:
    answer = httpx.post(
        f"{deployed.api}runs", json={"patches": "gold", "config": deployed.config()}, timeout=30
    )
    assert answer.status_code == 202, answer.text
    run_id = answer.json()["run_id"]
    # The execution's input is exactly what the pipeline's first step validates.
    sfn = deployed.localstack.client("stepfunctions")
    execution = sfn.describe_execution(executionArn=answer.json()["execution_arn"])
    event = StartEvent.model_validate_json(execution["input"])
    assert (event.run_id, event.patches) == (run_id, "gold")
    assert event.config["max_rows"] == 2

    state = deployed.follow(run_id)
    assert state["state"] == "finished", state
    assert (state["done"], state["total"]) == (2, 2)
    assert state["run"]["run_id"] == run_id and state["run"]["instance_ids"] == []  # items apart
    board = state["leaderboard"]
    assert board["total_instances"] == 2
    # No ECS in LocalStack community: the sandbox step fails, Catch records error rows.
    assert board["counts"]["error"] == 2 and board["error_pct"] == 1.0
    published = httpx.get(f"{deployed.api}runs/{run_id}/results", timeout=30).json()
    (row,) = published["results"]
    assert {k: row[k] for k in board} == board
    assert {i["status"] for i in row["instances"]} == {"error"}
    assert [i["instance_id"] for i in row["instances"]] == sorted(deployed.sample.expected)[:2]
    assert all(i["error_kind"] == "infrastructure" for i in row["instances"]), row["instances"]
    deadline = time.monotonic() + 60  # the record is finished a step before the execution
    while (status := sfn.describe_execution(executionArn=execution["executionArn"])["status"]) == (
        "RUNNING"
    ) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert status == "SUCCEEDED"


def test_quotes_in_a_request_reach_the_execution_as_valid_json(deployed: Deployed) -> None:
    """API Gateway's escapeJavaScript writes ' as \\' (invalid JSON): the template undoes it."""
    key = 'predictions/it\'s "quoted".jsonl'
    config = deployed.config(notes='it\'s a "test"')
    answer = httpx.post(
        f"{deployed.api}runs",
        json={"patches": key, "config": config, "rebuild_envs": True},
        timeout=30,
    )
    assert answer.status_code == 202, answer.text
    sfn = deployed.localstack.client("stepfunctions")
    execution = sfn.describe_execution(executionArn=answer.json()["execution_arn"])
    event = StartEvent.model_validate_json(execution["input"])
    assert (event.patches, event.config["notes"], event.rebuild_envs) == (
        key,
        config["notes"],
        True,
    )
    # an unknown config key is the pipeline's to refuse, and it says which
    state = deployed.follow(event.run_id)
    assert state["state"] == "failed" and "notes" in state["error"], state


def test_a_malformed_predictions_file_is_refused_with_its_line_and_not_kept(
    deployed: Deployed,
) -> None:
    answer = httpx.put(
        f"{deployed.api}predictions",
        content='{"instance_id": "a__b-1", "model_patch": ""}\n{oops\n',
        headers={"Content-Type": "application/x-ndjson"},
        timeout=30,
    )
    assert answer.status_code == 400, answer.text
    assert "request body:2: not valid JSON" in answer.json()["error"]
    s3 = deployed.localstack.client("s3")
    kept = s3.list_objects_v2(Bucket=deployed.bucket, Prefix="predictions/uploads/")
    assert not [o for o in kept.get("Contents", []) if b"oops" in _body(s3, deployed, o)]


def _body(s3: Any, deployed: Deployed, listed: dict[str, Any]) -> bytes:
    return s3.get_object(Bucket=deployed.bucket, Key=listed["Key"])["Body"].read()


def test_a_predictions_file_larger_than_the_api_takes_goes_by_url_and_is_graded(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over 10 MB (API Gateway's own limit; a Verified run's patches with their accounts
    can be): the client asks for a pre-signed PUT and sends the file to S3 itself; the run
    that names its key reads it (Resolve) and grades its rows."""
    from swegreen.aws.predictions_upload import DIRECT_LIMIT

    ids = sorted(deployed.sample.expected)[:2]
    gold = {
        json.loads(line)["instance_id"]: json.loads(line)["patch"]
        for line in deployed.sample.dataset.read_text().splitlines()
    }
    pad = "x" * (max(DIRECT_LIMIT, 10_000_000) // 2 + 1)
    text = "".join(
        json.dumps({"instance_id": i, "model_patch": gold[i], "model_name_or_path": "big",
                    "padding": pad}) + "\n"
        for i in ids
    )  # fmt: skip
    assert len(text.encode()) > 10_000_000
    for name, value in FAKE_CREDENTIALS.items():  # the client signs (iam), as a user's does
        monkeypatch.setenv(name, value)

    async def send() -> tuple[str, str]:
        settings = FrontDoorSettings(url=deployed.api, region="us-east-1", poll_seconds=1)
        async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=120.0)) as http:
            client = FrontDoorClient(settings, http)
            key = await client.upload_predictions(text)
            config = deployed.config(instance_ids=ids, max_rows=-1)
            return key, await client.start({"patches": key, "config": config})

    key, run_id = asyncio.run(send())
    assert key.startswith("predictions/uploads/")
    s3 = deployed.localstack.client("s3")
    assert s3.head_object(Bucket=deployed.bucket, Key=key)["ContentLength"] == len(text.encode())
    state = deployed.follow(run_id)
    assert state["state"] == "finished", state
    assert (state["done"], state["total"]) == (2, 2)


def test_missing_results_are_404_with_a_reason(deployed: Deployed) -> None:
    answer = httpx.get(f"{deployed.api}runs/no-such-run/results", timeout=30)
    assert answer.status_code == 404, answer.text
    assert answer.json() == {"error": "no results for this run (yet), or no such page"}


def test_a_run_that_cannot_start_is_recorded_as_failed(deployed: Deployed) -> None:
    config = deployed.config(dataset=f"s3://{deployed.bucket}/datasets/missing.jsonl")
    answer = httpx.post(
        f"{deployed.api}runs", json={"patches": "gold", "config": config}, timeout=30
    )
    assert answer.status_code == 202, answer.text
    state = deployed.follow(answer.json()["run_id"])
    assert state["state"] == "failed"
    assert "missing.jsonl" in state["error"]


@pytest.fixture(scope="module")
def agents(
    deployed: Deployed, session_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Server]]:
    out = tmp_path_factory.mktemp("aws-backend")
    # the pipeline's Dispatch and Watch ask the participants (they are on 127.0.0.1 too)
    green_args = ["serve", "--backend", "aws", "--api-url", deployed.api, "--exchange", "pipeline"]
    green_args += ["--api-region", "us-east-1", "--api-poll", "1", "--no-diagnoses"]
    running: dict[str, Server] = {}
    try:
        running["green"] = start(green_args, session_cache, out, "green", FAKE_CREDENTIALS)
        gold = ["participant", "gold", "--dataset", "swegreen:sample"]
        running["gold"] = start(gold, session_cache, out, "gold")
        hang = ["participant", "scripted", "--mode", "hang"]
        running["hang"] = start(hang, session_cache, out, "hang")
        yield running
    finally:
        for server in running.values():
            server.proc.terminate()
            with contextlib.suppress(Exception):
                server.proc.wait(timeout=10)


@contextlib.contextmanager
def watching(deployed: Deployed) -> Iterator[None]:
    """The Watch function called every second, not at its schedule's minute: the rows that
    wait on a participant are handed back as soon as it has answered."""
    lam = deployed.localstack.client("lambda")
    (name,) = [
        f["FunctionName"] for f in lam.list_functions()["Functions"] if "Watch" in f["FunctionName"]
    ]
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(1.0):
            lam.invoke(FunctionName=name, Payload=b"{}")

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=60)


def test_the_green_agent_fans_an_assessment_out_to_the_pipeline(
    deployed: Deployed, agents: dict[str, Server]
) -> None:
    # LocalStack has no ECS: every row is an infrastructure error, which the stop rule
    # would refuse to publish (the next test); here the user accepts them
    config = deployed.config(max_evaluator_error_share=1)
    request = {"participants": {"gold": agents["gold"].url}, "config": config}
    with watching(deployed):
        outcome = asyncio.run(assess(agents["green"].url, json.dumps(request)))
    assert outcome.state == "TASK_STATE_COMPLETED", outcome.statuses
    said = "\n".join(outcome.statuses)
    assert "gold: started run" in said
    assert "gold: 2/2 rows done on AWS" in said
    row = outcome.rows["gold"]
    assert row["total_instances"] == 2
    assert row["provenance"]["pipeline"] == "aws"
    # The participant was asked over A2A by the pipeline's Dispatch step.
    assert [i["model_name_or_path"] for i in row["instances"]] == ["gold", "gold"]
    assert any("gold: 0/2 resolved" in text for text in outcome.texts)


def test_rows_that_fail_for_the_evaluators_reasons_stop_the_assessment_unpublished(
    deployed: Deployed, agents: dict[str, Server]
) -> None:
    """The stop rule on the aws backend: the run's record counts the rows that failed for
    the evaluator's own reasons (GET /runs/{id}: ``evaluator_failures``, the first one's
    reason); the green agent reads it, stops the runs and fails the task, no artifact."""
    request = {"participants": {"gold": agents["gold"].url}, "config": deployed.config()}
    with watching(deployed):
        outcome = asyncio.run(assess(agents["green"].url, json.dumps(request)))
    assert outcome.state == "TASK_STATE_FAILED", outcome.statuses
    assert not outcome.artifacts
    said = outcome.statuses[-1]
    # after the first row (1 of 2 is past 10%) or both, as the polls fall
    assert "gold: stopped after " in said and "for the evaluator's own reasons" in said, said
    assert "0 row(s) were graded" in said and "no score is published" in said
    run_id = next(
        line.split("started run ")[1].strip()
        for line in outcome.statuses
        if "gold: started run" in line
    )
    state = deployed.follow(run_id)  # stopped, or finished first
    assert state["state"] in ("cancelled", "failed", "finished"), state
    assert state["evaluator_failures"] >= 1, state
    reason = state["first_failure"].split(":")[0]
    assert reason in {r.value for r in EVALUATOR_REASONS}, state["first_failure"]


def test_the_green_agent_reports_a_failed_run_as_a_failed_task(
    deployed: Deployed, agents: dict[str, Server]
) -> None:
    config = deployed.config(dataset=f"s3://{deployed.bucket}/datasets/missing.jsonl")
    request = {"participants": {"gold": agents["gold"].url}, "config": config}
    outcome = asyncio.run(assess(agents["green"].url, json.dumps(request)))
    assert outcome.state == "TASK_STATE_FAILED"
    assert "missing.jsonl" in outcome.statuses[-1]


def _start_hanging_run(deployed: Deployed, hang: Server) -> dict[str, str]:
    request = {
        "participants": {"agent": hang.url},
        "config": deployed.config(max_rows=1, participant_timeout=600),
    }
    started = httpx.post(f"{deployed.api}runs", json=request, timeout=30).json()
    deadline = time.monotonic() + 120
    while httpx.get(f"{deployed.api}runs/{started['run_id']}", timeout=30).status_code == 404:
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(1.0)
    return started


def _ended_as_recorded(deployed: Deployed, execution_arn: str, state: dict[str, Any]) -> None:
    """The execution has ended, and the run's record says how: AWS reports a stopped
    execution ABORTED (-> "cancelled"); LocalStack 2026.3 fails it with a States.Runtime
    error when it is stopped inside a Map (-> "failed", with that cause)."""
    described = deployed.localstack.client("stepfunctions").describe_execution(
        executionArn=execution_arn
    )
    assert described["status"] in ("ABORTED", "FAILED"), described["status"]
    if described["status"] == "ABORTED":
        # the cause DELETE gives (stop_execution.vtl) as the execution reports it; LocalStack
        # 2026.3 reports none, and its status event carries none either
        cause = described.get("cause") or "no reason given"
        assert cause in ("cancelled through the API", "no reason given"), cause
        expected = ("cancelled", f"the execution was stopped: {cause}")
    else:
        expected = ("failed", described.get("cause") or described["error"])
    assert (state["state"], state["error"]) == expected


def test_how_an_execution_ended_is_the_runs_state() -> None:
    """What GET /runs/{id} says of an execution that ended unfinished (the Stopped step)."""
    ended = {
        ("ABORTED", None, "cancelled through the API"): (
            "cancelled",
            "the execution was stopped: cancelled through the API",
        ),
        ("ABORTED", None, None): ("cancelled", "the execution was stopped: no reason given"),
        ("TIMED_OUT", None, None): ("failed", "the execution timed out"),
        ("FAILED", "States.Runtime", "a Map was stopped"): ("failed", "a Map was stopped"),
        ("FAILED", "States.Runtime", None): ("failed", "States.Runtime"),
        ("FAILED", None, None): ("failed", "the execution failed"),
    }
    for (status, error, cause), state in ended.items():
        stopped = ExecutionStopped(name="r", status=status, error=error, cause=cause)
        assert stopped.run_state() == state


def test_a_run_is_cancelled_through_the_api(deployed: Deployed, agents: dict[str, Server]) -> None:
    assert httpx.delete(f"{deployed.api}runs/no-such-run", timeout=30).status_code == 404
    started = _start_hanging_run(deployed, agents["hang"])
    answer = httpx.delete(f"{deployed.api}runs/{started['run_id']}", timeout=30)
    assert answer.status_code == 202, answer.text
    assert answer.json() == {"run_id": started["run_id"], "state": "cancelling"}
    state = deployed.follow(started["run_id"], timeout=120)
    _ended_as_recorded(deployed, started["execution_arn"], state)


def test_a_stopped_execution_marks_its_run_cancelled_once(
    deployed: Deployed, agents: dict[str, Server]
) -> None:
    """The Stopped function on the event AWS sends for a stopped execution; a later event
    for the same run (here LocalStack's, after DELETE) never overwrites the first."""
    started = _start_hanging_run(deployed, agents["hang"])
    event = {
        "version": "0",
        "id": "e1",
        "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states",
        "account": "000000000000",
        "time": "2026-11-22T00:00:00Z",
        "region": "us-east-1",
        "resources": [started["execution_arn"]],
        "detail": {"name": started["run_id"], "status": "ABORTED", "cause": "by a test"},
    }
    lam = deployed.localstack.client("lambda")
    (name,) = [
        f["FunctionName"]
        for f in lam.list_functions()["Functions"]
        if "Stopped" in f["FunctionName"]
    ]
    answer = lam.invoke(FunctionName=name, Payload=json.dumps(event).encode())
    assert "FunctionError" not in answer, answer["Payload"].read()
    assert json.loads(answer["Payload"].read())["changed"] is True
    state = httpx.get(f"{deployed.api}runs/{started['run_id']}", timeout=30).json()
    assert (state["state"], state["error"]) == ("cancelled", "the execution was stopped: by a test")
    assert httpx.delete(f"{deployed.api}runs/{started['run_id']}", timeout=30).status_code == 202
    deadline = time.monotonic() + 60
    sfn = deployed.localstack.client("stepfunctions")
    while sfn.describe_execution(executionArn=started["execution_arn"])["status"] == "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(1.0)
    # the execution's own status event reaches the Stopped function: its second call
    while _stopped_calls(deployed, started["run_id"]) < 2:
        assert time.monotonic() < deadline + 60, "the status event never reached Stopped"
        time.sleep(1.0)
    again = httpx.get(f"{deployed.api}runs/{started['run_id']}", timeout=30).json()
    assert (again["state"], again["error"]) == ("cancelled", "the execution was stopped: by a test")


def _stopped_calls(deployed: Deployed, run_id: str) -> int:
    """How often the Stopped function has handled ``run_id`` (its log lines)."""
    logs = deployed.localstack.client("logs")
    groups = [
        g["logGroupName"]
        for g in logs.describe_log_groups()["logGroups"]
        if "Stopped" in g["logGroupName"]
    ]
    calls = 0
    for group in groups:
        events = logs.filter_log_events(logGroupName=group)["events"]
        calls += sum(1 for e in events if "run stopped" in e["message"] and run_id in e["message"])
    return calls


def test_cancelling_the_assessment_cancels_its_runs(
    deployed: Deployed, agents: dict[str, Server]
) -> None:
    request = {
        "participants": {"hang": agents["hang"].url},
        "config": deployed.config(max_rows=1, participant_timeout=600),
    }
    outcome = asyncio.run(assess(agents["green"].url, json.dumps(request), "started run"))
    assert outcome.state == "TASK_STATE_CANCELED"
    (said,) = [s for s in outcome.statuses if "started run" in s]
    run_id = said.rsplit(" ", 1)[-1]
    machine = deployed.outputs["StateMachineArn"]
    arn = machine.replace(":stateMachine:", ":execution:") + f":{run_id}"
    # First what the green agent did: the execution itself is stopped ...
    sfn = deployed.localstack.client("stepfunctions")
    deadline = time.monotonic() + 300
    while (status := sfn.describe_execution(executionArn=arn)["status"]) == "RUNNING":
        assert time.monotonic() < deadline, "cancelling the assessment left its execution running"
        time.sleep(1.0)
    # ... then what the pipeline did with it: the run's record says so
    state = deployed.follow(run_id, timeout=120)
    assert status in ("ABORTED", "FAILED"), status
    _ended_as_recorded(deployed, arn, state)


def test_a_dry_run_answers_with_its_estimate_and_evaluates_nothing(deployed: Deployed) -> None:
    answer = httpx.post(
        f"{deployed.api}runs",
        json={"patches": "gold", "config": deployed.config(), "dry_run": True},
        timeout=30,
    )
    assert answer.status_code == 202, answer.text
    run_id = answer.json()["run_id"]
    state = deployed.follow(run_id)
    assert state["state"] == "estimated", state.get("error")
    estimate = state["run"]["provenance"]["estimate"]
    assert estimate["rows"] == 2
    assert 0 < estimate["optimistic"]["wall_minutes"] <= estimate["pessimistic"]["wall_minutes"]
    sfn = deployed.localstack.client("stepfunctions")
    deadline = time.monotonic() + 60  # the record is estimated a step before the end
    while (execution := sfn.describe_execution(executionArn=answer.json()["execution_arn"]))[
        "status"
    ] == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert execution["status"] == "SUCCEEDED", execution
    history = sfn.get_execution_history(executionArn=execution["executionArn"])["events"]
    entered = {
        e["stateEnteredEventDetails"]["name"] for e in history if "stateEnteredEventDetails" in e
    }
    assert "Estimated" in entered and not entered & {"Builds", "Prepares", "RowsPhase"}
    listed = deployed.localstack.client("s3").list_objects_v2(
        Bucket=deployed.bucket, Prefix=f"runs/{run_id}/"
    )
    assert listed["KeyCount"] == 0


def test_results_larger_than_a_response_are_read_page_by_page(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages as Aggregate writes them, served by the API's S3 integrations, joined by the
    client into the results.json they were cut from (over API Gateway's 10 MB)."""
    from tests.aws.test_estimate import _big_results

    document = _big_results(10_000, deployed.sample)
    s3 = deployed.localstack.client("s3")
    for page in pages(document):
        s3.put_object(
            Bucket=deployed.bucket,
            Key=f"runs/big/results/{page['page']}.json",
            Body=json.dumps(page).encode(),
        )
    first = httpx.get(f"{deployed.api}runs/big/results", timeout=60).json()
    assert first["page"] == 1 and first["pages"] > 1
    missing = httpx.get(f"{deployed.api}runs/big/results/{first['pages'] + 1}", timeout=30)
    assert missing.status_code == 404
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)

    async def read() -> dict[str, Any]:
        settings = FrontDoorSettings(url=deployed.api, region="us-east-1")
        async with httpx.AsyncClient(timeout=60) as http:
            return await FrontDoorClient(settings, http).results("big")

    assert asyncio.run(read()) == document


# --------------------------------------------- the green agent asks, the pipeline grades
SHARED_NAME = "swegreen/sample"  # a hub-style name: the green agent's snapshot, the bucket's copy


@dataclass
class GreenSide:
    green: Server
    participant: str  # its URL: a host only the green agent's proxy reaches
    proxy: ForwardProxy


@pytest.fixture(scope="module")
def green_side(
    deployed: Deployed, session_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GreenSide]:
    """The AgentBeats setting: the green agent (default exchange) reaches its participant
    through a proxy of its own; the participant's host resolves nowhere else. The dataset
    is the same file on both sides under one name: the green agent's snapshot (as the
    green-docker image keeps Verified), the pipeline's upload."""
    out = tmp_path_factory.mktemp("green-side")
    data = deployed.sample.dataset.read_bytes()
    snapshots = out / "datasets"
    snapshots.mkdir()
    (snapshots / "sample.jsonl").write_bytes(data)
    index = [
        {
            "name": SHARED_NAME,
            "split": "test",
            "revision": None,
            "file": "sample.jsonl",
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    ]
    (snapshots / "index.json").write_text(json.dumps(index))
    deployed.localstack.client("s3").put_object(
        Bucket=deployed.bucket, Key="datasets/swegreen__sample/test.jsonl", Body=data
    )
    running: list[Server] = []
    with forward_proxy() as proxy:
        try:
            gold = ["participant", "gold", "--dataset", "swegreen:sample"]
            participant = start(gold, session_cache, out, "gold", advertise=PRIVATE_HOST)
            running.append(participant)
            env = {
                **FAKE_CREDENTIALS,
                **proxy.env(),
                "SWEGREEN_DATASET_SNAPSHOTS": str(snapshots),
                # the scenario's way: the backend and its API named in the environment
                "SWEGREEN_BACKEND": "aws",
                "SWEGREEN_API_URL": deployed.api,
                "SWEGREEN_API_REGION": "us-east-1",
            }
            serve = ["serve", "--api-poll", "1", "--no-diagnoses"]
            green = start(serve, session_cache, out, "green", env)
            running.append(green)
            port = participant.url.rstrip("/").rsplit(":", 1)[1]
            yield GreenSide(green, f"http://{PRIVATE_HOST}:{port}/", proxy)
        finally:
            for server in running:
                server.proc.terminate()
                with contextlib.suppress(Exception):
                    server.proc.wait(timeout=10)


def test_the_green_agent_asks_participants_aws_cannot_reach_and_sends_only_patches(
    deployed: Deployed, green_side: GreenSide
) -> None:
    """The default exchange: the green agent asks the participant (through its proxy), puts
    the patches with their accounts through PUT /predictions, and starts a run that grades
    that file; the pipeline is never given the participant's URL. LocalStack cannot run
    the sandbox tasks: the rows end ``error`` (accepted here), with the exchange kept."""
    # nothing but the green agent's proxy reaches it (no proxy in this process's env)
    with httpx.Client(trust_env=False) as plain, pytest.raises(httpx.ConnectError):
        plain.get(green_side.participant + ".well-known/agent-card.json", timeout=10)
    config = {
        "dataset": SHARED_NAME,
        "repo_url_template": deployed.sample.url_template,
        "max_rows": 2,
        "max_concurrent_rows": 2,
        "max_evaluator_error_share": 1,
    }
    request = {"participants": {"gold": green_side.participant}, "config": config}
    outcome = asyncio.run(assess(green_side.green.url, json.dumps(request)))
    assert outcome.state == "TASK_STATE_COMPLETED", outcome.statuses
    said = "\n".join(outcome.statuses)
    assert "asking gold for 2 instance(s) of swegreen/sample here" in said, said
    assert "(2/2 asked)" in said and "gold: 2 patch(es) sent (predictions/uploads/" in said
    # the participant was asked through the green agent's proxy: the card, then messages
    asked = [line for line in green_side.proxy.forwarded if line.startswith("POST")]
    assert len(asked) >= 2, green_side.proxy.forwarded
    key, kept = said.split("patch(es) sent (")[1].split(")")[0].split("; kept at ")
    run_id = said.split("gold: started run ")[1].split()[0]
    # what the pipeline was given: the file's key, never the participant
    state = httpx.get(f"{deployed.api}runs/{run_id}", timeout=30).json()
    assert state["run"]["patch_source"] == key, state["run"]
    assert PRIVATE_HOST not in json.dumps(state)
    uploaded = deployed.localstack.client("s3").get_object(Bucket=deployed.bucket, Key=key)
    sent = uploaded["Body"].read()
    # on disk before it left, beside the config that grades it (upload-predictions --start)
    assert Path(kept).read_bytes() == sent
    assert json.loads(Path(kept).with_suffix(".config.json").read_text())["max_rows"] == -1
    entries = [json.loads(line) for line in sent.decode().splitlines()]
    assert [e["model_name_or_path"] for e in entries] == ["gold", "gold"]
    assert all(e["model_patch"] and e["swegreen"]["duration"] > 0 for e in entries)
    # the rows keep the exchange the green agent had: who answered, in which dialect
    row = outcome.rows["gold"]
    assert row["total_instances"] == 2 and row["provenance"]["pipeline"] == "aws"
    for inst in row["instances"]:
        assert inst["model_name_or_path"] == "gold"
        assert inst["conversation"] and inst["conversation"].get("dialect"), inst
