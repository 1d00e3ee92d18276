"""The AWS pipeline end to end, offline: the synthesized stack deployed by CloudFormation
into the moto server, executions started on the sample benchmark, the real Lambda code
running in Python 3.12 and the real sandbox entry point preparing and evaluating each row
(see emulator.py). Verdicts and leaderboards must equal the local run's for the same
patches; the evaluate task works without credentials and cannot write the shared cache.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from infra.sandbox import SHARED_MOUNT
from swegreen.sample import SampleBenchmark
from tests.aws.conftest import STACK
from tests.aws.emulator import Emulator
from tests.conftest import RunSample
from tests.helpers import Server, start

# The first test's setup synthesizes the stack (up to 900 s, conftest.py) and waits for
# every execution (up to EXECUTIONS_TIMEOUT): the limit must exceed both together.
EXECUTIONS_TIMEOUT = 900.0
pytestmark = pytest.mark.timeout(2400)
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
HOSTILE = "hostile"
HOSTILE_ROW = "sample__calculator-1"
MARK = "swegreen-poisoned"
# Module-level code a hostile patch adds: when the tests import it, it tries to leave a
# file in every environment and git mirror of every cache it can find among the mounts,
# and reports (to a path on this host) what it could write and what it could not.
HOSTILE_CODE = f"""\
def _poison(report={{report!r}}):
    import os

    seen = []
    for line in open("/proc/self/mountinfo"):
        mount = line.split()[4].replace("\\\\040", " ")
        for top in ("envs", "repos"):
            base = os.path.join(mount, top)
            for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
                target = os.path.join(base, name)
                if name.startswith(".") or not os.path.isdir(target):
                    continue
                try:
                    open(os.path.join(target, "{MARK}"), "w").close()
                    seen.append("wrote " + target)
                except OSError as exc:
                    seen.append("refused " + target + ": " + exc.strerror)
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
        event = {"run_id": run_id, "participants": {}, "patches": None, "config": {}, **request}
        started = self.emulator.client("stepfunctions").start_execution(
            stateMachineArn=self.outputs["StateMachineArn"], name=run_id, input=json.dumps(event)
        )
        self.executions[run_id] = started["executionArn"]

    def wait(self, timeout: float = EXECUTIONS_TIMEOUT) -> dict[str, dict[str, Any]]:
        sfn = self.emulator.client("stepfunctions")
        deadline = time.monotonic() + timeout
        done: dict[str, dict[str, Any]] = {}
        while len(done) < len(self.executions) and time.monotonic() < deadline:
            for run_id, arn in self.executions.items():
                if run_id not in done:
                    described = sfn.describe_execution(executionArn=arn)
                    if described["status"] != "RUNNING":
                        done[run_id] = described
            time.sleep(1.0)
        assert len(done) == len(self.executions), (
            f"still running: {set(self.executions) - set(done)}"
        )
        return done

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
        return f"error rows: {errors}\nLambda errors:\n" + (
            thrown.read_text()[-4000:] if thrown.exists() else "none"
        )

    def leaderboard(self, run_id: str) -> dict[str, Any]:
        (row,) = self.s3_json(f"runs/{run_id}/results.json")["results"]
        return row


