"""The green agent end to end: real A2A servers on 127.0.0.1 (green agent, reference and
misbehaving participants), driven by an a2a-sdk 1.x client and by a genuine 0.3 client as
AgentBeats' runners use."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers import new_text_part
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Role,
    SendMessageRequest,
)
from google.protobuf.json_format import MessageToDict

from swegreen.sample import SampleBenchmark
from tests.helpers import Server, start, stop

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def servers(
    session_cache: Path, sample: SampleBenchmark, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Server]]:
    out = tmp_path_factory.mktemp("agents")
    specs = {
        "green": ["serve", "--heartbeat", "1", "--llm-mock-response", "MOCK DIAGNOSIS"],
        "gold": ["participant", "gold", "--dataset", "swegreen:sample"],
        "empty": ["participant", "empty"],
        "hang": ["participant", "scripted", "--mode", "hang"],
        "broken": ["participant", "scripted", "--mode", "http500"],
        "prose": ["participant", "scripted", "--mode", "prose"],
        "fenced": ["participant", "scripted", "--mode", "fenced", "--dataset", "swegreen:sample"],
    }
    running: dict[str, Server] = {}
    try:
        for name, args in specs.items():
            running[name] = start(args, session_cache, out, name)
        yield running
    finally:
        stop(running.values())


@dataclass
class Outcome:
    state: str = ""
    statuses: list[str] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    task_id: str = ""

    @property
    def rows(self) -> dict[str, dict[str, Any]]:
        return {
            p["data"]["participant"]: p["data"]
            for a in self.artifacts
            for p in a["parts"]
            if "data" in p
        }

    @property
    def texts(self) -> list[str]:
        return [p["text"] for a in self.artifacts for p in a["parts"] if "text" in p]


async def assess(
    url: str, request: dict[str, Any] | str, cancel_after: str | None = None
) -> Outcome:
    """Send one assessment with a 1.x client and follow its stream to the end."""
    outcome = Outcome()
    cancelled = False
    text = request if isinstance(request, str) else json.dumps(request)
    async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=300)) as http:
        client = await ClientFactory(
            ClientConfig(httpx_client=http, streaming=True)
        ).create_from_url(url)
        message = Message(
            role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[new_text_part(text)]
        )
        async for event in client.send_message(SendMessageRequest(message=message)):
            d = MessageToDict(event)
            if "task" in d:
                outcome.task_id = d["task"]["id"]
                outcome.state = d["task"]["status"]["state"]
            elif "statusUpdate" in d:
                status = d["statusUpdate"]["status"]
                outcome.state = status["state"]
                said = " ".join(
                    p.get("text", "") for p in status.get("message", {}).get("parts", [])
                )
                outcome.statuses.append(said)
                if cancel_after and cancel_after in said:
                    await client.cancel_task(CancelTaskRequest(id=outcome.task_id))
                    cancel_after, cancelled = None, True
            elif "artifactUpdate" in d:
                outcome.artifacts.append(d["artifactUpdate"]["artifact"])
        # A cancelled stream may close before its last status: ask for the task's own state
        # until it settles (the server owns the answer; the deadline only bounds a hang).
        # An agent grading on AWS says CANCELED only once it has stopped its runs: up to
        # remote.STOP_ATTEMPTS rounds of DELETE, a wait and GET per run, each request retried
        # by the client, which took over 120 s at a load of 6-10 (test_front_door's cancel).
        deadline = time.monotonic() + CANCEL_SETTLES_WITHIN
        while cancelled and outcome.state not in FINAL_STATES:
            if time.monotonic() > deadline:
                break
            task = MessageToDict(await client.get_task(GetTaskRequest(id=outcome.task_id)))
            outcome.state = task["status"]["state"]
            await asyncio.sleep(0.2)
    return outcome


CANCEL_SETTLES_WITHIN = 600.0  # seconds: a hang, not a slow machine
FINAL_STATES = {
    "TASK_STATE_COMPLETED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_FAILED",
    "TASK_STATE_REJECTED",
}


SAMPLE_CONFIG = {
    "dataset": "swegreen:sample",
    "max_rows": 2,
    "max_concurrent_rows": 2,
    "participant_timeout": 10,  # the hang waits it out (idle time)
}


def test_an_assessment_over_a2a_1_0_with_good_and_misbehaving_participants(servers) -> None:
    roles = ("gold", "empty", "hang", "broken", "prose")
    request = {"participants": {r: servers[r].url for r in roles}, "config": SAMPLE_CONFIG}
    outcome = asyncio.run(assess(servers["green"].url, request))

    assert outcome.state == "TASK_STATE_COMPLETED"
    assert len(outcome.artifacts) == 1
    rows = outcome.rows
    assert set(rows) == set(roles)

    def statuses(role: str) -> set[tuple[str, str]]:
        return {(i["status"], i["reason"]) for i in rows[role]["instances"]}

    assert statuses("gold") == {("resolved", "all_tests_pass")}
    assert statuses("empty") == {("no_op", "empty_patch")}
    assert statuses("hang") == {("no_op", "participant_timeout")}
    assert statuses("broken") == {("no_op", "participant_error")}
    assert statuses("prose") == {("no_op", "no_patch")}
    assert rows["gold"]["resolved_pct"] == 1.0 and rows["gold"]["total_instances"] == 2
    assert rows["hang"]["participant_failures"] == 2 and rows["broken"]["participant_failures"] == 2
    assert rows["prose"]["participant_failures"] == 0
    # why a participant failed travels with the published rows (the gateway keeps only them)
    for role, said in (
        ("hang", f"did not finish within {SAMPLE_CONFIG['participant_timeout']} s"),
        ("broken", "500 Internal Server Error"),
    ):
        details = [i["detail"] for i in rows[role]["instances"]]
        assert all(said in d for d in details), details

    gold = rows["gold"]
    for key in (
        "resolved_pct",
        "breaking_resolved_pct",
        "partially_resolved_pct",
        "work_in_progress_pct",
        "regression_pct",
        "no_op_pct",
        "error_pct",
        "fail_to_pass_passed_pct",
        "pass_to_pass_passed_pct",
        "green_agent_model",
        "counts",
        "fail_to_pass_total",
    ):
        assert key in gold
    instance = gold["instances"][0]
    for key in ("status", "reason", "f2p_passed", "p2p_total", "durations", "patch_bytes"):
        assert key in instance
    assert instance["participant_usage"] == {"prompt_tokens": 0.0, "completion_tokens": 0.0}
    provenance = gold["provenance"]
    assert provenance["grader"].startswith("swebench") and provenance["green_agent"].startswith(
        "swegreen"
    )
    assert provenance["dataset_digest"] and provenance["config"]["participant_timeout"] == 10
    assert provenance["time_plan"]["budget_minutes"] is None  # not sharded: no step to fit
    assert "dataset_revision" in provenance

    # the green agent's model explains what did not resolve, and only that
    assert {i.get("diagnosis") for i in rows["empty"]["instances"]} == {"MOCK DIAGNOSIS"}
    assert all(i.get("diagnosis") is None for i in gold["instances"])
    assert rows["empty"]["summary"] == "MOCK DIAGNOSIS"
    # a text summary, which must not parse as JSON (runners would take it for a result)
    [summary] = outcome.texts
    assert "gold: 2/2 resolved" in summary
    with pytest.raises(ValueError):
        json.loads(summary)
    # progress: per-instance starts and verdicts, and heartbeats while the hang ran
    assert any("started gold/sample__calculator-1" in s for s in outcome.statuses)
    assert any(s.startswith("gold/sample__calculator-1: resolved") for s in outcome.statuses)
    assert any(s.startswith("still working") for s in outcome.statuses)


def test_an_assessment_over_a2a_0_3_as_agentbeats_runs_it(servers, a2a03_python: Path) -> None:
    request = {
        "participants": {"gold": servers["gold"].url, "fenced": servers["fenced"].url},
        "config": SAMPLE_CONFIG,
    }
    out = subprocess.run(
        [
            str(a2a03_python),
            str(ROOT / "tests" / "a2a" / "client_v03.py"),
            servers["green"].url,
            json.dumps(request),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result = json.loads(out.stdout)
    assert result["state"] == "completed"
    by_role = {r["participant"]: r for r in result["results"]}
    assert set(by_role) == {"gold", "fenced"}  # one result per data part, no text taken as JSON
    assert by_role["gold"]["resolved_pct"] == 1.0
    assert by_role["fenced"]["resolved_pct"] == 1.0  # a ```diff block in prose is found


def gateway_shard(green: str, participants: dict[str, str], config: dict, python: Path) -> dict:
    """One shard as the gateway runs it (a2a-sdk 0.3): {"status", "results": data parts}."""
    out = subprocess.run(
        [
            str(python),
            str(ROOT / "tests" / "a2a" / "client_v03.py"),
            green,
            json.dumps({"participants": participants, "config": config}),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    result = json.loads(out.stdout)
    return {"status": result["state"], "results": result["results"]}


def test_sharded_assessments_as_the_gateway_sends_them_cover_the_selection_once(
    servers, a2a03_python: Path, tmp_path: Path
) -> None:
    """The leaderboard template starts every shard with the manifest's assessment_config
    plus num_instances, shard_index and num_shards, then merges the shards' results into
    one {participants, results} file that the leaderboard's DuckDB queries read."""
    import duckdb
    import json5

    manifest = json5.loads((ROOT / "agentbeats" / "amber-manifest.json5").read_text())
    shipped = manifest["metadata"]["assessment_config"]
    base = {**shipped, "dataset": "swegreen:sample"}  # the hub is not reachable here
    participants = {"agent": servers["gold"].url}
    plans = {
        # num_instances chose 2 of the 8 rows; 2 shards deal them 1 + 1
        "two": [{**base, "num_instances": 2, "shard_index": i, "num_shards": 2} for i in (0, 1)],
        # the template's empty num_instances: every row of the selection, once
        "all": [
            {**base, "repos": ["sample/ledger"], "shard_index": i, "num_shards": 2} for i in (0, 1)
        ],
    }
    expected = {
        "two": ["sample__calculator-1", "sample__calculator-2"],
        "all": ["sample__ledger-1", "sample__ledger-2"],
    }
    for name, shards in plans.items():
        merged = {"participants": {"agent": f"id-{name}"}, "results": []}
        seen: list[str] = []
        for config in shards:
            shard = gateway_shard(servers["green"].url, participants, config, a2a03_python)
            assert shard["status"] == "completed", shard
            [row] = shard["results"]
            seen += [i["instance_id"] for i in row["instances"]]
            chosen = row["provenance"]["config"]
            # sharded by the platform: the shard's worst case was checked against its step
            time_plan = row["provenance"]["time_plan"]
            assert time_plan["budget_minutes"] == 300 and time_plan["fits"] is True
            assert chosen["rows_chosen_by"].startswith(
                "num_instances" if name == "two" else "sharded without num_instances"
            )
            merged["results"].extend(shard["results"])
        assert sorted(seen) == expected[name]  # disjoint, and together the whole selection
        (tmp_path / f"{name}.json").write_text(json.dumps(merged))

    con = duckdb.connect()
    con.execute(f"CREATE TABLE results AS SELECT * FROM read_json_auto('{tmp_path}/*.json')")
    listed = json.loads((ROOT / "agentbeats" / "leaderboard.json").read_text())
    overall = listed[0]["query"]  # as the platform runs it
    rows = con.execute(overall).fetchall()
    columns = [d[0] for d in con.description]
    table = {r[0]: dict(zip(columns, r, strict=True)) for r in rows}
    assert table["id-two"]["instances"] == 2 and table["id-two"]["resolved"] == 1.0
    assert table["id-all"]["instances"] == 2 and table["id-all"]["resolved"] == 1.0


