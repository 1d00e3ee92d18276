"""The AWS pipeline end to end, offline: the synthesized stack deployed by CloudFormation
into the moto server, executions started on the sample benchmark, the real Lambda code
running in Python 3.12 and the real sandbox entry point running each Fargate task (see
emulator.py). A first run builds the prebuilt artifacts (git mirrors, the environment,
prepared workspaces); every later run starts from them. Verdicts and leaderboards must
equal the local run's for the same patches; the evaluate task works without credentials;
waits on participants are callbacks that the Watch function completes; Spot
interruptions are retried, on-demand in the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from botocore.exceptions import ClientError

from swegreen.aws.endpoints import EndpointSpec
from swegreen.aws.front_door_client import failure_message
from swegreen.sample import SampleBenchmark
from swegreen.sandbox.isolation import DEFAULT_SANDBOX_UID
from swegreen.stores.artifacts import TEST_OUTPUT
from tests.aws.conftest import STACK
from tests.aws.emulator import REGION, Emulator
from tests.conftest import RunSample, open_to_sandbox
from tests.helpers import Server, start

# Executions are waited for while they make progress; EXECUTIONS_TIMEOUT without any is
# a stuck run. The first test's setup synthesizes the stack (up to 900 s, conftest.py)
# and waits for two waves of executions: on a loaded machine (load 20 on 2 cores) that
# can take an hour, which the module's limit leaves them.
EXECUTIONS_TIMEOUT = 600.0
pytestmark = pytest.mark.timeout(900 + 3600)
# Per-row fields that describe the evaluation, not when or how fast it ran.
VERDICT = (
    "status",
    "reason",
    "error_kind",
    "patch_applied",
    "tests_ran",
    "f2p_passed",
    "f2p_total",
    "p2p_passed",
    "p2p_total",
    "patch_bytes",
    "model_name_or_path",
)
LEADERBOARD_SKIP = {"run_id", "instances", "provenance"}
CRAFTED_KEY = "predictions/crafted.jsonl"
FAULTS = "faults"
SPOT = "spot"
QUOTA = "quota"
# A new account's Fargate vCPU quotas (Service Quotas codes: on-demand, Spot): three 2-vCPU
# evaluate tasks on each, one 4-vCPU build task on each.
NEW_ACCOUNT_QUOTAS = {"L-3032A538": 6.0, "L-36FBB829": 6.0}
HOSTILE = "hostile"
HOSTILE_ROW = "sample__calculator-1"
# The Spot run also names its row as one whose tests need the internet: it runs open.
NETWORK_ROW = "sample__calculator-1"
MARK = "swegreen-poisoned"
# Module-level code a hostile patch adds: when the tests import it, it reports (to a path on
# this host) who it runs as and whether it holds AWS credentials; it tries to leave a file
# in every environment of the task's cache and to append to the grader's test logs there
# (noting every folder it may not list), and to reach a host that is no VPC endpoint (a
# participant's server).
HOSTILE_CODE = f"""\
def _poison(report={{report!r}}, probe={{probe!r}}):
    import os, socket

    seen = ["credentials: " + ",".join(sorted(k for k in os.environ if k.startswith("AWS_")))]
    seen.append("uid: %d" % os.getuid())
    cache = os.environ.get("SWEGREEN_CACHE_DIR") or {{cache!r}}
    base = os.path.join(cache, "envs")
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        target = os.path.join(base, name)
        if name.startswith(".") or not os.path.isdir(target):
            continue
        try:
            open(os.path.join(target, "{MARK}"), "w").close()
            seen.append("wrote " + target)
        except OSError as exc:
            seen.append("refused " + target + ": " + exc.strerror)
    def refused(exc):
        seen.append("refused grader dir " + str(exc.filename) + ": " + str(exc.strerror))

    for root, _, files in os.walk(cache, onerror=refused):
        if "{TEST_OUTPUT}" in files:
            try:
                open(os.path.join(root, "{TEST_OUTPUT}"), "a").write("forged")
                seen.append("wrote grader log " + root)
            except OSError as exc:
                seen.append("refused grader log " + root + ": " + exc.strerror)
    host, port = probe
    try:
        socket.create_connection((host, port), timeout=10).close()
        seen.append("reached %s:%d" % (host, port))
    except OSError as exc:
        seen.append("unreachable %s:%d: %s" % (host, port, exc))
    with open(report, "a") as out:
        out.write("\\n".join(seen) + "\\n")