@pytest.fixture(scope="module")
def participants(
    session_cache: Path, sample: SampleBenchmark, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Server]]:
    out = tmp_path_factory.mktemp("aws-participants")
    specs = {
        "gold": ["participant", "gold", "--dataset", "swegreen:sample"],
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
    session_cache: Path,
    participants: dict[str, Server],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cloud]:
    """One deployment, every execution started at once (as AgentBeats may), all awaited."""
    work = tmp_path_factory.mktemp("aws-emulator")
    # The EFS cache of the sandbox tasks: the session's cache, as a warm EFS would be.
    with Emulator(work, lambda_python, efs_dir=session_cache) as emulator:
        cloud = Cloud(emulator, emulator.deploy(assembly, STACK), sample)
        s3 = emulator.client("s3")
        s3.put_object(
            Bucket=cloud.bucket, Key="datasets/sample.jsonl", Body=sample.dataset.read_bytes()
        )
        s3.put_object(Bucket=cloud.bucket, Key=CRAFTED_KEY, Body=sample.crafted.read_bytes())
        ids = sorted(sample.expected)
        # Faults, each on its own row of one run: a sandbox that exits non-zero, a
        # Dispatch that throws, a Classify that throws (so its error row cannot be written
        # either); the fourth row must not notice.
        emulator.sandbox_faults.add((FAULTS, ids[0]))
        emulator.lambda_faults["Dispatch"] = {(FAULTS, ids[1])}
        emulator.lambda_faults["Classify"] = {(FAULTS, ids[2])}
        for source in ("gold", "empty"):
            cloud.start(source, patches=source, config=cloud.config())
        cloud.start("crafted", patches=CRAFTED_KEY, config=cloud.config())
        cloud.start(
            "a2a",
            participants={"agent": participants["gold"].url},
            config=cloud.config(instance_ids=ids[:3]),
        )
        cloud.start(
            "hang",
            participants={"agent": participants["hang"].url},
            config=cloud.config(instance_ids=ids[:1], participant_timeout=8),
        )
        cloud.start(FAULTS, patches="gold", config=cloud.config(instance_ids=ids[:4]))
        if emulator.bwrap is not None:  # else the emulator cannot mount anything read-only
            cloud.hostile_report = work / "hostile-report.txt"
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
                "model_patch": hostile(gold, cloud.hostile_report),
            }
            key = f"predictions/{HOSTILE}.jsonl"
            s3.put_object(Bucket=cloud.bucket, Key=key, Body=json.dumps(prediction).encode())
            cloud.start(HOSTILE, patches=key, config=cloud.config(instance_ids=[HOSTILE_ROW]))
        cloud.outcomes = cloud.wait()
        yield cloud


def hostile(patch: str, report: Path) -> str:
    """``patch`` with HOSTILE_CODE added at the top of its first hunk (module level)."""
    header = re.search(r"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@.*$", patch, re.MULTILINE)
    assert header is not None, patch
    added = HOSTILE_CODE.format(report=str(report)).splitlines()
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
    local = run_sample(
        str(cloud.sample.crafted) if source == "crafted" else source, run_id=f"local-{source}"
    )
    aws_rows = cloud.rows(source)
    assert verdicts(aws_rows) == verdicts(
        {r.instance_id: r.model_dump(mode="json") for r in local.results}
    ), cloud.diagnosis(aws_rows)
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
    assert set(run["finished"]["SS"]) == set(aws_rows)


def test_each_row_ran_a_prepare_and_an_evaluate_task_and_only_prepare_had_credentials(
    cloud: Cloud,
) -> None:
    gold_tasks = [t for t in cloud.emulator.tasks if t["env"]["SWEGREEN_RUN_ID"] == "gold"]
    for container in ("prepare", "sandbox"):
        ran = [t for t in gold_tasks if t["container"] == container]
        assert sorted(t["instance_id"] for t in ran) == sorted(cloud.sample.expected), container
        assert all(t["exit_code"] == 0 for t in ran)
    for task in gold_tasks:
        config = json.loads(task["env"]["SWEGREEN_CONFIG"])
        assert config["repo_url_template"] == cloud.sample.url_template
        assert task["env"]["SWEGREEN_ISOLATION"] == "process"  # the task definition's
        if task["container"] == "prepare":
            assert task["credentials"]  # instance.json, with its role
            assert "SWEGREEN_INPUT_URL" not in task["env"]
        else:
            # The evaluate task worked with no credentials at all: through its URLs.
            assert not task["credentials"]
            assert "SWEGREEN_BUCKET" not in task["env"]
            assert task["env"]["SWEGREEN_INPUT_URL"].startswith(cloud.emulator.endpoint)
            assert task["env"]["SWEGREEN_MODEL"] == "gold"
            # Once the row is written, its input (with its live upload URLs) is gone.
            key = f"runs/gold/instances/{task['instance_id']}/sandbox-input.json"
            with pytest.raises(ClientError, match="404"):
                cloud.emulator.client("s3").head_object(Bucket=cloud.bucket, Key=key)


