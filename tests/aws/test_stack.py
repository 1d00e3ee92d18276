"""The synthesized CloudFormation template (``cdk synth`` by the pinned CLI): what the state
machine does per row, and the security properties the stack promises."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from infra.front_door import RUN_REQUEST_SCHEMA
from infra.sandbox import CACHE_MOUNT, GRADER_USER, SANDBOX_UID
from infra.settings import StackSettings
from infra.states import MAP_RESULTS
from swegreen.aws.dynamo_store import RUNNING_INDEX, RUNNING_KEY
from swegreen.aws.endpoints import EndpointSpec
from swegreen.aws.pipeline import (
    SANDBOX_URL_SECONDS,
    Attempt,
    Item,
    PatchState,
    RunRequest,
    SandboxTicket,
)
from swegreen.core.classify import Status
from swegreen.sandbox.isolation import DEFAULT_SANDBOX_UID
from tests.aws.conftest import STACK

ROOT = Path(__file__).resolve().parents[2]
JSON = "application/json"
pytestmark = pytest.mark.timeout(1200)  # the first test's setup runs `cdk synth` (900 s at most)


def resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def render(value: Any) -> str:
    """A DefinitionString's Fn::Join with every reference as a placeholder."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return sep.join(render(p) for p in parts)
    return "REF"