_poison()


"""


@dataclass
class Cloud:
    emulator: Emulator
    outputs: dict[str, str]
    sample: SampleBenchmark
    executions: dict[str, str] = field(default_factory=dict)
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)
    hostile_report: Path | None = None
    watch_results: list[dict[str, Any]] = field(default_factory=list)
    built: dict[str, str] = field(default_factory=dict)  # artifacts after the first run
    endpoints_after: list[dict[str, Any]] = field(default_factory=list)  # once no run runs

    @property
    def bucket(self) -> str:
        return self.outputs["BucketName"]

    def config(self, **extra: Any) -> dict[str, Any]:
        return {
            "dataset": f"s3://{self.bucket}/datasets/sample.jsonl",
            "repo_url_template": self.sample.url_template,
            "max_rows": -1,
            "max_concurrent_rows": 2,
            **extra,
        }

    def start(self, run_id: str, **request: Any) -> None:
        event = {
            "run_id": run_id,
            "participants": {},
            "patches": None,
            "config": {},
            "rebuild_envs": False,
            **request,
        }
        started = self.emulator.client("stepfunctions").start_execution(
            stateMachineArn=self.outputs["StateMachineArn"], name=run_id, input=json.dumps(event)
        )
        self.executions[run_id] = started["executionArn"]

    def wait(self, timeout: float = EXECUTIONS_TIMEOUT) -> dict[str, dict[str, Any]]:
        """Every started execution's end, Watch invoked meanwhile as its schedule would."""
        sfn = self.emulator.client("stepfunctions")
        deadline = time.monotonic() + timeout
        done = dict(self.outcomes)
        seen = self.progress(done)
        while len(done) < len(self.executions) and time.monotonic() < deadline:
            for run_id, arn in self.executions.items():
                if run_id not in done:
                    described = sfn.describe_execution(executionArn=arn)
                    if described["status"] != "RUNNING":
                        done[run_id] = described
            self.watch()
            time.sleep(1.0)
            if (now := self.progress(done)) != seen:  # slow (a loaded machine), not stuck
                seen, deadline = now, time.monotonic() + timeout
        assert len(done) == len(self.executions), (
            f"still running: {set(self.executions) - set(done)}"
        )
        self.outcomes = done
        return done

    def progress(self, done: dict[str, Any]) -> tuple[int, ...]:
        """What changes while the executions work: executions ended, tasks started and
        ended, Lambda invocations made."""
        tasks = list(self.emulator.tasks)
        return (
            len(done),
            len(tasks),
            sum("exit_code" in t for t in tasks),
            len(self.emulator.invocations),
        )

    def watch(self) -> None:
        """One tick of the Watch function's schedule (EventBridge has no runner here)."""
        answer = self.emulator.client("lambda").invoke(
            FunctionName=self.outputs["WatchFunctionName"], Payload=b"{}"
        )
        self.watch_results.append(json.loads(answer["Payload"].read() or b"{}"))

    def endpoints(self) -> list[dict[str, Any]]:
        """The stack's interface endpoints that exist (made by runs, not the template)."""
        listed = self.emulator.client("ec2").describe_vpc_endpoints()["VpcEndpoints"]
        return [
            e
            for e in listed
            if e["VpcEndpointType"] == "Interface" and e["State"].lower() != "deleted"
        ]

    def artifacts(self) -> dict[str, str]:
        """Every prebuilt artifact's key and ETag."""
        listed = self.emulator.client("s3").list_objects_v2(Bucket=self.bucket, Prefix="artifacts/")
        return {o["Key"]: o["ETag"] for o in listed.get("Contents", [])}

    def tasks(self, run_id: str, phase: str | None = None) -> list[dict[str, Any]]:
        return [
            t
            for t in self.emulator.tasks
            if t["env"].get("SWEGREEN_RUN_ID") == run_id and phase in (None, t["phase"])
        ]

    def s3_json(self, key: str) -> Any:
        body = self.emulator.client("s3").get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return json.loads(body)

    def rows(self, run_id: str) -> dict[str, dict[str, Any]]:
        """The run's rows as the DynamoDB table holds them."""
        table = self.emulator.client("dynamodb")
        items = table.query(
            TableName=self.outputs["TableName"],
            KeyConditionExpression="pk = :r AND begins_with(sk, :row)",
            ExpressionAttributeValues={":r": {"S": run_id}, ":row": {"S": "ROW#"}},
        )["Items"]
        rows = [json.loads(i["result"]["S"]) for i in items]
        return {r["instance_id"]: r for r in rows}

    def diagnosis(self, rows: dict[str, dict[str, Any]]) -> str:
        """Why rows ended ``error``, and what the emulator's Lambdas threw, for a failure."""
        errors = {i: r.get("detail") for i, r in rows.items() if r["status"] == "error"}
        thrown = self.emulator.workdir / "invocations" / "errors.log"
        return (
            f"error rows: {errors}\nLambda errors:\n"
            + (thrown.read_text()[-4000:] if thrown.exists() else "none")
            + "\nexecutions' failures:\n"
            + self.failures()
            + "\nretry decisions:\n"
            + "\n".join(
                f.read_text()[:600]
                for f in sorted((self.emulator.workdir / "invocations").glob("*TaskRetry*.json"))[
                    :6
                ]
            )
            + "\nbuild-phase tasks:\n"
            + "\n".join(
                f"{t['instance_id']} exit {t.get('exit_code')}: "
                + Path(t["log"]).read_text(errors="replace")[-1500:]
                for t in self.emulator.tasks
                if t["phase"] in ("build", "prepare") and Path(t["log"]).exists()
            )
        )

    def failures(self) -> str:
        """The failure events of every execution so far (the runs' and their rows')."""
        sfn = self.emulator.client("stepfunctions")
        lines = []
        for machine in ("StateMachineArn", "RowsStateMachineArn"):
            listed = sfn.list_executions(stateMachineArn=self.outputs[machine])
            for execution in listed["executions"]:
                events = sfn.get_execution_history(
                    executionArn=execution["executionArn"], maxResults=1000
                )["events"]
                entered = [
                    e["stateEnteredEventDetails"]["name"]
                    for e in events
                    if "stateEnteredEventDetails" in e
                ]
                lines.append(f"{execution['name']} went through {entered[:40]}")
                for run in sfn.list_map_runs(executionArn=execution["executionArn"])["mapRuns"]:
                    counts = sfn.describe_map_run(mapRunArn=run["mapRunArn"])["itemCounts"]
                    lines.append(f"  a map of {execution['name']}: {counts}")
                for event in events:
                    for key, detail in event.items():
                        if key.endswith("FailedEventDetails") or key.endswith(
                            "AbortedEventDetails"
                        ):
                            lines.append(f"{execution['name']} {event['type']}: {detail}"[:1500])
        return "\n".join(lines[-60:]) or "none"

    def leaderboard(self, run_id: str) -> dict[str, Any]:
        (row,) = self.s3_json(f"runs/{run_id}/results.json")["results"]
        return row