@pytest.mark.parametrize(
    ("request_text", "message"),
    [
        ("evaluate my agent please", "the request is not JSON"),
        (json.dumps({"participants": {}}), "name at least one participant"),
        (json.dumps({"participants": {"a": "ftp://x"}}), "has no http(s) URL"),
        (
            json.dumps({"participants": {"a": "http://x"}, "config": {"max_rowz": 1}}),
            "unknown config key 'max_rowz'",
        ),
        (
            json.dumps(
                {
                    "participants": {"a": "http://x"},
                    "config": {"dataset": "swegreen:sample", "instance_ids": ["nope"]},
                }
            ),
            "unknown instance id",
        ),
        (
            json.dumps({"participants": {"a": "http://x"}, "config": {"isolation": "process"}}),
            "a request cannot change it",
        ),
        (  # a Quick Submit's one shard: the whole selection, the default timeouts
            json.dumps(
                {
                    "participants": {"a": "http://x"},
                    "config": {"dataset": "swegreen:sample", "shard_index": 0, "num_shards": 1},
                }
            ),
            "this shard cannot finish in time: worst case 645 min",
        ),
    ],
)
def test_bad_requests_are_rejected_with_what_to_fix(
    servers, request_text: str, message: str
) -> None:
    outcome = asyncio.run(assess(servers["green"].url, request_text))
    assert outcome.state == "TASK_STATE_REJECTED"
    assert message in outcome.statuses[-1]