@pytest.fixture(scope="module")
def machines(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The two state machines' definitions: "Pipeline" (one per run) and "Rows"."""
    found = {}
    for name, machine in resources(template, "AWS::StepFunctions::StateMachine").items():
        kind = "Rows" if name.startswith("WorkflowRows") else "Pipeline"
        found[kind] = json.loads(render(machine["Properties"]["DefinitionString"]))
    assert set(found) == {"Pipeline", "Rows"}
    return found


def states(definition: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every state, nested Map item processors included."""
    for name, state in definition["States"].items():
        yield name, state
        processor = state.get("ItemProcessor") or state.get("Iterator")
        if processor:
            yield from states(processor)


def test_every_map_is_distributed_reads_s3_and_writes_its_results_to_s3(
    machines: dict[str, dict[str, Any]],
) -> None:
    """History- and payload-safe at any size: no inline Map (its iterations share the
    parent's 25,000-event history), every Map reads its items from S3 and writes its
    results there (500 child outputs would pass the 256 KB payload limit otherwise)."""
    maps = {
        name: state
        for machine in machines.values()
        for name, state in states(machine)
        if state["Type"] == "Map"
    }
    assert set(maps) == {"Rows", "Builds", "Prepares"}
    keys = {"Rows": "items_key", "Builds": "builds_key", "Prepares": "prepares_key"}
    for name, state in maps.items():
        assert state["ItemProcessor"]["ProcessorConfig"]["Mode"] == "DISTRIBUTED", name
        assert state["ItemProcessor"]["ProcessorConfig"]["ExecutionType"] == "STANDARD"
        assert state["ItemReader"]["Resource"].endswith(":states:::s3:getObject")
        assert state["ItemReader"]["Parameters"]["Key.$"] == f"$.resolved.{keys[name]}"
        assert state["ResultWriter"]["Resource"].endswith(":states:::s3:putObject")
        assert state["ResultWriter"]["Parameters"]["Prefix"].startswith(MAP_RESULTS)
        assert state["ToleratedFailurePercentage"] == 100  # a failed item is a row, not a run
    assert maps["Rows"]["MaxConcurrencyPath"] == "$.resolved.max_concurrency"
    for name in ("Builds", "Prepares"):
        assert maps[name]["MaxConcurrencyPath"] == "$.resolved.build_concurrency"


def test_the_pipeline_builds_then_prepares_then_runs_the_rows_within_the_runs_own_time(
    machines: dict[str, dict[str, Any]],
) -> None:
    pipeline = machines["Pipeline"]
    top = pipeline["States"]
    assert pipeline["StartAt"] == "Resolve" and top["Resolve"]["Next"] == "DryRun?"
    # a dry run stops at its estimate; a real one makes its closed rows' endpoints first
    assert top["DryRun?"]["Choices"][0]["Next"] == "Estimated"
    assert top["DryRun?"]["Default"] == "Endpoints"
    assert top["Endpoints"]["Next"] == "Builds?"
    assert [c["Next"] for c in top["Endpoints"]["Catch"]] == ["RecordRunFailure", "Builds?"]
    assert top["Builds?"]["Choices"][0]["Next"] == "Builds"
    assert top["Builds?"]["Default"] == "Prepares?"
    assert top["Builds"]["Next"] == "Prepares?"
    assert top["Prepares?"]["Choices"][0]["Next"] == "Prepares"
    assert top["Prepares?"]["Default"] == top["Prepares"]["Next"] == "RowsPhase"
    rows = top["RowsPhase"]
    assert rows["Resource"].endswith(":states:::states:startExecution.sync:2")
    # the run's size, not a fixed two days, bounds its rows (Resolve computes it)
    assert rows["TimeoutSecondsPath"] == "$.resolved.timeout_seconds"
    assert rows["Parameters"]["Name.$"] == "States.Format('{}-rows', $.run_id)"
    assert rows["Next"] == "Aggregate"
    assert [c["Next"] for c in rows["Catch"]] == ["Aggregate"]  # a leaderboard, always
    for phase in ("Builds", "Prepares"):  # a failed phase leaves the rows to report it
        assert top[phase]["Catch"][0]["ErrorEquals"] == ["States.ALL"]


def test_every_row_step_retries_with_jitter_and_falls_back_to_an_error_row(
    machines: dict[str, dict[str, Any]],
) -> None:
    row = dict(states(machines["Rows"]))
    assert row["Participant?"]["Choices"][0]["Next"] == "BatchStart"
    assert row["Participant?"]["Choices"][1]["Next"] == "DispatchWait"
    assert row["Participant?"]["Default"] == "Dispatch"
    for step in ("Dispatch", "DispatchWait", "Presign", "Classify"):
        state = row[step]
        (retry,) = state["Retry"]
        assert "Lambda.TooManyRequestsException" in retry["ErrorEquals"], step
        assert retry["JitterStrategy"] == "FULL" and retry["MaxDelaySeconds"] <= 60
        assert [c["Next"] for c in state["Catch"]] == ["RecordError"]
        assert state["Catch"][0]["ErrorEquals"] == ["States.ALL"]
    # A participant is waited for on a callback token (Watch completes it): no polling
    # loop, no state transitions while it works, bounded by the row's own deadline.
    wait = row["DispatchWait"]
    assert wait["Resource"].endswith(":states:::lambda:invoke.waitForTaskToken")
    assert wait["Parameters"]["Payload"]["token.$"] == "$$.Task.Token"
    assert wait["TimeoutSecondsPath"] == "$.item.wait_seconds"
    assert not [s for s in row.values() if s["Type"] == "Wait" and "Participant" in str(s)]
    assert Item.model_fields["wait_seconds"].annotation is int
    # The evaluate task's URLs are signed right before each attempt starts: the first,
    # and every one TaskRetry sends back after its wait.
    assert row["HasPatch"]["Choices"][0]["Next"] == "EvaluateFirstAttempt"
    assert row["EvaluateFirstAttempt"]["Next"] == "Presign"
    assert row["EvaluateBackoff"]["Next"] == "Presign"
    assert row["Presign"]["Next"] == "EvaluateCapacity?"
    assert row["Presign"]["ResultPath"] == "$.sandbox"  # the new URLs replace the old
    assert row["EvaluateDone"]["Next"] == "Classify"


@pytest.mark.parametrize(
    ("machine", "task", "container", "command"),
    [
        ("Pipeline", "Build", "builder", "build"),
        ("Pipeline", "Prepare", "builder", "prepare"),
        ("Rows", "Evaluate", "sandbox", "evaluate"),
    ],
)
def test_fargate_tasks_start_on_spot_and_survive_their_infrastructure(
    machines: dict[str, dict[str, Any]], machine: str, task: str, container: str, command: str
) -> None:
    """Spot first; a failed task goes to TaskRetry, whose answer says whether to run it
    again (after its jittered wait, on the capacity it names: on-demand after Spot failed
    twice) or to give the row its error."""
    row = dict(states(machines[machine]))
    first = row[f"{task}FirstAttempt"]
    assert first["Result"]["capacity"] == "FARGATE_SPOT" and first["ResultPath"] == "$.attempt"
    signs = "Presign" if task == "Evaluate" else f"{task}Capacity?"  # its URLs, per attempt
    assert first["Next"] == signs
    capacity = row[f"{task}Capacity?"]
    assert capacity["Choices"][0]["StringEquals"] == "FARGATE"
    assert capacity["Choices"][0]["Next"] == f"{task}OnDemand"
    assert capacity["Default"] == f"{task}Spot"
    for suffix, provider in (("Spot", "FARGATE_SPOT"), ("OnDemand", "FARGATE")):
        state = row[f"{task}{suffix}"]
        assert state["Resource"].endswith(":states:::ecs:runTask.sync")
        params = state["Parameters"]
        assert params["CapacityProviderStrategy"] == [{"CapacityProvider": provider, "Weight": 1}]
        assert "LaunchType" not in params
        assert state["TimeoutSeconds"] < SANDBOX_URL_SECONDS  # the task's URLs outlive it
        # the row's input survives the task (the ECS answer goes beside it, trimmed)
        assert state["ResultPath"] == "$.task"
        assert state["ResultSelector"] == {"task_arn.$": "$.TaskArn"}
        (retry,) = state["Retry"]
        assert "ECS.ThrottlingException" in retry["ErrorEquals"]
        assert retry["JitterStrategy"] == "FULL"
        assert state["Catch"] == [
            {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": f"{task}Failed"}
        ]
        (override,) = params["Overrides"]["ContainerOverrides"]
        assert (override["Name"], override["Command"]) == (container, [command])
    decide = row[f"{task}Failed"]
    assert decide["ResultPath"] == "$.attempt" and decide["Next"] == f"{task}Again?"
    again = row[f"{task}Again?"]
    assert again["Choices"][0]["Variable"] == "$.attempt.retry"
    assert again["Choices"][0]["Next"] == f"{task}Backoff"
    backoff = row[f"{task}Backoff"]
    assert backoff["SecondsPath"] == "$.attempt.wait_seconds"
    assert backoff["Next"] == signs
    assert set(Attempt.model_fields) >= {"number", "capacity", "wait_seconds", "retry"}


def test_container_environment_values_are_strings(machines: dict[str, dict[str, Any]]) -> None:
    """Real ECS refuses a non-string environment value (emulators take them)."""
    models = {"item": Item, "patch": PatchState, "sandbox": SandboxTicket}
    row = dict(states(machines["Rows"]))
    evaluate = _overrides(row["EvaluateSpot"])
    for pair in evaluate:
        assert set(pair) == {"Name", "Value.$"}, pair  # no literal (non-string) values
        _, model, field = pair["Value.$"].split(".")
        annotation = models[model].model_fields[field].annotation
        assert annotation is str, f"{pair['Name']} <- {pair['Value.$']} is {annotation}"
    assert {p["Name"]: p["Value.$"] for p in evaluate}["SWEGREEN_INPUT_URL"] == (
        "$.sandbox.input_url"
    )
    build = {
        p["Name"]: p["Value.$"] for p in _overrides(dict(states(machines["Pipeline"]))["BuildSpot"])
    }
    # the item's index is a number: formatted into a string
    assert build["SWEGREEN_ITEM_INDEX"] == "States.Format('{}', $.index)"
    assert "SWEGREEN_INPUT_URL" not in build


def _overrides(task: dict[str, Any]) -> list[dict[str, str]]:
    (override,) = task["Parameters"]["Overrides"]["ContainerOverrides"]
    return override["Environment"]


def _task_definitions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Container name -> its task definition's properties (one container each)."""
    found = {}
    for task in resources(template, "AWS::ECS::TaskDefinition").values():
        (container,) = task["Properties"]["ContainerDefinitions"]
        found[container["Name"]] = task["Properties"]
    return found


def _statements(template: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [
        statement
        for policy in resources(template, "AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def _actions(statement: dict[str, Any]) -> set[str]:
    actions = statement["Action"]
    return {actions} if isinstance(actions, str) else set(actions)


def test_the_sandbox_tasks_run_tests_as_a_uid_of_their_own_in_the_isolation_they_opt_into(
    template: dict[str, Any], assembly: Path
) -> None:
    """The builder runs as the image's unprivileged user; the evaluate task starts as root
    only for its engine (the grader), which runs the tests as another uid (setpriv:
    tests/test_sandbox.py shows that uid can write neither the grader's files nor its log)."""
    tasks = _task_definitions(template)
    assert set(tasks) == {"builder", "sandbox"}
    dockerfile = (ROOT / "container" / "Dockerfile").read_text()
    sandbox_stage = dockerfile[dockerfile.index("AS sandbox") :]
    assert f"ARG SANDBOX_UID={SANDBOX_UID}" in sandbox_stage
    assert "\nUSER $SANDBOX_UID:$SANDBOX_UID\n" in sandbox_stage
    users = {name: task["ContainerDefinitions"][0]["User"] for name, task in tasks.items()}
    assert users == {"builder": f"{SANDBOX_UID}:{SANDBOX_UID}", "sandbox": GRADER_USER}
    assert GRADER_USER == "0:0" and len({0, SANDBOX_UID, DEFAULT_SANDBOX_UID}) == 3
    for name, task in tasks.items():
        (container,) = task["ContainerDefinitions"]
        assert not container.get("Privileged"), name
        assert "LinuxParameters" not in container, name  # no added capability
        env = {e["Name"]: e["Value"] for e in container["Environment"]}
        # Fargate cannot run bubblewrap: the weaker mode is chosen explicitly, not fallen into.
        assert env["SWEGREEN_ISOLATION"] == "process", name
        assert env["SWEGREEN_CACHE_DIR"] == CACHE_MOUNT  # where artifacts unpack
        assert container["Command"] == ["build" if name == "builder" else "evaluate"]
        assert task["RuntimePlatform"]["CpuArchitecture"] == "X86_64"
        assert "Volumes" not in task  # the task's own disk: no shared file system
    # The image is built for the platform the tasks run on, wherever `cdk deploy` runs.
    manifest = json.loads((assembly / "SweGreen.assets.json").read_text())
    (image,) = manifest["dockerImages"].values()
    assert image["source"]["platform"] == "linux/amd64"
    assert image["source"]["dockerBuildTarget"] == "sandbox"


def test_the_evaluate_task_holds_no_permission_and_the_builder_only_the_artifacts(
    template: dict[str, Any],
) -> None:
    assert not resources(template, "AWS::EFS::FileSystem")  # nothing shared and writable
    tasks = _task_definitions(template)
    (evaluate,) = tasks["sandbox"]["ContainerDefinitions"]
    evaluate_env = {e["Name"] for e in evaluate["Environment"]}
    assert "SWEGREEN_BUCKET" not in evaluate_env  # it reaches S3 through pre-signed URLs only
    role = tasks["sandbox"]["TaskRoleArn"]["Fn::GetAtt"][0]
    assert _statements(template, role) == []
    role = tasks["builder"]["TaskRoleArn"]["Fn::GetAtt"][0]
    granted: dict[str, list[str]] = {}
    for statement in _statements(template, role):
        assert statement["Effect"] == "Allow"
        resources_ = statement["Resource"]
        resources_ = resources_ if isinstance(resources_, list) else [resources_]
        for action in _actions(statement):
            granted.setdefault(action, []).extend(render(r) for r in resources_)
    assert set(granted) == {"s3:GetObject", "s3:PutObject", "s3:ListBucket"}
    assert all(r.endswith("/artifacts/*") for r in granted["s3:PutObject"])
    reads = sorted(r.split("/", 1)[1] for r in granted["s3:GetObject"])
    assert reads == [
        "artifacts/*",
        "runs/*/builds.json",
        "runs/*/instances/*/instance.json",
        "runs/*/prepares.json",
    ]


def test_the_state_machine_is_standard_logged_and_traced(template: dict[str, Any]) -> None:
    Template.from_json(template).has_resource_properties(
        "AWS::StepFunctions::StateMachine",
        {
            "StateMachineType": "STANDARD",  # .sync waits and 30-minute participants
            "TracingConfiguration": {"Enabled": True},
            "LoggingConfiguration": Match.object_like({"Level": "ERROR"}),
        },
    )


def test_storage_is_encrypted_private_and_keyed_as_the_local_store(
    template: dict[str, Any],
) -> None:
    t = Template.from_json(template)
    t.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
                ]
            },
            "PublicAccessBlockConfiguration": {
                "BlockPublicAcls": True,
                "BlockPublicPolicy": True,
                "IgnorePublicAcls": True,
                "RestrictPublicBuckets": True,
            },
        },
    )
    t.has_resource_properties(  # TLS only
        "AWS::S3::BucketPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            }
        },
    )
    t.resource_count_is("AWS::DynamoDB::Table", 2)
    t.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "KeySchema": [
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            "SSESpecification": {"SSEEnabled": True},
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
        },
    )
    for table in resources(template, "AWS::DynamoDB::Table").values():
        assert table["Properties"]["SSESpecification"] == {"SSEEnabled": True}


def test_resolve_reads_the_running_runs_through_their_index(template: dict[str, Any]) -> None:
    """The sparse index the store queries for the runs sharing the quotas exists, and
    Resolve's Query reaches it (a grant on the table alone does not cover its indexes)."""
    [results] = [
        t for t in resources(template, "AWS::DynamoDB::Table").values()
        if "GlobalSecondaryIndexes" in t["Properties"]
    ]  # fmt: skip
    [index] = results["Properties"]["GlobalSecondaryIndexes"]
    assert index["IndexName"] == RUNNING_INDEX
    assert index["KeySchema"] == [{"AttributeName": RUNNING_KEY, "KeyType": "HASH"}]
    queries = [
        json.dumps(statement["Resource"])
        for name, policy in resources(template, "AWS::IAM::Policy").items()
        if name.startswith("WorkflowResolve")
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "dynamodb:Query" in statement["Action"]
    ]
    assert queries and all("/index/*" in q for q in queries), queries