@pytest.fixture(scope="module")
def participants(
    session_cache: Path, sample: SampleBenchmark, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Server]]:
    out = tmp_path_factory.mktemp("aws-participants")
    specs = {
        "slow": ["participant", "scripted", "--mode", "slow", "--dataset", "swegreen:sample"],
        "hang": ["participant", "scripted", "--mode", "hang"],
    }
    running: dict[str, Server] = {}
    try:
        for name, args in specs.items():
            running[name] = start(args, session_cache, out, name)
        yield running
    finally:
        for server in running.values():
            server.proc.terminate()
            with contextlib.suppress(Exception):
                server.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def cloud(
    assembly: Path,
    lambda_python: Path,
    sample: SampleBenchmark,
    participants: dict[str, Server],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cloud]:
    """One deployment. A cold run (gold) builds the artifacts; then every other run at
    once (as AgentBeats may start them), all from those artifacts."""
    work = open_to_sandbox(tmp_path_factory.mktemp("aws-emulator"))  # the tests' uid passes
    with Emulator(work, lambda_python) as emulator:
        if emulator.bwrap is None:
            pytest.skip("bubblewrap cannot mount here: the tasks cannot each have a disk")
        emulator.fargate_quotas.update(NEW_ACCOUNT_QUOTAS)
        emulator.visible.append(sample.root)  # the repositories the build tasks clone
        cloud = Cloud(emulator, emulator.deploy(assembly, STACK), sample)
        s3 = emulator.client("s3")
        # the documented first step (docs/aws.md): the dataset into the stack's bucket
        uploaded = subprocess.run(
            [sys.executable, "-m", "swegreen", "upload-dataset", "--stack", STACK,
             "--dataset", str(sample.dataset), "--key", "datasets/sample.jsonl"],
            env={**os.environ, **emulator.env(), "AWS_DEFAULT_REGION": REGION},
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert uploaded.returncode == 0, uploaded.stdout + uploaded.stderr
        assert f"s3://{cloud.bucket}/datasets/sample.jsonl" in uploaded.stdout
        s3.put_object(Bucket=cloud.bucket, Key=CRAFTED_KEY, Body=sample.crafted.read_bytes())
        cloud.start("gold", patches="gold", config=cloud.config())
        cloud.wait()
        cloud.built = cloud.artifacts()
        ids = sorted(sample.expected)
        # Faults, each on its own row of one run: a sandbox that exits non-zero, a
        # Dispatch that throws, a Classify that throws (so its error row cannot be written
        # either); the fourth row must not notice. And Spot reclaims a row's task twice.
        emulator.sandbox_faults.add((FAULTS, ids[0]))
        emulator.lambda_faults["Dispatch"] = {(FAULTS, ids[1])}
        emulator.lambda_faults["Classify"] = {(FAULTS, ids[2])}
        emulator.spot_faults[(SPOT, ids[0])] = 2
        # ECS refuses a row's task for the vCPU quota, throttles it, refuses it again
        emulator.refusals[(QUOTA, ids[1])] = ["quota", "throttle", "quota"]
        cloud.start("empty", patches="empty", config=cloud.config())
        cloud.start("crafted", patches=CRAFTED_KEY, config=cloud.config())
        cloud.start(
            "a2a",
            participants={"agent": participants["slow"].url},
            config=cloud.config(instance_ids=ids[:2]),
        )
        cloud.start(
            "hang",
            participants={"agent": participants["hang"].url},
            config=cloud.config(instance_ids=ids[:1], participant_timeout=8),
        )
        # one task per row: the faults are injected per row's task
        cloud.start(FAULTS, patches="gold", config=cloud.config(instance_ids=ids[:4]), batch=False)
        assert ids[0] == NETWORK_ROW
        cloud.start(
            SPOT,
            patches="gold",
            config=cloud.config(instance_ids=ids[:1], network_instances=[NETWORK_ROW]),
        )
        # a task per row: the refusals are injected on one row's task, whatever share of
        # the quotas the runs running beside it leave this run
        cloud.start(
            QUOTA,
            patches="gold",
            config=cloud.config(instance_ids=ids[:2], max_concurrent_rows=10),
            batch=False,
        )
        cloud.hostile_report = work / "hostile-report.txt"
        cloud.hostile_report.touch(mode=0o666)  # the tests' uid writes it
        cloud.hostile_report.chmod(0o666)
        gold = json.loads(
            next(
                line
                for line in sample.dataset.read_text().splitlines()
                if json.loads(line)["instance_id"] == HOSTILE_ROW
            )
        )["patch"]
        prediction = {
            "instance_id": HOSTILE_ROW,
            "model_name_or_path": HOSTILE,
            "model_patch": hostile(
                gold, cloud.hostile_report, emulator.cache_path, participants["slow"].url
            ),
        }
        key = f"predictions/{HOSTILE}.jsonl"
        s3.put_object(Bucket=cloud.bucket, Key=key, Body=json.dumps(prediction).encode())
        cloud.start(HOSTILE, patches=key, config=cloud.config(instance_ids=[HOSTILE_ROW]))
        cloud.wait()
        cloud.watch()  # Watch's first minute with no run running
        cloud.endpoints_after = cloud.endpoints()
        yield cloud


def hostile(patch: str, report: Path, cache: Path, probe: str) -> str:
    """``patch`` with HOSTILE_CODE added at the top of its first hunk (module level)."""
    header = re.search(r"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@.*$", patch, re.MULTILINE)
    assert header is not None, patch
    where = urlsplit(probe)
    added = HOSTILE_CODE.format(
        report=str(report), cache=str(cache), probe=(where.hostname, where.port)
    ).splitlines()
    old_start, old_len, new_start, new_len = (int(g) for g in header.groups())
    lines = [f"@@ -{old_start},{old_len} +{new_start},{new_len + len(added)} @@"]
    lines += ["+" + line if line else "+" for line in added]
    return patch[: header.start()] + "\n".join(lines) + patch[header.end() :]


def verdicts(rows: dict[str, dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    return {iid: tuple(row.get(k) for k in VERDICT) for iid, row in sorted(rows.items())}


@pytest.mark.parametrize("source", ["gold", "empty", "crafted"])
def test_an_execution_gives_the_local_verdicts_and_leaderboard(
    cloud: Cloud, run_sample: RunSample, source: str
) -> None:
    assert cloud.outcomes[source]["status"] == "SUCCEEDED"
    # patches known up front: rows in batches, a task evaluating several in turn
    if source != "empty":
        evaluated = cloud.tasks(source, "evaluate")
        assert 0 < len(evaluated) < len(cloud.rows(source)), [t["instance_id"] for t in evaluated]
    local = run_sample(
        str(cloud.sample.crafted) if source == "crafted" else source, run_id=f"local-{source}"
    )
    aws_rows = cloud.rows(source)
    assert verdicts(aws_rows) == verdicts(
        {r.instance_id: r.model_dump(mode="json") for r in local.results}
    ), cloud.diagnosis(aws_rows)
    if source == "empty":  # decided without a sandbox task, as a local run decides it
        assert not cloud.tasks(source)
    if source == "crafted":  # the sample's crafted predictions reach every status
        assert {iid: r["status"] for iid, r in aws_rows.items()} == {
            iid: e["status"] for iid, e in cloud.sample.expected.items()
        }
    board = cloud.leaderboard(source)
    expected = {k: v for k, v in local.result_row.items() if k not in LEADERBOARD_SKIP}
    assert {k: v for k, v in board.items() if k not in LEADERBOARD_SKIP} == expected
    assert board["provenance"]["pipeline"] == "aws"
    assert board["provenance"]["isolation"] == "process"  # what the tasks ran under
    assert board["provenance"]["dataset_digest"] == local.record.provenance["dataset_digest"]
    # The same rows are published with the leaderboard, and the run is marked finished.
    assert [i["instance_id"] for i in board["instances"]] == sorted(aws_rows)
    run = cloud.emulator.client("dynamodb").get_item(
        TableName=cloud.outputs["TableName"], Key={"pk": {"S": source}, "sk": {"S": "RUN"}}
    )["Item"]
    assert run["state"]["S"] == "finished"
    assert int(run["finished_count"]["N"]) == int(run["instance_count"]["N"]) == len(aws_rows)


def test_the_first_run_built_the_artifacts_and_later_runs_start_from_them(cloud: Cloud) -> None:
    """Cold: the gold run's build phase made a mirror per repository, the environment and
    every prepared workspace, in trusted tasks with credentials for the artifacts. Warm:
    the other runs built nothing. No evaluate task ever held credentials."""
    sample = cloud.sample
    builds = cloud.tasks("gold", "build")
    prepares = cloud.tasks("gold", "prepare")
    # 3 mirrors + 2 environments (ledger's installs the project); prepared workspaces in
    # batches of one environment, at most 4: 6 rows of one, 2 of the other
    assert len(builds) == 5 and len(prepares) == 3
    for task in builds + prepares:
        assert task["exit_code"] == 0 and task["credentials"] and task["container"] == "builder"
    keys = set(cloud.built)
    for r in ("calculator", "textkit", "ledger"):
        # the mirror, named by its content, and the pointer naming it
        pointer = cloud.s3_json(f"artifacts/repos/sample__{r}.json")
        assert re.fullmatch(
            rf"artifacts/repos/sample__{r}/[0-9a-f]{{64}}\.tar\.zst", pointer["key"]
        )
        assert pointer["key"] in keys and pointer["commits"]
    assert len([k for k in keys if k.startswith("artifacts/prepared/")]) == len(sample.expected)
    for run_id in ("empty", "crafted", "a2a", "hang", FAULTS, SPOT, QUOTA, HOSTILE):
        assert not cloud.tasks(run_id, "build") and not cloud.tasks(run_id, "prepare"), run_id
    evaluates = [t for t in cloud.emulator.tasks if t["phase"] == "evaluate"]
    assert evaluates
    for task in evaluates:
        assert not task["credentials"] and "SWEGREEN_BUCKET" not in task["env"]
        assert task["env"]["SWEGREEN_INPUT_URL"].startswith(cloud.emulator.endpoint)
    for task in cloud.tasks(FAULTS, "evaluate"):
        assert task["env"]["SWEGREEN_MODEL"] == "gold"
    for iid in cloud.rows("gold"):
        # Once the row is written, its input (with its live URLs) is gone, and its batch's
        for name in ("sandbox-input.json", "sandbox-batch.json"):
            key = f"runs/gold/instances/{iid}/{name}"
            with pytest.raises(ClientError, match="404"):
                cloud.emulator.client("s3").head_object(Bucket=cloud.bucket, Key=key)


def test_the_rows_ran_in_a_child_execution_and_every_map_wrote_its_results_to_s3(
    cloud: Cloud,
) -> None:
    sfn = cloud.emulator.client("stepfunctions")
    rows = sfn.list_executions(stateMachineArn=cloud.outputs["RowsStateMachineArn"])
    names = {e["name"]: e["status"] for e in rows["executions"]}
    assert names["gold-rows"] == "SUCCEEDED"
    results = cloud.emulator.client("s3").list_objects_v2(
        Bucket=cloud.bucket, Prefix="map-results/"
    )
    written = {o["Key"].split("/")[1] for o in results.get("Contents", [])}
    assert {"build", "prepare", "rows"} <= written
    # the execution's own output stays small whatever the number of rows
    assert len(cloud.outcomes["gold"]["output"]) < 8192


def test_a_hostile_patch_runs_closed_off_as_its_own_uid_and_cannot_touch_the_grader(
    cloud: Cloud,
) -> None:
    """Its code ran, as a uid that is not the grader's: it found no AWS credentials, could
    write neither the environments nor the grader's test log, and reached no host but the
    VPC endpoints; the stored artifacts every later row starts from are unchanged, and the
    row keeps the verdict of its gold patch."""
    assert cloud.outcomes[HOSTILE]["status"] == "SUCCEEDED"
    (row,) = cloud.rows(HOSTILE).values()
    assert (row["status"], row["model_name_or_path"]) == ("resolved", HOSTILE), cloud.diagnosis(
        {row["instance_id"]: row}
    )
    assert cloud.hostile_report is not None
    report = cloud.hostile_report.read_text().splitlines()
    assert "credentials: " in report, report  # no AWS_* variable at all
    assert f"uid: {DEFAULT_SANDBOX_UID}" in report and "uid: 0" not in report, report
    assert any(line.startswith("refused /") for line in report), report
    # the grader's folder beside its workspace (its log, scripts, record FIFO): not even
    # listable to it (testbed.host_dir)
    assert any(line.startswith("refused grader dir ") and ".host:" in line for line in report), (
        report
    )
    assert not any(line.startswith("wrote") for line in report), report
    assert any(line.startswith("unreachable ") for line in report), report
    assert not any(line.startswith("reached ") for line in report), report
    (task,) = cloud.tasks(HOSTILE, "evaluate")
    assert (task["network"], task["network_cut"]) == ("closed", True)
    assert cloud.artifacts() == cloud.built
    assert not list(cloud.emulator.cache_path.glob(f"envs/*/{MARK}"))


def test_the_closed_rows_endpoints_exist_only_while_runs_run(cloud: Cloud) -> None:
    """No interface endpoint in the template (they cost by the hour): each run's Endpoints
    step made them before its rows (a closed task pulls its image only through them: the
    emulator refuses it otherwise, and every task's pull succeeded, the test below), and
    Watch deleted them the first minute no run ran, between the first run and the others
    too."""
    invocations = cloud.emulator.workdir / "invocations"
    made = sorted(invocations.glob("*Endpoints*.json"))
    assert made, "no run made its endpoints"
    assert cloud.endpoints_after == [], cloud.endpoints_after
    listed = cloud.emulator.client("ec2").describe_vpc_endpoints()["VpcEndpoints"]
    deleted = [e for e in listed if e["VpcEndpointType"] == "Interface"]
    # made for the first run, deleted after it, made again for the rest: more than three
    assert len(deleted) > 3 and {e["State"].lower() for e in deleted} == {"deleted"}
    assert {e["ServiceName"].rsplit(".", 1)[-1] for e in deleted} == {"api", "dkr", "logs"}
    assert {t["Key"] for e in deleted for t in e.get("Tags", [])} == {
        "swegreen:endpoints",
        "swegreen:endpoints-taken",
    }


def test_rows_run_closed_off_unless_their_tests_need_the_internet(cloud: Cloud) -> None:
    """Every row's evaluate task ran without a public IP in a network of its own that
    reaches only the emulated AWS (and still gave the local verdicts: the tests above); the
    row a request names in ``network_instances`` ran in the open configuration; the build
    phase always has the internet."""
    kinds = set()
    for task in cloud.emulator.tasks:
        # every kind pulled its image through the same endpoints and their groups' rules
        assert task["pull"] == "ok", task
        kinds.add((task["phase"], task["network"]))
        if task["phase"] != "evaluate":
            assert task["network"] == "open", task["instance_id"]
        elif task["env"]["SWEGREEN_RUN_ID"] == SPOT:
            assert (task["network"], task["network_cut"]) == ("open", False)
            assert task["env"]["SWEGREEN_TASK_NETWORK"] == "open"
        else:
            assert (task["network"], task["network_cut"]) == ("closed", True), task
            assert task["env"]["SWEGREEN_TASK_NETWORK"] == "closed"
    assert kinds >= {("build", "open"), ("evaluate", "open"), ("evaluate", "closed")}, kinds
    (row,) = cloud.rows(SPOT).values()
    assert verdicts({NETWORK_ROW: row}) == {NETWORK_ROW: verdicts(cloud.rows("gold"))[NETWORK_ROW]}
    assert len(cloud.tasks(SPOT, "evaluate")) == 3  # two Spot reclaimed, then on demand


def test_an_a2a_participant_is_waited_for_by_callback(cloud: Cloud) -> None:
    assert cloud.outcomes["a2a"]["status"] == "SUCCEEDED"
    rows = cloud.rows("a2a")
    assert len(rows) == 2
    assert {r["status"] for r in rows.values()} == {"resolved"}, cloud.diagnosis(rows)
    assert all(r["model_name_or_path"] == "agent" for r in rows.values())
    assert all(r["durations"]["participant"] >= 5 for r in rows.values())  # it was slow
    for row in rows.values():  # as a local run records it, across the dispatch and the polls
        assert row["conversation"] == {
            "dialect": "universal",
            "dialect_chosen_by": "default",
            "reply": "artifact: data part 'patch'",
        }, row.get("conversation")
    assert cloud.leaderboard("a2a")["participant"] == "agent"
    # Watch handed them back; a participant done before the dispatch's own request returned
    # (a loaded machine) is handed back by the dispatch at once, so at least one by Watch
    assert sum(w.get("done", 0) for w in cloud.watch_results) >= 1


def test_a_participant_that_never_answers_times_out_and_is_cancelled(cloud: Cloud) -> None:
    """As in a local run: the participant's failure, not an infrastructure error."""
    assert cloud.outcomes["hang"]["status"] == "SUCCEEDED"
    (row,) = cloud.rows("hang").values()
    assert (row["status"], row["reason"]) == ("no_op", "participant_timeout")
    assert row["durations"]["participant"] >= 8
    board = cloud.leaderboard("hang")
    assert board["participant_failures"] == 1 and board["no_op_pct"] == 1.0


def test_a_task_spot_reclaims_is_retried_and_runs_on_demand_in_the_end(cloud: Cloud) -> None:
    assert cloud.outcomes[SPOT]["status"] == "SUCCEEDED"
    (row,) = cloud.rows(SPOT).values()
    assert row["status"] == "resolved", cloud.diagnosis(cloud.rows(SPOT))
    capacities = [t["capacity"] for t in cloud.tasks(SPOT, "evaluate")]
    assert capacities == ["FARGATE_SPOT", "FARGATE_SPOT", "FARGATE"]
    retries = [n for n, _, _ in cloud.emulator.invocations if "TaskRetry" in n]
    assert len(retries) >= 2


def test_quota_refusals_and_throttles_are_waits_and_the_rows_keep_their_verdicts(
    cloud: Cloud,
) -> None:
    assert cloud.outcomes[QUOTA]["status"] == "SUCCEEDED"
    ids = sorted(cloud.sample.expected)[:2]
    rows = cloud.rows(QUOTA)
    assert sorted(rows) == ids
    gold = verdicts(cloud.rows("gold"))
    assert verdicts(rows) == {iid: gold[iid] for iid in ids}, cloud.diagnosis(rows)
    refused = [kind for run, iid, kind in cloud.emulator.refused if run == QUOTA]
    assert refused == ["quota", "throttle", "quota"]
    # the refused row's task ran once, when there was room: refusals are not attempts
    started = [t for t in cloud.tasks(QUOTA, "evaluate") if t["instance_id"] == ids[1]]
    assert len(started) == 1
    # Resolve fitted the run to the account's quotas, less what the runs started beside it
    # hold (how much that is depends on whose Resolve ran first), and said so
    capacity = cloud.leaderboard(QUOTA)["provenance"]["capacity"]
    assert 1 <= capacity["rows"] <= 6 and capacity["builds"] <= 2
    assert "rows 10 -> " in capacity["note"] and "tasks of 2 vCPU" in capacity["note"]
    if capacity["rows"] < 6:
        assert "vCPUs the runs running hold" in capacity["note"]
    assert capacity["quotas"] == {"on_demand_vcpu": 6.0, "spot_vcpu": 6.0}
    # ... and estimated the run for that concurrency; the account's quotas (6 + 6) hold
    # this run's 2 rows (the runs beside it hold them for now): no quota request
    estimate = cloud.leaderboard(QUOTA)["provenance"]["estimate"]
    assert (estimate["rows"], estimate["concurrency"]) == (2, capacity["rows"])
    assert estimate["raise_quota"] == "" and estimate["wanted"] is None
    assert 0 < estimate["optimistic"]["usd"] <= estimate["pessimistic"]["usd"]


def test_injected_failures_become_error_rows_and_the_run_still_finishes(cloud: Cloud) -> None:
    assert cloud.outcomes[FAULTS]["status"] == "SUCCEEDED"
    ids = sorted(cloud.sample.expected)[:4]
    rows = cloud.rows(FAULTS)
    assert sorted(rows) == ids  # nothing lost, nothing duplicated
    crashed, thrown, lost, healthy = (rows[i] for i in ids)
    assert (crashed["status"], crashed["reason"]) == ("error", "sandbox_crashed")
    assert "exit codes [3]" in crashed["detail"]  # a crash: not retried
    assert len(cloud.tasks(FAULTS, "evaluate")) == 3  # not the crashed one's again
    assert (thrown["status"], thrown["reason"]) == ("error", "internal_error")
    assert "injected fault" in thrown["detail"]
    assert (lost["status"], lost["reason"]) == ("error", "internal_error")
    assert "ended without a row" in lost["detail"]
    assert healthy["status"] == "resolved", (healthy["reason"], healthy["detail"])
    board = cloud.leaderboard(FAULTS)
    assert board["counts"]["error"] == 3 and board["counts"]["resolved"] == 1
    assert board["infrastructure_errors"] == 3
    assert board["error_pct"] == 0.75


def test_a_vpc_whose_own_endpoints_the_rows_cannot_reach_stops_the_run_naming_the_fix(
    cloud: Cloud,
) -> None:
    """The stack's VPC gets an endpoint of its owner (ECR API, private DNS, the owner's
    own security group), as an imported VPC can have: its DNS answers for the whole VPC
    and the closed rows may not reach its group. The next run stops before any row, its
    record naming the setting that mends it; no task runs for it."""
    functions = cloud.emulator.client("lambda").list_functions()["Functions"]
    (told,) = [
        f["Environment"]["Variables"]["SWEGREEN_ENDPOINTS"]
        for f in functions
        if "Endpoints" in f["FunctionName"]
    ]
    spec = EndpointSpec.model_validate_json(told)
    ec2 = cloud.emulator.client("ec2")
    group = ec2.create_security_group(
        GroupName="owners-endpoints", Description="the VPC owner's", VpcId=spec.vpc_id
    )["GroupId"]
    theirs = ec2.create_vpc_endpoint(
        VpcEndpointType="Interface",
        VpcId=spec.vpc_id,
        ServiceName=f"com.amazonaws.{spec.region}.ecr.api",
        SubnetIds=spec.subnet_ids,
        SecurityGroupIds=[group],
        PrivateDnsEnabled=True,
    )["VpcEndpoint"]["VpcEndpointId"]
    run_id = "foreign-endpoints"
    try:
        cloud.start(run_id, patches="gold", config=cloud.config(instance_ids=[NETWORK_ROW]))
        cloud.wait()
    finally:
        ec2.delete_vpc_endpoints(VpcEndpointIds=[theirs])
    assert cloud.outcomes[run_id]["status"] == "FAILED"
    run = cloud.emulator.client("dynamodb").get_item(
        TableName=cloud.outputs["TableName"], Key={"pk": {"S": run_id}, "sk": {"S": "RUN"}}
    )["Item"]
    assert run["state"]["S"] == "failed"
    error = failure_message(run["error"]["S"])
    assert error.startswith("EndpointsUnreachable: ") and theirs in error, error
    assert f"swegreen:vpc_endpoint_security_group={group}" in error
    assert not cloud.tasks(run_id)