def test_cancelling_the_assessment_cancels_its_work(servers) -> None:
    request = {
        "participants": {"hang": servers["hang"].url},
        "config": {**SAMPLE_CONFIG, "participant_timeout": 600},
    }
    outcome = asyncio.run(assess(servers["green"].url, request, cancel_after="started"))
    assert outcome.state == "TASK_STATE_CANCELED"


def test_an_unreachable_model_never_stops_the_run(
    servers, session_cache: Path, tmp_path: Path
) -> None:
    green = start(["serve", "--heartbeat", "5"], session_cache, tmp_path, "green-no-model")
    try:
        request = {
            "participants": {"empty": servers["empty"].url},
            "config": {
                **SAMPLE_CONFIG,
                "max_rows": 2,
                "green_agent_model": "openai/gpt-4o-mini-nonexistent",
            },
        }
        env_key = os.environ.pop("OPENAI_API_KEY", None)
        try:
            outcome = asyncio.run(assess(green.url, request))
        finally:
            if env_key is not None:
                os.environ["OPENAI_API_KEY"] = env_key
    finally:
        green.proc.terminate()
        green.proc.wait(timeout=10)
    assert outcome.state == "TASK_STATE_COMPLETED"
    notes = [s for s in outcome.statuses if "no diagnoses or summary" in s]
    assert len(notes) == 1 and "unavailable" in notes[0]
    assert all(i.get("diagnosis") is None for i in outcome.rows["empty"]["instances"])