def test_every_log_group_has_a_retention(template: dict[str, Any]) -> None:
    groups = resources(template, "AWS::Logs::LogGroup")
    assert len(groups) >= 12  # eight functions, two state machines, the sandbox, API access
    for name, group in groups.items():
        assert group["Properties"].get("RetentionInDays") == 30, name
    for name, fn in resources(template, "AWS::Lambda::Function").items():
        assert "LoggingConfig" in fn["Properties"], f"{name} logs to a group without retention"


# Wildcard resources CDK emits for actions that have no resource-level permissions, or
# that the service names at run time (X-Ray, ECR login, SFN log delivery, ECS task ids).
WILDCARD_OK = {
    # no resource type in the service authorization reference: "*" is the only resource
    # they accept (the task token is the scope)
    "states:SendTaskSuccess",
    "states:SendTaskFailure",
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "xray:GetSamplingRules",
    "xray:GetSamplingTargets",
    "ecr:GetAuthorizationToken",
    "logs:CreateLogDelivery",
    "logs:GetLogDelivery",
    "logs:UpdateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:DescribeResourcePolicies",
    "logs:DescribeLogGroups",
    "ec2:DescribeVpcEndpoints",
    # the account's Lambda concurrency (Resolve's fit): an account-level read, no resource
    "lambda:GetAccountSettings",
    # private DNS of an interface endpoint: the zone is AWS's own, its ARN unknown to us
    "route53:AssociateVPCWithHostedZone",
    # the region's S3 prefix list (AccountSetup): AWS's, found by its name
    "ec2:DescribeManagedPrefixLists",
}


def test_iam_is_least_privilege(template: dict[str, Any]) -> None:
    grants: dict[str, set[str]] = {}
    for name, policy in resources(template, "AWS::IAM::Policy").items():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"]
            actions = [actions] if isinstance(actions, str) else actions
            assert all(a != "*" and not a.endswith(":*") for a in actions), (name, actions)
            # no object versions deleted, no wildcard deletes (CDK's grantReadWrite has both)
            assert not [a for a in actions if a.startswith("s3:Delete") and a != "s3:DeleteObject"]
            if statement.get("Resource") == "*":
                assert set(actions) <= WILDCARD_OK, (name, actions)
            if statement["Effect"] == "Allow":
                grants.setdefault(name, set()).update(actions)
    by_role = {k.removeprefix("Workflow").split("ServiceRole")[0]: v for k, v in grants.items()}
    dynamodb = {r: {a for a in acts if a.startswith("dynamodb:")} for r, acts in by_role.items()}
    assert dynamodb["Dispatch"] == {"dynamodb:PutItem"}  # a row waiting for its participant
    assert dynamodb["Watch"] == {"dynamodb:Query", "dynamodb:DeleteItem"}
    assert dynamodb["Classify"] == {
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:GetItem",  # the idempotency table
        "dynamodb:DeleteItem",
    }
    for role, acts in dynamodb.items():
        assert not acts & {"dynamodb:Scan", "dynamodb:DeleteTable", "dynamodb:BatchWriteItem"}, role
    assert dynamodb["Stopped"] == {"dynamodb:UpdateItem", "dynamodb:PutItem"}
    assert dynamodb["Presign"] == set() and dynamodb["TaskRetry"] == set()
    # the task-token callbacks: exactly the two that hand patches back, as authorized
    callbacks = [
        (n, s)
        for n, policy in resources(template, "AWS::IAM::Policy").items()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if _actions(s) & {"states:SendTaskSuccess", "states:SendTaskFailure"}
    ]
    assert sorted(n.removeprefix("Workflow").split("ServiceRole")[0] for n, _ in callbacks) == [
        "Dispatch",
        "Watch",
    ]
    for _, statement in callbacks:
        assert statement["Resource"] == "*", statement
        assert _actions(statement) == {"states:SendTaskSuccess", "states:SendTaskFailure"}
    # Resolve reads the Fargate quotas (to fit the run to them), no other service's
    quota_reads = [
        s
        for n, policy in resources(template, "AWS::IAM::Policy").items()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if "servicequotas:GetServiceQuota" in _actions(s)
    ]
    (quota_read,) = quota_reads
    assert render(quota_read["Resource"]).endswith(":fargate/*")
    assert {
        r for r, acts in by_role.items() if any(a.startswith("servicequotas:") for a in acts)
    } == {"Resolve"}
    assert by_role["TaskRetry"] <= WILDCARD_OK  # logs and traces, nothing else
    for task in ("SandboxTaskTask", "SandboxBuilderTask"):
        acts = next((acts for role, acts in by_role.items() if role.startswith(task)), set())
        assert not any(a.startswith("dynamodb:") for a in acts), task
    # The state machines run only this cluster's two task definitions, and read only the
    # maps' item lists and write only their results, whatever CDK granted.
    for machine in ("WorkflowPipelineRole", "WorkflowRowsRole"):
        (policy,) = [
            p for n, p in resources(template, "AWS::IAM::Policy").items() if n.startswith(machine)
        ]
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        (deny,) = [s for s in statements if s["Effect"] == "Deny"]
        assert _actions(deny) == {"s3:GetObject", "s3:PutObject"}
        allowed = sorted(render(r).split("/", 1)[1] for r in deny["NotResource"])
        assert allowed == [
            "map-results/*",
            "runs/*/builds.json",
            "runs/*/items.json",
            "runs/*/prepares.json",
        ]
        (run_task,) = [s for s in statements if "ecs:RunTask" in _actions(s)]
        assert "ecs:cluster" in run_task["Condition"]["ArnEquals"]
        (stop,) = [s for s in statements if "ecs:StopTask" in _actions(s)]
        assert ":task/" in render(stop["Resource"])  # this cluster's tasks, not "*"


def test_the_api_starts_and_reads_runs_with_authentication_and_validation(
    template: dict[str, Any],
) -> None:
    methods = resources(template, "AWS::ApiGateway::Method")
    # POST /runs, GET and DELETE /runs/{id}, GET /runs/{id}/results and .../results/{page},
    # PUT /predictions, POST /predictions/uploads
    assert sorted(m["Properties"]["HttpMethod"] for m in methods.values()) == [
        "DELETE",
        "GET",
        "GET",
        "GET",
        "POST",
        "POST",
        "PUT",
    ]
    for method in methods.values():
        assert method["Properties"]["AuthorizationType"] == "AWS_IAM"
    lambdas = {
        k: m for k, m in methods.items() if m["Properties"]["Integration"]["Type"] == "AWS_PROXY"
    }
    methods = {k: m for k, m in methods.items() if k not in lambdas}
    (post,) = [m for m in methods.values() if m["Properties"]["HttpMethod"] == "POST"]
    assert "RequestValidatorId" in post["Properties"]
    assert set(post["Properties"]["RequestModels"]) == {"application/json"}
    integration = post["Properties"]["Integration"]
    assert integration["Type"] == "AWS"
    assert ":states:action/StartExecution" in json.dumps(integration["Uri"])
    (delete,) = [m for m in methods.values() if m["Properties"]["HttpMethod"] == "DELETE"]
    assert ":states:action/StopExecution" in json.dumps(delete["Properties"]["Integration"]["Uri"])
    (model,) = resources(template, "AWS::ApiGateway::Model").values()
    schema = model["Properties"]["Schema"]
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == {
        "participants",
        "patches",
        "config",
        "rebuild_envs",
        "batch",
        "dry_run",
    }
    assert set(schema["properties"]) == set(RunRequest.model_fields)
    for method in methods.values():  # never a success for an error, never an empty answer
        integration = method["Properties"]["Integration"]
        answers = {r["StatusCode"]: r for r in integration["IntegrationResponses"]}
        default = [r for r in answers.values() if "SelectionPattern" not in r]
        assert [r["StatusCode"] for r in default] == ["502"], method
        ok = [r for r in answers.values() if r["StatusCode"].startswith("2")]
        assert [r.get("SelectionPattern") for r in ok] == ["2\\d{2}"]
        statuses = {r["StatusCode"] for r in method["Properties"]["MethodResponses"]}
        assert {"404", "429", "502"} <= statuses
    # PUT /predictions and POST /predictions/uploads: the Predictions function (it checks
    # the file: swegreen.aws.predictions_upload), whose role may put under the uploads
    # prefix and nowhere else (what its pre-signed URLs can do too)
    assert sorted(m["Properties"]["HttpMethod"] for m in lambdas.values()) == ["POST", "PUT"]
    targets = {json.dumps(m["Properties"]["Integration"]["Uri"]) for m in lambdas.values()}
    assert len(targets) == 1 and "WorkflowPredictions" in targets.pop()
    puts = [
        render(r)
        for name, policy in resources(template, "AWS::IAM::Policy").items()
        if name.startswith("WorkflowPredictions")
        for st in policy["Properties"]["PolicyDocument"]["Statement"]
        if "s3:PutObject" in _actions(st)
        for r in (st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]])
    ]
    assert puts == ["REF/predictions/uploads/*"], puts
    assert (
        not [  # and the API's own role puts nothing anywhere
            st
            for policy in resources(template, "AWS::IAM::Policy").values()
            if "IntegrationRole" in json.dumps(policy["Properties"]["Roles"])
            for st in policy["Properties"]["PolicyDocument"]["Statement"]
            if "s3:PutObject" in _actions(st)
        ]
    )
    start_template = render(post["Properties"]["Integration"]["RequestTemplates"][JSON])
    # $util.escapeJavaScript turns ' into \' (invalid JSON): undone after every escape
    assert start_template.count("escapeJavaScript") == start_template.count("replaceAll")