def test_a_hostile_patch_cannot_write_the_shared_cache(cloud: Cloud) -> None:
    """The tests of the evaluate task find the shared cache among their mounts and try to
    leave a file in every environment and git mirror: refused; in the task's own copies
    (gone with the task) the same code succeeds, so it did run."""
    if cloud.hostile_report is None:
        pytest.skip("bubblewrap cannot run here: the emulator cannot mount the cache read-only")
    assert cloud.outcomes[HOSTILE]["status"] == "SUCCEEDED"
    (row,) = cloud.rows(HOSTILE).values()
    assert (row["status"], row["model_name_or_path"]) == ("resolved", HOSTILE)
    report = cloud.hostile_report.read_text().splitlines()
    shared = str(cloud.emulator.host_path(SHARED_MOUNT))
    refused = [line for line in report if line.startswith(f"refused {shared}/")]
    assert any("/envs/" in line for line in refused), report
    assert any("/repos/" in line for line in refused), report
    assert all(line.endswith("Read-only file system") for line in refused), refused
    assert not [line for line in report if line.startswith(f"wrote {shared}/")], report
    assert any(line.startswith("wrote ") for line in report), report  # its own copy
    efs = cloud.emulator.efs_dir
    assert not [*efs.glob(f"envs/*/{MARK}"), *efs.glob(f"repos/*/{MARK}")]


def test_an_a2a_participant_is_dispatched_and_polled(cloud: Cloud) -> None:
    assert cloud.outcomes["a2a"]["status"] == "SUCCEEDED"
    rows = cloud.rows("a2a")
    assert len(rows) == 3
    assert {r["status"] for r in rows.values()} == {"resolved"}
    assert all(r["model_name_or_path"] == "agent" for r in rows.values())
    assert cloud.leaderboard("a2a")["participant"] == "agent"


def test_a_participant_that_never_answers_times_out_and_is_cancelled(cloud: Cloud) -> None:
    """As in a local run: the participant's failure, not an infrastructure error."""
    assert cloud.outcomes["hang"]["status"] == "SUCCEEDED"
    (row,) = cloud.rows("hang").values()
    assert (row["status"], row["reason"]) == ("no_op", "participant_timeout")
    assert row["durations"]["participant"] >= 8
    board = cloud.leaderboard("hang")
    assert board["participant_failures"] == 1 and board["no_op_pct"] == 1.0
    polls = [n for n, _, _ in cloud.emulator.invocations if "Poll" in n]
    assert polls, "the participant was never polled"


def test_injected_failures_become_error_rows_and_the_run_still_finishes(cloud: Cloud) -> None:
    assert cloud.outcomes[FAULTS]["status"] == "SUCCEEDED"
    ids = sorted(cloud.sample.expected)[:4]
    rows = cloud.rows(FAULTS)
    assert sorted(rows) == ids  # nothing lost, nothing duplicated
    crashed, thrown, lost, healthy = (rows[i] for i in ids)
    assert (crashed["status"], crashed["reason"]) == ("error", "sandbox_crashed")
    assert (thrown["status"], thrown["reason"]) == ("error", "internal_error")
    assert "injected fault" in thrown["detail"]
    assert (lost["status"], lost["reason"]) == ("error", "internal_error")
    assert "ended without a row" in lost["detail"]
    assert healthy["status"] == "resolved"
    board = cloud.leaderboard(FAULTS)
    assert board["counts"]["error"] == 3 and board["counts"]["resolved"] == 1
    assert board["infrastructure_errors"] == 3
    assert board["error_pct"] == 0.75