def test_the_llm_baseline_with_a_mocked_model(
    session_cache: Path, sample: SampleBenchmark, servers, tmp_path: Path
) -> None:
    gold = json.loads(sample.dataset.read_text().splitlines()[0])
    fenced = f"Here is the fix.\n```diff\n{gold['patch']}```"
    llm = start(
        ["participant", "llm", "--llm-mock-response", fenced], session_cache, tmp_path, "llm"
    )
    prose = start(
        ["participant", "llm", "--llm-mock-response", "I am not sure."],
        session_cache,
        tmp_path,
        "llm-prose",
    )
    try:
        request = {
            "participants": {"llm": llm.url, "llm-prose": prose.url},
            "config": {
                **SAMPLE_CONFIG,
                "instance_ids": [gold["instance_id"]],
                "participant_timeout": 120,
            },
        }
        outcome = asyncio.run(assess(servers["green"].url, request))
    finally:
        for server in (llm, prose):
            server.proc.terminate()
            server.proc.wait(timeout=10)
    [good] = outcome.rows["llm"]["instances"]
    assert good["status"] == "resolved"
    assert good["participant_usage"]["total_tokens"] > 0  # litellm's mock reports usage too
    [bad] = outcome.rows["llm-prose"]["instances"]
    assert (bad["status"], bad["reason"]) == ("no_op", "no_patch")


def test_no_caller_lists_the_tasks_of_others(servers) -> None:
    """The A2A server has no callers' identities: its task listing shows nobody the tasks
    (and histories) of assessments, so another participant or a sandboxed process that
    reaches its port learns nothing; the one who started a task still reads it by its id,
    and lists it by the context id it chose."""
    request = {
        "participants": {"gold": servers["gold"].url},
        "config": {**SAMPLE_CONFIG, "max_rows": 1},
    }
    outcome = asyncio.run(assess(servers["green"].url, request))
    assert outcome.state == "TASK_STATE_COMPLETED" and outcome.task_id

    async def look() -> tuple[int, str]:
        async with httpx.AsyncClient(timeout=httpx.Timeout(30)) as http:
            client = await ClientFactory(ClientConfig(httpx_client=http)).create_from_url(
                servers["green"].url
            )
            listed = await client.list_tasks(ListTasksRequest())
            guessed = await client.list_tasks(ListTasksRequest(context_id=uuid.uuid4().hex))
            own = MessageToDict(await client.get_task(GetTaskRequest(id=outcome.task_id)))
            mine = await client.list_tasks(ListTasksRequest(context_id=own["contextId"]))
            return (
                len(listed.tasks),
                len(guessed.tasks),
                [t.id for t in mine.tasks],
                own["status"]["state"],
            )

    assert asyncio.run(look()) == (0, 0, [outcome.task_id], "TASK_STATE_COMPLETED")