def test_stack_settings_refuse_bad_context_with_the_key_named() -> None:
    assert StackSettings().sandbox_cpu == 2048
    assert StackSettings.model_validate({"sandbox_cpu": "4096", "sandbox_memory_mib": "16384"})
    with pytest.raises(ValueError, match="Fargate with 4096 CPU units takes 8192-30720 MiB"):
        StackSettings(sandbox_cpu=4096, sandbox_memory_mib=4096)
    with pytest.raises(ValueError, match="build_cpu must be one of"):
        StackSettings(build_cpu=3000)
    with pytest.raises(ValueError, match=r"one of .*CloudWatch"):
        StackSettings(log_retention_days=31)
    with pytest.raises(ValueError, match="Input should be 'iam' or 'api_key'"):
        StackSettings(api_auth="none")


def test_the_lambda_package_is_small_and_imports_without_the_grader(
    lambda_asset: Path, lambda_python: Path
) -> None:
    """The functions import in Python 3.12 from their own package alone, without the
    grader's dependencies (those live in the sandbox image)."""
    import subprocess

    size = sum(p.stat().st_size for p in lambda_asset.rglob("*") if p.is_file())
    assert size < 150 * 2**20, f"Lambda package is {size / 2**20:.0f} MiB unzipped"
    for heavy in ("swebench", "datasets", "litellm", "docker", "uv"):
        assert not (lambda_asset / heavy).exists(), heavy
    probe = (
        "import sys\n"
        "import resolve, dispatch, watch, presign, classify, aggregate, stopped, retry\n"
        "import predictions\n"
        "import swegreen.a2a.polled  # Dispatch and Watch import it on demand\n"
        "import swegreen.a2a.participant_client\n"
        "heavy = {'swebench', 'datasets', 'litellm', 'docker', 'rich', 'yaml'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
        "print(sys.version_info[:2])\n"
    )
    env = {
        "SWEGREEN_TABLE": "t",
        "SWEGREEN_BUCKET": "b",
        "SWEGREEN_IDEMPOTENCY_TABLE": "i",
        "AWS_DEFAULT_REGION": "us-east-1",
        "PATH": "/usr/bin:/bin",
    }
    proc = subprocess.run(
        [str(lambda_python), "-I", "-c", f"import sys; sys.path.insert(0, '.')\n{probe}"],
        cwd=lambda_asset,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "(3, 12)"


GOOD_BODIES = [
    {"participants": {"agent": "http://127.0.0.1:9019/"}},
    {"participants": {"agent": "https://a.example/"}, "config": {"max_rows": 5}},
    {"patches": "gold"},
    {"patches": "predictions/mine.jsonl", "config": {}},
]
BAD_BODIES = [
    {"participants": {"agent": "ftp://x"}},
    {"participants": {"a": "http://a/", "b": "http://b/"}},
    {"patches": ""},
    {"patches": "gold", "extra": 1},
    {"participants": "http://a/"},
]


@pytest.mark.parametrize("body", GOOD_BODIES)
def test_the_api_schema_accepts_what_the_pipeline_accepts(body: dict[str, Any]) -> None:
    import jsonschema

    jsonschema.validate(body, RUN_REQUEST_SCHEMA)
    RunRequest.model_validate(body)


def test_the_api_schema_holds_requests_to_the_deployments_ceilings(
    template: dict[str, Any],
) -> None:
    import jsonschema

    from infra.front_door import run_request_schema
    from swegreen.aws.guardrails import Guardrails

    schema = run_request_schema(Guardrails(max_concurrent_rows=50, max_eval_timeout=600))
    jsonschema.validate({"patches": "gold", "config": {"max_concurrent_rows": 50}}, schema)
    jsonschema.validate({"patches": "gold", "config": {"eval_timeout": None}}, schema)
    for config in ({"max_concurrent_rows": 51}, {"eval_timeout": 601}, {"max_concurrent_rows": 0}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"patches": "gold", "config": config}, schema)
    # the deployed model carries the stack's ceilings (defaults here), and so do the Lambdas
    (model,) = resources(template, "AWS::ApiGateway::Model").values()
    config = model["Properties"]["Schema"]["properties"]["config"]["properties"]
    assert config["max_concurrent_rows"]["maximum"] == Guardrails().max_concurrent_rows
    (resolve,) = [
        f
        for n, f in resources(template, "AWS::Lambda::Function").items()
        if n.startswith("WorkflowResolve")
    ]
    env = resolve["Properties"]["Environment"]["Variables"]
    assert Guardrails.model_validate_json(env["SWEGREEN_GUARDRAILS"]) == Guardrails()


def test_guardrails_come_from_the_stack_context_and_bad_ones_are_named() -> None:
    settings = StackSettings.model_validate({"guardrails": '{"max_concurrent_rows": 20}'})
    assert settings.guardrails.max_concurrent_rows == 20
    with pytest.raises(ValueError, match="max_eval_timeout"):
        StackSettings.model_validate({"guardrails": '{"max_eval_timeout": 99999}'})


@pytest.mark.parametrize("body", BAD_BODIES)
def test_the_api_schema_refuses_what_the_pipeline_refuses(body: dict[str, Any]) -> None:
    import jsonschema
    from pydantic import ValidationError

    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, RUN_REQUEST_SCHEMA)
    with pytest.raises(ValidationError):
        RunRequest.model_validate(body)


def test_an_execution_that_ends_unfinished_updates_its_run(template: dict[str, Any]) -> None:
    """Stopped through the API, timed out or failed: EventBridge tells the Stopped function
    (what it cannot deliver goes to a dead-letter queue, watched by an alarm), so the run's
    record never stays "running"."""
    rules = resources(template, "AWS::Events::Rule")
    (rule,) = [r for r in rules.values() if "EventPattern" in r["Properties"]]
    pattern = rule["Properties"]["EventPattern"]
    assert pattern["source"] == ["aws.states"]
    assert pattern["detail-type"] == ["Step Functions Execution Status Change"]
    assert pattern["detail"]["status"] == ["ABORTED", "TIMED_OUT", "FAILED"]
    assert "WorkflowPipeline" in json.dumps(pattern["detail"]["stateMachineArn"])
    (target,) = rule["Properties"]["Targets"]
    assert "WorkflowStopped" in json.dumps(target["Arn"])
    assert "WorkflowEventDeadLetters" in json.dumps(target["DeadLetterConfig"])
    # Watch polls waiting participants every minute, also with a dead-letter queue.
    (watch,) = [r for r in rules.values() if "ScheduleExpression" in r["Properties"]]
    assert watch["Properties"]["ScheduleExpression"] == "rate(1 minute)"
    (target,) = watch["Properties"]["Targets"]
    assert "WorkflowWatch" in json.dumps(target["Arn"]) and "DeadLetterConfig" in target


def test_failed_executions_and_undelivered_events_raise_alarms(template: dict[str, Any]) -> None:
    alarms = resources(template, "AWS::CloudWatch::Alarm")
    metrics = {a["Properties"].get("MetricName") for a in alarms.values()}
    assert {"ExecutionsFailed", "ExecutionsTimedOut", "ApproximateNumberOfMessagesVisible"} <= (
        metrics
    )
    (topic,) = resources(template, "AWS::SNS::Topic")
    for alarm in alarms.values():
        assert json.dumps(alarm["Properties"]["AlarmActions"]).count(topic) == 1
    # under a key of the stack's own whose policy lets CloudWatch publish (the AWS managed
    # SNS key would refuse it), for this account only, and rotated
    key_ref = template["Resources"][topic]["Properties"]["KmsMasterKeyId"]
    (key_name,) = resources(template, "AWS::KMS::Key")
    assert json.dumps(key_ref).count(key_name) == 1, key_ref
    key = template["Resources"][key_name]["Properties"]
    assert key["EnableKeyRotation"] is True
    (cloudwatch,) = [
        s
        for s in key["KeyPolicy"]["Statement"]
        if s.get("Principal", {}).get("Service") == "cloudwatch.amazonaws.com"
    ]
    assert _actions(cloudwatch) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    assert "aws:SourceAccount" in cloudwatch["Condition"]["StringEquals"]


