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
from infra.sandbox import CACHE_MOUNT, SANDBOX_UID, SHARED_MOUNT
from infra.settings import StackSettings
from swegreen.aws.pipeline import (
    SANDBOX_URL_SECONDS,
    Item,
    PatchState,
    RunRequest,
    SandboxTicket,
)

ROOT = Path(__file__).resolve().parents[2]
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
def definition(template: dict[str, Any]) -> dict[str, Any]:
    (machine,) = resources(template, "AWS::StepFunctions::StateMachine").values()
    return json.loads(render(machine["Properties"]["DefinitionString"]))


def states(definition: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every state, nested Map item processors included."""
    for name, state in definition["States"].items():
        yield name, state
        processor = state.get("ItemProcessor") or state.get("Iterator")
        if processor:
            yield from states(processor)


def test_the_row_maps_honour_max_concurrent_rows_and_large_runs_read_s3(
    definition: dict[str, Any],
) -> None:
    maps = {n: s for n, s in definition["States"].items() if s["Type"] == "Map"}
    assert set(maps) == {"Rows", "RowsFromS3"}
    for state in maps.values():
        assert state["MaxConcurrencyPath"] == "$.resolved.max_concurrency"
    inline, distributed = maps["Rows"], maps["RowsFromS3"]
    assert inline["ItemsPath"] == "$.resolved.items"
    assert distributed["ItemProcessor"]["ProcessorConfig"]["Mode"] == "DISTRIBUTED"
    assert distributed["ItemReader"]["Resource"].endswith(":states:::s3:getObject")
    assert distributed["ItemReader"]["Parameters"]["Key.$"] == "$.resolved.items_key"
    choice = definition["States"]["LargeRun?"]
    assert choice["Choices"][0]["Variable"] == "$.resolved.distributed"
    assert choice["Choices"][0]["Next"] == "RowsFromS3"
    # Whatever happens to the rows, the leaderboard is written.
    for state in maps.values():
        assert state["Next"] == "Aggregate"
        assert [c["Next"] for c in state["Catch"]] == ["Aggregate"]


def test_every_row_step_retries_infrastructure_errors_and_falls_back_to_an_error_row(
    definition: dict[str, Any],
) -> None:
    for suffix in ("Inline", "Distributed"):
        row = dict(states(definition))
        for step in ("Dispatch", "Poll", "Prepare", "Presign", "Sandbox", "Classify"):
            state = row[f"{step}{suffix}"]
            assert state["Retry"], step
            assert [c["Next"] for c in state["Catch"]] == [f"RecordError{suffix}"]
            assert state["Catch"][0]["ErrorEquals"] == ["States.ALL"]
        lambda_retry = row[f"Dispatch{suffix}"]["Retry"][0]["ErrorEquals"]
        assert "Lambda.TooManyRequestsException" in lambda_retry
        for task in ("Prepare", "Sandbox"):
            assert "ECS.ThrottlingException" in row[f"{task}{suffix}"]["Retry"][0]["ErrorEquals"]
        # The evaluate task's URLs are signed right before it, after the prepare task.
        assert row[f"Prepare{suffix}"]["Next"] == f"Presign{suffix}"
        assert row[f"Presign{suffix}"]["Next"] == f"Sandbox{suffix}"
        # The participant is polled in a Wait loop: no Lambda waits for it.
        wait = row[f"WaitForParticipant{suffix}"]
        assert wait["SecondsPath"] == "$.item.poll_seconds" and wait["Next"] == f"Poll{suffix}"


def test_the_sandbox_runs_as_a_fargate_job_with_string_environment_values(
    definition: dict[str, Any],
) -> None:
    row = dict(states(definition))
    models = {"item": Item, "patch": PatchState, "sandbox": SandboxTicket}
    for name in ("PrepareInline", "SandboxInline"):
        task = row[name]
        assert task["Resource"].endswith(":states:::ecs:runTask.sync")
        assert task["Parameters"]["LaunchType"] == "FARGATE"
        # The evaluate task's pre-signed URLs outlive it.
        assert task["TimeoutSeconds"] < SANDBOX_URL_SECONDS
        (override,) = task["Parameters"]["Overrides"]["ContainerOverrides"]
        for pair in override["Environment"]:
            assert set(pair) == {"Name", "Value.$"}, pair  # no literal (non-string) values
            _, model, field = pair["Value.$"].split(".")
            annotation = models[model].model_fields[field].annotation
            assert annotation is str, f"{pair['Name']} <- {pair['Value.$']} is {annotation}"
    sandbox = {p["Name"]: p["Value.$"] for p in _overrides(row["SandboxInline"])}
    assert sandbox["SWEGREEN_INPUT_URL"] == "$.sandbox.input_url"
    assert "SWEGREEN_INPUT_URL" not in {p["Name"] for p in _overrides(row["PrepareInline"])}


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


def test_the_sandbox_tasks_run_as_a_non_root_user_in_the_weaker_isolation_they_opt_into(
    template: dict[str, Any],
) -> None:
    tasks = _task_definitions(template)
    assert set(tasks) == {"prepare", "sandbox"}
    dockerfile = (ROOT / "container" / "Dockerfile").read_text()
    sandbox_stage = dockerfile[dockerfile.index("AS sandbox") :]
    assert f"ARG SANDBOX_UID={SANDBOX_UID}" in sandbox_stage
    assert "\nUSER $SANDBOX_UID:$SANDBOX_UID\n" in sandbox_stage
    for name, task in tasks.items():
        (container,) = task["ContainerDefinitions"]
        assert container["User"] == f"{SANDBOX_UID}:{SANDBOX_UID}", name
        assert SANDBOX_UID != 0
        assert not container.get("Privileged"), name
        env = {e["Name"]: e["Value"] for e in container["Environment"]}
        # Fargate cannot run bubblewrap: the weaker mode is chosen explicitly, not fallen into.
        assert env["SWEGREEN_ISOLATION"] == "process", name
        assert container["Command"] == ["prepare" if name == "prepare" else "evaluate"]
    (access_point,) = resources(template, "AWS::EFS::AccessPoint").values()
    props = access_point["Properties"]
    assert props["PosixUser"] == {"Uid": str(SANDBOX_UID), "Gid": str(SANDBOX_UID)}
    creation = props["RootDirectory"]["CreationInfo"]
    assert (creation["OwnerUid"], creation["OwnerGid"]) == (str(SANDBOX_UID), str(SANDBOX_UID))


def test_the_tests_see_the_shared_cache_read_only_and_hold_no_credentials_worth_stealing(
    template: dict[str, Any],
) -> None:
    tasks = _task_definitions(template)
    (evaluate,) = tasks["sandbox"]["ContainerDefinitions"]
    (prepare,) = tasks["prepare"]["ContainerDefinitions"]
    # Where the tests run, every mount of the shared cache is read-only.
    assert evaluate["MountPoints"] == [
        {"ContainerPath": SHARED_MOUNT, "ReadOnly": True, "SourceVolume": "cache"}
    ]
    assert prepare["MountPoints"] == [
        {"ContainerPath": CACHE_MOUNT, "ReadOnly": False, "SourceVolume": "cache"}
    ]
    evaluate_env = {e["Name"] for e in evaluate["Environment"]}
    assert "SWEGREEN_BUCKET" not in evaluate_env  # it reaches S3 through pre-signed URLs only
    for task in tasks.values():  # mounted through the access point, with IAM
        (volume,) = task["Volumes"]
        auth = volume["EFSVolumeConfiguration"]["AuthorizationConfig"]
        assert auth["IAM"] == "ENABLED" and "AccessPointId" in auth
    # The evaluate task's role may mount the cache read-only, through the access point: no
    # S3, no DynamoDB, no writes, no root.
    role = tasks["sandbox"]["TaskRoleArn"]["Fn::GetAtt"][0]
    (statement,) = _statements(template, role)
    assert _actions(statement) == {"elasticfilesystem:ClientMount"}
    assert "elasticfilesystem:AccessPointArn" in statement["Condition"]["StringEquals"]
    # The prepare task's role: the cache read-write (not as root) and instance.json.
    role = tasks["prepare"]["TaskRoleArn"]["Fn::GetAtt"][0]
    granted = {a: s for s in _statements(template, role) for a in _actions(s)}
    assert set(granted) == {
        "elasticfilesystem:ClientMount",
        "elasticfilesystem:ClientWrite",
        "s3:GetObject",
    }
    assert render(granted["s3:GetObject"]["Resource"]).endswith("/runs/*/instances/*/instance.json")
    for policy in resources(template, "AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            assert "elasticfilesystem:ClientRootAccess" not in _actions(statement)
    # A file system policy replaces EFS's default one (anyone who reaches a mount target may
    # mount it as root, without IAM): clients need one of the roles above, over TLS.
    (file_system,) = resources(template, "AWS::EFS::FileSystem").values()
    policy = file_system["Properties"]["FileSystemPolicy"]
    assert all(s["Effect"] == "Deny" for s in policy["Statement"])
    (deny,) = policy["Statement"]
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


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
    t.has_resource_properties("AWS::EFS::FileSystem", {"Encrypted": True})
    t.has_resource_properties(
        "AWS::ECS::TaskDefinition",
        {
            "Volumes": [
                Match.object_like(
                    {"EFSVolumeConfiguration": Match.object_like({"TransitEncryption": "ENABLED"})}
                )
            ]
        },
    )


def test_every_log_group_has_a_retention(template: dict[str, Any]) -> None:
    groups = resources(template, "AWS::Logs::LogGroup")
    assert len(groups) >= 7  # five functions, the state machine, the sandbox, API access
    for name, group in groups.items():
        assert group["Properties"].get("RetentionInDays") == 30, name
    for name, fn in resources(template, "AWS::Lambda::Function").items():
        assert "LoggingConfig" in fn["Properties"], f"{name} logs to a group without retention"


# Wildcard resources CDK emits for actions that have no resource-level permissions, or
# that the service names at run time (X-Ray, ECR login, SFN log delivery, ECS task ids).
WILDCARD_OK = {
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "xray:GetSamplingRules",
    "xray:GetSamplingTargets",
    "ecr:GetAuthorizationToken",
    "ecs:StopTask",
    "ecs:DescribeTasks",
    "logs:CreateLogDelivery",
    "logs:GetLogDelivery",
    "logs:UpdateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:DescribeResourcePolicies",
    "logs:DescribeLogGroups",
}


def test_iam_is_least_privilege(template: dict[str, Any]) -> None:
    grants: dict[str, set[str]] = {}
    for name, policy in resources(template, "AWS::IAM::Policy").items():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"]
            actions = [actions] if isinstance(actions, str) else actions
            assert all(a != "*" and not a.endswith(":*") for a in actions), (name, actions)
            if statement["Resource"] == "*":
                assert set(actions) <= WILDCARD_OK, (name, actions)
            grants.setdefault(name, set()).update(actions)
    by_role = {k.removeprefix("Workflow").split("ServiceRole")[0]: v for k, v in grants.items()}
    dynamodb = {r: {a for a in acts if a.startswith("dynamodb:")} for r, acts in by_role.items()}
    assert dynamodb["Dispatch"] == set() and dynamodb["Poll"] == set()  # S3 only
    assert dynamodb["Classify"] == {
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:GetItem",  # the idempotency table
        "dynamodb:DeleteItem",
    }
    for role, acts in dynamodb.items():
        assert not acts & {"dynamodb:Scan", "dynamodb:DeleteTable", "dynamodb:BatchWriteItem"}, role
    assert dynamodb["Stopped"] == {"dynamodb:UpdateItem"}
    assert dynamodb["Presign"] == set()  # S3 only: what its URLs may do
    for task in ("SandboxTaskTask", "SandboxPrepareTask"):
        acts = next(acts for role, acts in by_role.items() if role.startswith(task))
        assert not any(a.startswith("dynamodb:") for a in acts), task


def test_the_api_starts_and_reads_runs_with_authentication_and_validation(
    template: dict[str, Any],
) -> None:
    methods = resources(template, "AWS::ApiGateway::Method")
    # POST /runs, GET and DELETE /runs/{id}, GET /runs/{id}/results
    assert sorted(m["Properties"]["HttpMethod"] for m in methods.values()) == [
        "DELETE",
        "GET",
        "GET",
        "POST",
    ]
    for method in methods.values():
        assert method["Properties"]["AuthorizationType"] == "AWS_IAM"
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
    assert set(schema["properties"]) == {"participants", "patches", "config"}


def test_stack_settings_refuse_bad_context_with_the_key_named() -> None:
    assert StackSettings().sandbox_cpu == 4096
    assert StackSettings.model_validate({"sandbox_cpu": "2048", "sandbox_memory_mib": "8192"})
    with pytest.raises(ValueError, match="Fargate with 4096 CPU units takes 8192-30720 MiB"):
        StackSettings(sandbox_memory_mib=4096)
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
        "import resolve, dispatch, poll, presign, classify, aggregate, stopped\n"
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


@pytest.mark.parametrize("body", BAD_BODIES)
def test_the_api_schema_refuses_what_the_pipeline_refuses(body: dict[str, Any]) -> None:
    import jsonschema
    from pydantic import ValidationError

    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, RUN_REQUEST_SCHEMA)
    with pytest.raises(ValidationError):
        RunRequest.model_validate(body)


def test_an_execution_that_ends_unfinished_updates_its_run(template: dict[str, Any]) -> None:
    """Stopped through the API, timed out or failed: EventBridge tells the Stopped function,
    so the run's record never stays "running"."""
    (rule,) = resources(template, "AWS::Events::Rule").values()
    pattern = rule["Properties"]["EventPattern"]
    assert pattern["source"] == ["aws.states"]
    assert pattern["detail-type"] == ["Step Functions Execution Status Change"]
    assert pattern["detail"]["status"] == ["ABORTED", "TIMED_OUT", "FAILED"]
    assert "WorkflowPipeline" in json.dumps(pattern["detail"]["stateMachineArn"])
    (target,) = rule["Properties"]["Targets"]
    assert "WorkflowStopped" in json.dumps(target["Arn"])