def _math_alarm(template: dict[str, Any], name: str) -> dict[str, Any]:
    (alarm,) = [
        a["Properties"]
        for n, a in resources(template, "AWS::CloudWatch::Alarm").items()
        if n.startswith(f"Workflow{name}")
    ]
    return alarm


def test_a_run_of_error_rows_and_failing_or_throttled_functions_raise_alarms(
    template: dict[str, Any],
) -> None:
    """A run whose rows all end in error still succeeds: the share of error rows among
    the rows written (Classify's metrics) raises an alarm, as do Lambda errors and
    throttles of any of the pipeline's functions."""
    ratio = _math_alarm(template, "ErrorRows")
    (expression,) = [m for m in ratio["Metrics"] if "Expression" in m]
    assert "100 * FILL(error, 0)" in expression["Expression"]
    names = {m["MetricStat"]["Metric"]["MetricName"] for m in ratio["Metrics"] if "MetricStat" in m}
    assert names == {f"Rows_{s.value}" for s in Status}
    assert ratio["Threshold"] == 50
    for name, metric in (("LambdaErrors", "Errors"), ("LambdaThrottles", "Throttles")):
        alarm = _math_alarm(template, name)
        stats = [m["MetricStat"]["Metric"] for m in alarm["Metrics"] if "MetricStat" in m]
        # the pipeline's eight, Predictions (PUT /predictions), and Endpoints (the closed
        # rows' VPC endpoints): exactly CloudWatch's ten metrics an expression, no more
        assert {m["MetricName"] for m in stats} == {metric} and len(stats) == 10
        assert alarm["Threshold"] == 1
    (dashboard,) = resources(template, "AWS::CloudWatch::Dashboard").values()
    # dashboards are the account's, in every region: named after the stack and its region
    assert _refs(dashboard["Properties"]["DashboardName"]) == f"{STACK}-swegreen-AWS::Region"
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for title in ("Rows written, by status", "Error rows", "Fargate task retries",
                  "Running tasks", "Lambda errors and throttles"):  # fmt: skip
        assert title in body, title


def test_every_function_is_in_an_alarm_and_no_expression_passes_cloudwatch_s_limit() -> None:
    """A math expression takes ten metrics at most (CloudWatch refuses the deploy past
    that): the functions' sums come ten at a time, however many functions there are."""
    import aws_cdk as cdk
    from aws_cdk import aws_lambda as lambda_

    from infra.monitoring import MAX_EXPRESSION_METRICS, _sums

    stack = cdk.Stack(cdk.App(), "Sums")
    functions = [
        lambda_.Function(
            stack,
            f"F{n}",
            runtime=lambda_.Runtime.PYTHON_3_12,
            handler="x.handler",
            code=lambda_.Code.from_inline("def handler(e, c): pass"),
        )
        for n in range(23)
    ]
    for count in (1, 9, 10, 11, 23):
        sums = _sums("Errors", functions[:count], cdk.Duration.minutes(5))
        used = [len(m.using_metrics) for m in sums]  # type: ignore[attr-defined]
        assert all(n <= MAX_EXPRESSION_METRICS for n in used) and sum(used) == count, used


def test_api_key_mode_has_a_quota(tmp_path: Path) -> None:
    """Synthesized in process with api_auth=api_key: a key, and a usage plan that
    throttles and caps requests per day."""
    import aws_cdk as cdk

    from infra.stack import SweGreenStack

    app = cdk.App(outdir=str(tmp_path), context={"swegreen:api_quota_per_day": 250})
    settings = StackSettings(api_auth="api_key", api_quota_per_day=250)
    stack = SweGreenStack(app, "KeyStack", settings=settings)
    t = Template.from_stack(stack)
    t.resource_count_is("AWS::ApiGateway::ApiKey", 1)
    t.has_resource_properties(
        "AWS::ApiGateway::UsagePlan",
        {"Quota": {"Limit": 250, "Period": "DAY"}, "Throttle": Match.object_like({})},
    )
    for method in t.find_resources("AWS::ApiGateway::Method").values():
        assert method["Properties"]["ApiKeyRequired"] is True
    # the region's API Gateway logging role: created (kept when the stack goes) unless the
    # account has one already
    t.resource_count_is("AWS::ApiGateway::Account", 1)
    (logging_role,) = [
        r
        for r in t.find_resources("AWS::IAM::Role").values()
        if "AmazonAPIGatewayPushToCloudWatchLogs" in json.dumps(r)
    ]
    assert logging_role["DeletionPolicy"] == "Retain"
    app = cdk.App(outdir=str(tmp_path / "own-role"))
    own = SweGreenStack(app, "OwnRole", settings=StackSettings(api_logging_role=False))
    Template.from_stack(own).resource_count_is("AWS::ApiGateway::Account", 0)


def test_rows_run_in_isolated_subnets_that_reach_only_the_endpoints_they_need(
    template: dict[str, Any], machines: dict[str, dict[str, Any]]
) -> None:
    """The evaluate task's network is the row's, as Presign chose it (closed unless its
    tests need the internet); the closed one has no route out of the VPC, no public IP, and
    a security group that sends HTTPS to the endpoints only; the S3 endpoint admits this
    bucket's run and artifact objects and ECR's layers, nothing else."""
    row = dict(states(machines["Rows"]))
    for suffix in ("Spot", "OnDemand"):
        params = row[f"Evaluate{suffix}"]["Parameters"]
        assert params["NetworkConfiguration"] == {"AwsvpcConfiguration.$": "$.sandbox.awsvpc"}
    assert {p["Name"]: p["Value.$"] for p in _overrides(row["EvaluateSpot"])}[
        "SWEGREEN_TASK_NETWORK"
    ] == "$.sandbox.network"
    assert SandboxTicket.model_fields["awsvpc"].annotation == dict[str, Any]

    (presign,) = (
        f for name, f in resources(template, "AWS::Lambda::Function").items() if "Presign" in name
    )
    networks = json.loads(
        _refs(presign["Properties"]["Environment"]["Variables"]["SWEGREEN_TASK_NETWORKS"])
    )
    assert set(networks) == {"closed", "open"}
    closed, opened = networks["closed"], networks["open"]
    assert closed["AssignPublicIp"] == "DISABLED" and opened["AssignPublicIp"] == "ENABLED"

    subnets = resources(template, "AWS::EC2::Subnet")
    kind = {
        name: {t["Key"]: t["Value"] for t in s["Properties"]["Tags"]}["aws-cdk:subnet-type"]
        for name, s in subnets.items()
    }
    assert sorted(kind[s] for s in closed["Subnets"]) == ["Isolated", "Isolated"]
    assert sorted(kind[s] for s in opened["Subnets"]) == ["Public", "Public"]
    assert not any(subnets[s]["Properties"]["MapPublicIpOnLaunch"] for s in closed["Subnets"])
    # no route to an internet or NAT gateway from the isolated subnets' route tables
    tables = {
        a["Properties"]["RouteTableId"]["Ref"]
        for a in resources(template, "AWS::EC2::SubnetRouteTableAssociation").values()
        if a["Properties"]["SubnetId"]["Ref"] in closed["Subnets"]
    }
    assert tables
    routes = resources(template, "AWS::EC2::Route").values()
    assert not [r for r in routes if r["Properties"]["RouteTableId"]["Ref"] in tables]
    assert not resources(template, "AWS::EC2::NatGateway")

    (group,) = closed["SecurityGroups"]
    groups = resources(template, "AWS::EC2::SecurityGroup")
    closed_group = groups[group]["Properties"]
    assert "SecurityGroupIngress" not in closed_group
    egress = list(closed_group.get("SecurityGroupEgress", [])) + [
        e["Properties"]
        for e in resources(template, "AWS::EC2::SecurityGroupEgress").values()
        if e["Properties"]["GroupId"] == {"Fn::GetAtt": [group, "GroupId"]}
    ]
    assert all(
        (e["IpProtocol"], e["FromPort"], e["ToPort"]) == ("tcp", 443, 443) for e in egress
    ), egress
    endpoints = resources(template, "AWS::EC2::VPCEndpoint")
    # ECR and Logs: no standing interface endpoint (they cost by the hour); each run's
    # Endpoints step makes them in the closed subnets, under the endpoints' group (Watch
    # deletes them when no run runs; swegreen.aws.endpoints)
    assert {e["Properties"]["VpcEndpointType"] for e in endpoints.values()} == {"Gateway"}
    spec = EndpointSpec.model_validate_json(_refs(_function_env(template, "Endpoints")))
    assert sorted(spec.subnet_ids) == sorted(closed["Subnets"])
    assert _refs(_function_env(template, "Watch")) == _refs(_function_env(template, "Endpoints"))
    endpoint_group = spec.security_group_id
    destinations = [
        e.get("DestinationSecurityGroupId", {}).get("Fn::GetAtt", [None])[0]
        or e.get("DestinationPrefixListId")
        or e.get("CidrIp")
        for e in egress
    ]
    # the endpoints' group, and S3's addresses (the region's prefix list, found at deploy
    # time by the AccountSetup custom resource): never "anywhere"
    (setup,) = resources(template, "Custom::SweGreenAccountSetup")
    s3_list = {"Fn::GetAtt": [setup, "S3PrefixListId"]}
    assert sorted(destinations, key=str) == sorted([endpoint_group, s3_list], key=str)
    (gateway,) = (
        e["Properties"]
        for e in endpoints.values()
        if e["Properties"]["VpcEndpointType"] == "Gateway"
        and {t["Ref"] for t in e["Properties"]["RouteTableIds"]} == tables
    )
    allowed = {
        (a, render(r))
        for s in gateway["PolicyDocument"]["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
        for r in ([s["Resource"]] if isinstance(s["Resource"], (str, dict)) else s["Resource"])
    }
    assert allowed == {
        ("s3:GetObject", "REF/runs/*"),
        ("s3:PutObject", "REF/runs/*"),
        ("s3:GetObject", "REF/artifacts/*"),
        ("s3:PutObject", "REF/artifacts/*"),
        ("s3:GetObject", "arn:REF:s3:::prod-REF-starport-layer-bucket/*"),
    }
    # the build phase keeps the internet (it fetches repositories and packages)
    build = dict(states(machines["Pipeline"]))["BuildSpot"]["Parameters"]
    assert build["NetworkConfiguration"]["AwsvpcConfiguration"]["AssignPublicIp"] == "ENABLED"

    # Per task kind: the endpoints' private DNS answers for the whole VPC, so every kind
    # that pulls an image and writes logs must be let in by the endpoints' group.
    (pipeline_machine,) = [
        m
        for n, m in resources(template, "AWS::StepFunctions::StateMachine").items()
        if not n.startswith("WorkflowRows")
    ]
    # the build and prepare tasks' groups, as the rendered definition left them out
    phase_groups = {
        ref["Fn::GetAtt"][0]
        for ref in _all_refs(pipeline_machine["Properties"]["DefinitionString"])
        if "Fn::GetAtt" in ref and ref["Fn::GetAtt"][1] == "GroupId"
    }
    (phase_group,) = phase_groups
    kinds = {
        "build and prepare": {"AwsvpcConfiguration": {"SecurityGroups": [phase_group]}},
        "open row": {"AwsvpcConfiguration": opened},
        "closed row": {"AwsvpcConfiguration": closed},
    }
    ingress = [
        i["Properties"]
        for i in resources(template, "AWS::EC2::SecurityGroupIngress").values()
        if i["Properties"]["GroupId"] == {"Fn::GetAtt": [endpoint_group, "GroupId"]}
    ] + list(groups[endpoint_group]["Properties"].get("SecurityGroupIngress", []))
    admitted = {
        i["SourceSecurityGroupId"]["Fn::GetAtt"][0]
        for i in ingress
        if (i["IpProtocol"], i["FromPort"], i["ToPort"]) == ("tcp", 443, 443)
    }
    for kind, network in kinds.items():
        (task_group,) = network["AwsvpcConfiguration"]["SecurityGroups"]
        task_group = task_group["Fn::GetAtt"][0] if isinstance(task_group, dict) else task_group
        assert task_group in admitted, (kind, task_group, admitted)
        props = groups[task_group]["Properties"]
        out = list(props.get("SecurityGroupEgress", [])) + [
            e["Properties"]
            for e in resources(template, "AWS::EC2::SecurityGroupEgress").values()
            if e["Properties"]["GroupId"] == {"Fn::GetAtt": [task_group, "GroupId"]}
        ]
        reaches_endpoints = any(
            e.get("CidrIp") == "0.0.0.0/0" and e["IpProtocol"] == "-1" for e in out
        ) or any(
            e.get("DestinationSecurityGroupId", {}).get("Fn::GetAtt", [None])[0] == endpoint_group
            for e in out
        )
        assert reaches_endpoints, (kind, out)
        internet = any(e.get("CidrIp") == "0.0.0.0/0" and e["IpProtocol"] == "-1" for e in out)
        assert internet == (kind != "closed row"), kind  # only the closed rows are shut in
    assert len(admitted) == 2  # the two task groups, nothing else


def _function_env(template: dict[str, Any], function: str) -> Any:
    """The SWEGREEN_ENDPOINTS variable of the function whose logical id has ``function``."""
    (found,) = (
        f["Properties"]["Environment"]["Variables"]["SWEGREEN_ENDPOINTS"]
        for name, f in resources(template, "AWS::Lambda::Function").items()
        if name.startswith(f"Workflow{function}")
    )
    return found


def test_only_runs_make_endpoints_and_only_when_none_runs_they_go(
    template: dict[str, Any], machines: dict[str, dict[str, Any]]
) -> None:
    """The Pipeline makes the endpoints after Resolve (not for a dry run) and goes on if
    that fails; the Endpoints function may create only endpoints tagged as this stack's,
    and Watch may delete only those; Watch reads whether a run is running."""
    pipeline = dict(states(machines["Pipeline"]))
    assert pipeline["DryRun?"]["Default"] == "Endpoints"
    assert pipeline["Endpoints"]["Next"] == "Builds?"
    assert [c["Next"] for c in pipeline["Endpoints"]["Catch"]] == ["RecordRunFailure", "Builds?"]
    policies = {
        name: [
            s
            for p in resources(template, "AWS::IAM::Policy").values()
            if any(r["Ref"].startswith(f"Workflow{name}") for r in p["Properties"]["Roles"])
            for s in p["Properties"]["PolicyDocument"]["Statement"]
        ]
        for name in ("Endpoints", "Watch")
    }

    def statements(name: str, action: str) -> list[dict[str, Any]]:
        return [s for s in policies[name] if action in json.dumps(s["Action"])]

    creates = statements("Endpoints", "ec2:CreateVpcEndpoint")
    (tagged,) = [s for s in creates if "vpc-endpoint" in json.dumps(s["Resource"])]
    assert "aws:RequestTag/swegreen:endpoints" in json.dumps(tagged["Condition"])
    (delete,) = statements("Watch", "ec2:DeleteVpcEndpoints")
    assert "ec2:ResourceTag/swegreen:endpoints" in json.dumps(delete["Condition"])
    assert not statements("Endpoints", "ec2:DeleteVpcEndpoints")
    # a run's lease: the lease tag alone, on the stack's own endpoints alone
    (lease,) = [
        s for s in statements("Endpoints", "ec2:CreateTags") if "aws:TagKeys" in json.dumps(s)
    ]
    assert lease["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"] == [
        "swegreen:endpoints-taken"
    ]
    assert "ec2:ResourceTag/swegreen:endpoints" in json.dumps(lease["Condition"])
    assert statements("Watch", "states:ListExecutions")
    # a stack that keeps them standing has them in its template instead, and no such step
    import aws_cdk as cdk

    from infra.stack import SweGreenStack

    standing = SweGreenStack(cdk.App(), "Standing", settings=StackSettings(standing_endpoints=True))
    t = Template.from_stack(standing).to_json()
    kinds = [
        e["Properties"]["VpcEndpointType"] for e in resources(t, "AWS::EC2::VPCEndpoint").values()
    ]
    assert sorted(kinds).count("Interface") == 3
    assert not [n for n in resources(t, "AWS::Lambda::Function") if "Endpoints" in n]


def _all_refs(value: Any) -> Iterator[dict[str, Any]]:
    """Every Ref and Fn::GetAtt inside ``value``."""
    if isinstance(value, dict):
        if "Ref" in value or "Fn::GetAtt" in value:
            yield value
        for item in value.values():
            yield from _all_refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _all_refs(item)


def _refs(value: Any) -> str:
    """A Fn::Join with every Ref or GetAtt written as its logical id (else "REF")."""
    if isinstance(value, str):
        return value
    if "Ref" in value:
        return value["Ref"]
    if "Fn::GetAtt" in value:
        return value["Fn::GetAtt"][0]
    if "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return sep.join(_refs(p) for p in parts)
    return "REF"


def test_every_name_is_the_stacks_own(template: dict[str, Any]) -> None:
    """A second stack in the same account and region (a test deployment, another team's)
    must not clash: every resource given a name carries the stack's."""
    named = {
        "AWS::CloudWatch::Dashboard": "DashboardName",
        "AWS::ApiGateway::RestApi": "Name",
        "AWS::StepFunctions::StateMachine": "StateMachineName",
    }
    seen = 0
    for kind, prop in named.items():
        for name, resource in resources(template, kind).items():
            value = resource["Properties"].get(prop)
            if value is None:
                continue  # CloudFormation makes one up, unique already
            seen += 1
            assert STACK in json.dumps(value), (name, value)
    assert seen >= 3


PREBUILT = "public.ecr.aws/swegreen/sandbox@sha256:" + "ab" * 32


def test_a_prebuilt_image_deploys_without_docker(tmp_path: Path) -> None:
    """With swegreen:sandbox_image the stack builds no image (no Docker asset to build at
    deploy): both task definitions pull the digest through this account's ECR (a
    pull-through cache rule for ECR Public, whose repositories keep a few images), and
    their execution roles may import it on the first pull."""
    import aws_cdk as cdk

    from infra.stack import SweGreenStack

    app = cdk.App(outdir=str(tmp_path))
    stack = SweGreenStack(app, "Prebuilt", settings=StackSettings(sandbox_image=PREBUILT))
    t = Template.from_stack(stack)
    manifest = json.loads((tmp_path / "Prebuilt.assets.json").read_text())
    assert manifest.get("dockerImages", {}) == {}
    (rule,) = t.find_resources("AWS::ECR::PullThroughCacheRule").values()
    prefix = rule["Properties"]["EcrRepositoryPrefix"]
    assert rule["Properties"]["UpstreamRegistryUrl"] == "public.ecr.aws"
    assert prefix.startswith("swegreen-") and 2 <= len(prefix) <= 30
    (creation,) = t.find_resources("AWS::ECR::RepositoryCreationTemplate").values()
    assert creation["Properties"]["Prefix"] == prefix
    assert creation["Properties"]["AppliedFor"] == ["PULL_THROUGH_CACHE"]
    lifecycle = json.loads(creation["Properties"]["LifecyclePolicy"])
    assert lifecycle["rules"][0]["selection"]["countType"] == "imageCountMoreThan"
    definitions = t.find_resources("AWS::ECS::TaskDefinition")
    assert len(definitions) == 2
    for definition in definitions.values():
        (container,) = definition["Properties"]["ContainerDefinitions"]
        image = render(container["Image"])
        assert image.endswith(f".dkr.ecr.REF.REF/{prefix}/{PREBUILT.split('/', 1)[1]}"), image
    pulls = [
        s
        for policy in t.find_resources("AWS::IAM::Policy").values()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if "ecr:BatchImportUpstreamImage" in s["Action"]
    ]
    assert len(pulls) == 2  # the builder's and the evaluate task's execution roles
    # the default stack builds the image at deploy, from the repository's Dockerfile
    own = SweGreenStack(cdk.App(outdir=str(tmp_path / "own")), "Own", settings=StackSettings())
    assert not Template.from_stack(own).find_resources("AWS::ECR::PullThroughCacheRule")
    (built,) = json.loads((tmp_path / "own" / "Own.assets.json").read_text())[
        "dockerImages"
    ].values()
    assert built["source"]["dockerFile"] == "container/Dockerfile"
    assert built["source"]["dockerBuildTarget"] == "sandbox"


@pytest.mark.parametrize(
    "image",
    [
        "ghcr.io/someone/swegreen-sandbox@sha256:" + "ab" * 32,  # the closed rows reach ECR only
        "public.ecr.aws/swegreen/sandbox:latest",  # not pinned
        "public.ecr.aws/swegreen/sandbox@sha256:abc",
    ],
)
def test_a_prebuilt_image_the_tasks_cannot_pull_is_refused_with_the_way_to_fix_it(
    image: str,
) -> None:
    with pytest.raises(ValueError, match="pinned by digest; the closed rows reach ECR only"):
        StackSettings(sandbox_image=image)


def test_the_published_image_is_the_one_cdk_deploy_builds() -> None:
    """The workflow that publishes the prebuilt image builds what the stack's asset does:
    the Dockerfile's sandbox target for linux/amd64, and names the digest to deploy."""
    import yaml

    from infra.sandbox import IMAGE_EXCLUDES

    workflow = yaml.safe_load((ROOT / ".github/workflows/sandbox-image.yml").read_text())
    steps = workflow["jobs"]["publish"]["steps"]
    (build,) = [s for s in steps if s.get("uses", "").startswith("docker/build-push-action")]
    assert {k: build["with"][k] for k in ("file", "target", "platforms", "push")} == {
        "file": "container/Dockerfile",
        "target": "sandbox",
        "platforms": "linux/amd64",
        "push": True,
    }
    assert any("swegreen:sandbox_image=$IMAGE@${{ steps.build.outputs.digest }}" in s.get("run", "")
               for s in steps)  # fmt: skip
    # docker build reads .dockerignore, the asset IMAGE_EXCLUDES: the same context
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert set(IMAGE_EXCLUDES) <= ignored


def test_the_idle_cost_table_counts_what_the_template_holds(template: dict[str, Any]) -> None:
    """docs/aws.md's idle cost (cost_model.idle_costs) is priced from these counts."""
    from swegreen.aws.cost_model import IDLE, idle_costs

    endpoints = resources(template, "AWS::EC2::VPCEndpoint").values()
    interface = [e for e in endpoints if e["Properties"]["VpcEndpointType"] == "Interface"]
    assert len(interface) == IDLE["interface_endpoints"] == 0
    assert len(resources(template, "AWS::KMS::Key")) == IDLE["kms_keys"]
    alarms = resources(template, "AWS::CloudWatch::Alarm").values()
    assert len(alarms) == IDLE["alarms"]
    # CloudWatch bills an alarm per metric it watches: a metric-math alarm's each
    billed = [
        sum("MetricStat" in m for m in a["Properties"].get("Metrics", [])) or 1 for a in alarms
    ]
    assert sum(billed) == IDLE["alarm_metrics"]
    assert len(resources(template, "AWS::CloudWatch::Dashboard")) == IDLE["dashboards"]
    schedules = [
        r["Properties"].get("ScheduleExpression")
        for r in resources(template, "AWS::Events::Rule").values()
    ]
    assert schedules.count(IDLE["watch_schedule"]) == 1
    assert sum(usd for _, _, usd in idle_costs()) <= 5.5
    # a stack without the dashboard (an account past its three free ones)
    import aws_cdk as cdk

    from infra.stack import SweGreenStack

    bare = SweGreenStack(cdk.App(), "NoBoard", settings=StackSettings(dashboard=False))
    assert not Template.from_stack(bare).find_resources("AWS::CloudWatch::Dashboard")


def test_the_stack_makes_what_it_needs_of_the_account_before_using_it(
    template: dict[str, Any],
) -> None:
    """AccountSetup (a Python function of the stack's own code asset, no provider
    framework): ECS's service-linked role before the cluster's capacity providers, the S3
    prefix list before the closed rows' egress; its grants no wider than that."""
    ((setup, resource),) = resources(template, "Custom::SweGreenAccountSetup").items()
    token = resource["Properties"]["ServiceToken"]["Fn::GetAtt"][0]
    functions = resources(template, "AWS::Lambda::Function")
    assert functions[token]["Properties"]["Handler"] == "setup.handler"
    (association,) = resources(template, "AWS::ECS::ClusterCapacityProviderAssociations")
    assert setup in resources(template, "AWS::ECS::ClusterCapacityProviderAssociations")[
        association
    ].get("DependsOn", []), "the capacity providers do not wait for the ECS role"
    role = functions[token]["Properties"]["Role"]["Fn::GetAtt"][0]
    statements = [
        st
        for policy in resources(template, "AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for st in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    actions = sorted(
        a
        for st in statements
        for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])
    )
    assert actions == [
        "ec2:DescribeManagedPrefixLists",
        "iam:CreateServiceLinkedRole",
        "iam:GetRole",
    ]
    (create,) = [st for st in statements if st["Action"] == "iam:CreateServiceLinkedRole"]
    assert create["Condition"] == {"StringEquals": {"iam:AWSServiceName": "ecs.amazonaws.com"}}
    assert "AWSServiceRoleForECS" in json.dumps(create["Resource"])


def test_cdk_json_holds_the_settings_defaults() -> None:
    """docs/aws.md: cdk.json holds the defaults. A value there that differs from the
    settings' default (the documented one) is what a deploy from this checkout gets,
    unseen: api_quota_per_day once said 1,000 there and 20,000 in the settings and docs."""
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    fields = StackSettings.model_fields
    ours = {k.removeprefix("swegreen:"): v for k, v in context.items() if k.startswith("swegreen:")}
    assert ours, "cdk.json names no swegreen: setting"
    for name, value in ours.items():
        assert name in fields, f"cdk.json names swegreen:{name}, which no setting has"
        default = fields[name].get_default(call_default_factory=True)
        assert StackSettings.model_validate({name: value}).model_dump()[name] == default, name


# boto3's Table methods and the IAM actions they need
TABLE_ACTIONS = {
    "get_item": "dynamodb:GetItem",
    "put_item": "dynamodb:PutItem",
    "update_item": "dynamodb:UpdateItem",
    "delete_item": "dynamodb:DeleteItem",
    "query": "dynamodb:Query",
    "scan": "dynamodb:Scan",
    "batch_write_item": "dynamodb:BatchWriteItem",
    "batch_get_item": "dynamodb:BatchGetItem",
}
# functions/<file>.py -> its Lambda's name in the stack
FUNCTION_FILES = {
    "resolve": "Resolve",
    "dispatch": "Dispatch",
    "watch": "Watch",
    "presign": "Presign",
    "classify": "Classify",
    "retry": "TaskRetry",
    "aggregate": "Aggregate",
    "stopped": "Stopped",
    "predictions": "Predictions",
}


def _methods(paths: list[Path]) -> dict[str, Any]:
    import ast

    found = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        found[item.name] = item
    return found


def _attrs_of(node: Any, *chain: str) -> set[str]:
    """Names ``x`` of every ``<chain>.x`` in ``node`` (``chain``: ``self``, ``store``...)."""
    import ast

    found = set()
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Attribute):
            continue
        inner, names = sub.value, list(reversed(chain))
        ok = True
        for name in names[:-1]:
            ok = ok and isinstance(inner, ast.Attribute) and inner.attr == name
            inner = inner.value if isinstance(inner, ast.Attribute) else inner
        if ok and isinstance(inner, ast.Name) and inner.id == names[-1]:
            found.add(sub.attr)
        elif ok and isinstance(inner, ast.Call) and getattr(inner.func, "id", "") == names[-1]:
            found.add(sub.attr)  # pipeline().x
    return found


def _closure(start: set[str], methods: dict[str, Any], *chain: str) -> set[str]:
    seen, todo = set(), list(start)
    while todo:
        name = todo.pop()
        if name in seen or name not in methods:
            continue
        seen.add(name)
        todo += _attrs_of(methods[name], *chain)
    return seen


def test_every_function_may_make_each_table_call_its_code_makes(template: dict[str, Any]) -> None:
    """The IAM policies checked against the code, as a policy simulator would check the
    calls: each Lambda's DynamoDB actions on the table cover every call its handler can
    reach (functions/<name>.py -> the pipeline's methods -> DynamoStore's -> boto3's
    Table). The emulators enforce no IAM, so a missing grant shows only on a real account
    (the shrinking selection's DeleteItem once, in Resolve and Aggregate)."""
    shared = ROOT / "shared" / "swegreen" / "aws"
    store = _methods([shared / "dynamo_store.py"])
    pipeline = _methods(sorted((shared / "pipeline").glob("*.py")))

    def store_actions(names: set[str]) -> set[str]:
        calls = set()
        for name in _closure(names, store, "self"):
            calls |= _attrs_of(store[name], "self", "table")
        return {TABLE_ACTIONS[c] for c in calls if c in TABLE_ACTIONS}

    tables = [t for t in resources(template, "AWS::DynamoDB::Table") if "Idempotency" not in t]
    assert len(tables) == 1, tables
    granted: dict[str, set[str]] = {}
    for name, policy in resources(template, "AWS::IAM::Policy").items():
        role = name.removeprefix("Workflow").split("ServiceRole")[0]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Allow" and tables[0] in json.dumps(statement["Resource"]):
                granted.setdefault(role, set()).update(_actions(statement))
    checked = 0
    for file, role in FUNCTION_FILES.items():
        import ast

        tree = ast.parse((ROOT / "functions" / f"{file}.py").read_text())
        steps = _attrs_of(tree, "pipeline")
        direct = _attrs_of(tree, "pipeline", "store")
        reached = _closure(steps, pipeline, "self")
        calls = direct | {c for m in reached for c in _attrs_of(pipeline[m], "self", "store")}
        needed = store_actions(calls)
        missing = needed - {a for a in granted.get(role, set()) if a.startswith("dynamodb:")}
        assert not missing, f"{role} ({file}.py) calls {sorted(needed)} and lacks {sorted(missing)}"
        checked += bool(needed)
    assert checked >= 5  # the analysis found the calls it is there to check


def _imported_vpc_stack(tmp_path: Path, **settings: Any) -> dict[str, Any]:
    """The stack synthesized in process into an existing VPC (swegreen:vpc_id), its
    lookup answered as ``cdk synth`` would record it in cdk.context.json."""
    import aws_cdk as cdk

    from infra.stack import SweGreenStack

    def group(name: str, kind: str, n: int) -> dict[str, Any]:
        return {
            "name": name,
            "type": kind,
            "subnets": [
                {
                    "subnetId": f"subnet-{name}{i}",
                    "cidr": f"10.0.{n * 10 + i}.0/24",
                    "availabilityZone": f"eu-west-1{'ab'[i]}",
                    "routeTableId": f"rtb-{name}{i}",
                }
                for i in range(2)
            ],
        }

    lookup = (
        "vpc-provider:account=123456789012:filter.vpc-id=vpc-0abc:region=eu-west-1:"
        "returnAsymmetricSubnets=true"
    )
    vpc = {
        "vpcId": "vpc-0abc",
        "vpcCidrBlock": "10.0.0.0/16",
        "ownerAccountId": "123456789012",
        "availabilityZones": [],
        "subnetGroups": [group("private", "Private", 1), group("sandbox", "Isolated", 2)],
    }
    app = cdk.App(outdir=str(tmp_path), context={lookup: vpc})
    stack = SweGreenStack(
        app,
        "VpcStack",
        settings=StackSettings(vpc_id="vpc-0abc", **settings),
        env=cdk.Environment(account="123456789012", region="eu-west-1"),
    )
    return Template.from_stack(stack).to_json()


def test_an_imported_vpc_s_own_endpoints_are_reached_by_the_rows_when_their_group_is_given(
    tmp_path: Path,
) -> None:
    """An existing VPC whose own ECR/Logs endpoints (private DNS) answer for it: with
    their group given, the closed rows may send HTTPS to it, it admits the closed rows and
    the build tasks (rules added to the owner's group), and the Endpoints step knows it
    (it makes only the services the VPC lacks). Without it, the stack adds no rule to any
    group not its own, and the Endpoints step stops the run that finds such endpoints."""
    t = _imported_vpc_stack(tmp_path / "given", vpc_endpoint_security_group="sg-0123")
    groups = resources(t, "AWS::EC2::SecurityGroup")
    closed = next(k for k, g in groups.items() if "VPC endpoints only" in json.dumps(g))
    builds = next(k for k, g in groups.items() if "build tasks" in json.dumps(g))
    egress = [r["Properties"] for r in resources(t, "AWS::EC2::SecurityGroupEgress").values()]
    assert {
        "group": closed, "to": "sg-0123", "port": 443
    } in [
        {"group": e["GroupId"]["Fn::GetAtt"][0], "to": e.get("DestinationSecurityGroupId"),
         "port": e["FromPort"]}
        for e in egress
    ]  # fmt: skip
    ingress = [
        r["Properties"]
        for r in resources(t, "AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == "sg-0123"
    ]
    assert sorted(i["SourceSecurityGroupId"]["Fn::GetAtt"][0] for i in ingress) == sorted(
        [closed, builds]
    )
    assert {(i["FromPort"], i["ToPort"], i["IpProtocol"]) for i in ingress} == {(443, 443, "tcp")}
    told = [  # Endpoints and Watch
        f["Properties"]["Environment"]["Variables"]["SWEGREEN_ENDPOINTS"]
        for f in resources(t, "AWS::Lambda::Function").values()
        if "SWEGREEN_ENDPOINTS" in f["Properties"]["Environment"]["Variables"]
    ]
    assert len(told) == 2 and all('"shared_security_group_id":"sg-0123"' in render(s) for s in told)
    plain = _imported_vpc_stack(tmp_path / "plain")
    assert "sg-0123" not in json.dumps(plain)
    assert all(
        isinstance(r["Properties"]["GroupId"], dict)  # each a group of this stack
        for r in resources(plain, "AWS::EC2::SecurityGroupIngress").values()
    )


def test_the_run_stops_with_its_cause_when_the_vpc_s_endpoints_cannot_be_reached(
    machines: dict[str, dict[str, Any]],
) -> None:
    """EndpointsUnreachable (a configuration no wait mends) records the run as failed,
    its cause the guided message; any other failure of the step lets the run go on."""
    endpoints = machines["Pipeline"]["States"]["Endpoints"]
    first, last = endpoints["Catch"]
    assert first["ErrorEquals"] == ["EndpointsUnreachable"]
    assert first["Next"] == "RecordRunFailure" and first["ResultPath"] == "$.failure"
    assert last["ErrorEquals"] == ["States.ALL"] and last["Next"] == "Builds?"


def test_the_endpoints_group_setting_needs_an_imported_vpc() -> None:
    with pytest.raises(ValueError, match="give vpc_id too"):
        StackSettings(vpc_endpoint_security_group="sg-0123")
    with pytest.raises(ValueError, match="vpc_endpoint_security_group"):
        StackSettings(vpc_id="vpc-1", vpc_endpoint_security_group="default")
