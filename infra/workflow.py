"""The pipeline: seven small Lambdas and the state machine that runs them with the sandbox.

Resolve -> (Map | DistributedMap from S3, MaxConcurrency = max_concurrent_rows)
             per row: Dispatch -> [Wait -> Poll]* -> Prepare (ecs:runTask.sync: the shared
                      cache) -> Presign -> Sandbox (ecs:runTask.sync: the tests) -> Classify
                      any failure -> RecordError (an error row; the row never fails the run;
                      if that fails too, RowLost, and Aggregate writes the error row)
        -> Aggregate (leaderboard JSON to S3, summary to DynamoDB)
Resolve or Aggregate failing -> RecordRunFailure (the run's record says "failed", and why)
An execution stopped, timed out or failed -> EventBridge -> Stopped (the record says so)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import AssetHashType, BundlingOptions, Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as ddb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from infra.bundling import LambdaBundler, sources_hash
from infra.sandbox import ISOLATION, Sandbox
from infra.settings import StackSettings, retention

ROOT = Path(__file__).resolve().parents[1]
# Throttling and service hiccups: retried. Anything else goes to RecordError.
LAMBDA_RETRYABLE = [
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
]
# What the state machine gives one sandbox task; the evaluate task's pre-signed URLs
# outlive it (swegreen.aws.pipeline.SANDBOX_URL_SECONDS).
SANDBOX_TASK_HOURS = 3
ECS_RETRYABLE = [
    "ECS.AmazonECSException",
    "ECS.ServerException",
    "ECS.ThrottlingException",
    "ECS.LimitExceededException",
]


class Workflow(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        settings: StackSettings,
        bucket: s3.IBucket,
        table: ddb.ITable,
        idempotency: ddb.ITable,
        sandbox: Sandbox,
        runs_prefix: str,
        datasets_prefix: str,
        grader: str,
    ) -> None:
        super().__init__(scope, id)
        code = lambda_.Code.from_asset(
            str(ROOT / "functions"),
            asset_hash_type=AssetHashType.CUSTOM,
            asset_hash=sources_hash(),
            bundling=BundlingOptions(
                image=lambda_.Runtime.PYTHON_3_12.bundling_image, local=LambdaBundler()
            ),
        )
        environment = {
            "SWEGREEN_TABLE": table.table_name,
            "SWEGREEN_BUCKET": bucket.bucket_name,
            "SWEGREEN_RUNS_PREFIX": runs_prefix,
            "SWEGREEN_DATASETS_PREFIX": datasets_prefix,
            "SWEGREEN_DEFAULT_CONFIG": _json(settings.default_config),
            "SWEGREEN_DISTRIBUTED_THRESHOLD": str(settings.distributed_threshold),
            "SWEGREEN_POLL_SECONDS": str(settings.poll_seconds),
            "SWEGREEN_GRADER": grader,
            "SWEGREEN_SANDBOX_ISOLATION": ISOLATION,
            "SWEGREEN_IDEMPOTENCY_TABLE": idempotency.table_name,
            "POWERTOOLS_SERVICE_NAME": "swegreen",
            "POWERTOOLS_METRICS_NAMESPACE": "SweGreen",
        }

        def function(name: str, timeout: int, memory: int = 512) -> lambda_.Function:
            log_group = logs.LogGroup(
                self,
                f"{name}Logs",
                retention=retention(settings.log_retention_days),
                removal_policy=RemovalPolicy.DESTROY,
            )
            return lambda_.Function(
                self,
                name,
                runtime=lambda_.Runtime.PYTHON_3_12,
                architecture=lambda_.Architecture.X86_64,
                handler=f"{name.lower()}.handler",
                code=code,
                timeout=Duration.seconds(timeout),
                memory_size=memory,
                environment=environment,
                tracing=lambda_.Tracing.ACTIVE,
                log_group=log_group,
            )

        self.resolve = function("Resolve", 300, 1024)
        self.dispatch = function("Dispatch", 180)
        self.poll = function("Poll", 180)
        self.presign = function("Presign", 60)
        self.classify = function("Classify", 120)
        self.aggregate = function("Aggregate", 300, 1024)
        self.stopped = function("Stopped", 30)
        # Least privilege, per function: the S3 prefixes and the DynamoDB calls each makes
        # (swegreen.aws.dynamo_store: begin_run, save_result, get_results, update_run).
        bucket.grant_read(self.resolve, f"{datasets_prefix}*")
        bucket.grant_read(self.resolve, "predictions/*")
        bucket.grant_read(self.dispatch, "predictions/*")
        # Presign's grant is also what its pre-signed URLs can do (and only for their object).
        for fn in (
            self.resolve,
            self.dispatch,
            self.poll,
            self.presign,
            self.classify,
            self.aggregate,
        ):
            bucket.grant_read_write(fn, f"{runs_prefix}*")
        table.grant(self.resolve, "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query")
        table.grant(self.classify, "dynamodb:PutItem", "dynamodb:UpdateItem")
        table.grant(
            self.aggregate,
            "dynamodb:GetItem",
            "dynamodb:Query",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
        )
        table.grant(self.stopped, "dynamodb:UpdateItem")
        idempotency.grant(  # powertools' idempotency records
            self.classify,
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
        )

        resolve = self._invoke(
            "Resolve",
            self.resolve,
            {
                "run_id.$": "$.run_id",
                "participants.$": "$.participants",
                "patches.$": "$.patches",
                "config.$": "$.config",
            },
            result_path="$.resolved",
        )
        aggregate = self._invoke(
            "Aggregate", self.aggregate, {"run_id.$": "$.run_id"}, result_path="$.leaderboard"
        )
        choose = sfn.Choice(self, "LargeRun?")
        inline = sfn.Map(
            self,
            "Rows",
            items_path="$.resolved.items",
            max_concurrency_path="$.resolved.max_concurrency",
            item_selector={"item.$": "$$.Map.Item.Value"},
            result_path=sfn.JsonPath.DISCARD,
        )
        inline.item_processor(self._row(sandbox, "Inline"))
        distributed = sfn.DistributedMap(
            self,
            "RowsFromS3",
            item_reader=sfn.S3JsonItemReader(
                bucket=bucket, key=sfn.JsonPath.string_at("$.resolved.items_key")
            ),
            max_concurrency_path="$.resolved.max_concurrency",
            item_selector={"item.$": "$$.Map.Item.Value"},
            result_path=sfn.JsonPath.DISCARD,
            tolerated_failure_percentage=100,
            map_execution_type=sfn.StateMachineType.STANDARD,
        )
        distributed.item_processor(self._row(sandbox, "Distributed"))
        for map_state in (inline, distributed):  # a lost row becomes an error row in Aggregate
            map_state.add_catch(aggregate, result_path="$.map_error")
            map_state.next(aggregate)
        choose.when(sfn.Condition.boolean_equals("$.resolved.distributed", True), distributed)
        choose.otherwise(inline)
        # A run that cannot start (a bad dataset or selection) or cannot publish says so in
        # its record, where GET /runs/{id} and the green agent's aws backend look.
        value = tasks.DynamoAttributeValue.from_string
        run_failed = tasks.DynamoUpdateItem(
            self,
            "RecordRunFailure",
            table=table,
            key={"pk": value(sfn.JsonPath.string_at("$.run_id")), "sk": value("RUN")},
            update_expression="SET #state = :failed, #error = :error, updated_at = :now",
            expression_attribute_names={"#state": "state", "#error": "error"},
            expression_attribute_values={
                ":failed": value("failed"),
                ":error": value(sfn.JsonPath.string_at("$.failure.Cause")),
                ":now": value(sfn.JsonPath.string_at("$$.State.EnteredTime")),
            },
            result_path=sfn.JsonPath.DISCARD,
        ).next(
            sfn.Fail(self, "RunFailed", cause_path="$.failure.Cause", error_path="$.failure.Error")
        )
        resolve.add_catch(run_failed, result_path="$.failure")
        aggregate.add_catch(run_failed, result_path="$.failure")
        definition = resolve.next(choose)
        log_group = logs.LogGroup(
            self,
            "StateMachineLogs",
            retention=retention(settings.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.state_machine = sfn.StateMachine(
            self,
            "Pipeline",
            definition_body=sfn.DefinitionBody.from_chainable(definition),
            state_machine_type=sfn.StateMachineType.STANDARD,
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ERROR),
            timeout=Duration.days(2),
        )
        bucket.grant_read(self.state_machine, f"{runs_prefix}*")  # the distributed map's items
        # An execution stopped (DELETE /runs/{id}), timed out or failed outside the
        # definition's catches: the run's record must not stay "running".
        events.Rule(
            self,
            "ExecutionStopped",
            event_pattern=events.EventPattern(
                source=["aws.states"],
                detail_type=["Step Functions Execution Status Change"],
                detail={
                    "status": ["ABORTED", "TIMED_OUT", "FAILED"],
                    "stateMachineArn": [self.state_machine.state_machine_arn],
                },
            ),
            targets=[targets.LambdaFunction(self.stopped, retry_attempts=4)],
        )

    def _invoke(
        self, name: str, fn: lambda_.IFunction, payload: dict, result_path: str, suffix: str = ""
    ) -> tasks.LambdaInvoke:
        step = tasks.LambdaInvoke(
            self,
            f"{name}Step{suffix}",  # construct ids must not clash with the functions'
            state_name=f"{name}{suffix}",
            lambda_function=fn,
            payload=sfn.TaskInput.from_object(payload),
            payload_response_only=True,
            result_path=result_path,
            retry_on_service_exceptions=False,
        )
        step.add_retry(
            errors=LAMBDA_RETRYABLE, interval=Duration.seconds(2), max_attempts=6, backoff_rate=2.0
        )
        return step

    def _row(self, sandbox: Sandbox, suffix: str) -> sfn.IChainable:
        """One row: get the patch, evaluate it, write the verdict. Never fails."""
        record_error = self._invoke(
            "RecordError",
            self.classify,
            {"item.$": "$.item", "error.$": "$.error"},
            "$.row",
            suffix,
        )
        # If even the error row cannot be written, the iteration still succeeds (a failed
        # iteration would abort the inline Map's other rows); Aggregate then writes the
        # missing row as an error.
        record_error.add_catch(
            sfn.Pass(self, f"RowLost{suffix}"), errors=["States.ALL"], result_path="$.lost"
        )
        dispatch = self._invoke("Dispatch", self.dispatch, {"item.$": "$.item"}, "$.patch", suffix)
        poll = self._invoke(
            "Poll", self.poll, {"item.$": "$.item", "patch.$": "$.patch"}, "$.patch", suffix
        )
        wait = sfn.Wait(
            self,
            f"WaitForParticipant{suffix}",
            time=sfn.WaitTime.seconds_path("$.item.poll_seconds"),
        )
        launch: dict[str, Any] = {
            "integration_pattern": sfn.IntegrationPattern.RUN_JOB,
            "cluster": sandbox.cluster,
            "launch_target": tasks.EcsFargateLaunchTarget(platform_version=_fargate_platform()),
            "assign_public_ip": sandbox.public_ip,
            "subnets": sandbox.subnets,
            "security_groups": [sandbox.security_group],
            "result_path": sfn.JsonPath.DISCARD,
            "task_timeout": sfn.Timeout.duration(Duration.hours(SANDBOX_TASK_HOURS)),
        }
        row = [  # ECS wants strings: every value here is one
            _env("SWEGREEN_RUN_ID", "$.item.run_id"),
            _env("SWEGREEN_INSTANCE_ID", "$.item.instance_id"),
            _env("SWEGREEN_CONFIG", "$.item.config_json"),
        ]
        prepare = tasks.EcsRunTask(
            self,
            f"Prepare{suffix}",
            task_definition=sandbox.prepare_definition,
            container_overrides=[
                tasks.ContainerOverride(
                    container_definition=sandbox.prepare_container, environment=row
                )
            ],
            **launch,
        )
        presign = self._invoke(
            "Presign",
            self.presign,
            {"item.$": "$.item", "patch.$": "$.patch"},
            "$.sandbox",
            suffix,
        )
        run = tasks.EcsRunTask(
            self,
            f"Sandbox{suffix}",
            task_definition=sandbox.task_definition,
            container_overrides=[
                tasks.ContainerOverride(
                    container_definition=sandbox.container,
                    environment=[
                        *row,
                        _env("SWEGREEN_MODEL", "$.patch.model"),
                        _env("SWEGREEN_INPUT_URL", "$.sandbox.input_url"),
                    ],
                )
            ],
            **launch,
        )
        for task in (prepare, run):
            task.add_retry(
                errors=ECS_RETRYABLE,
                interval=Duration.seconds(10),
                max_attempts=5,
                backoff_rate=2.0,
            )
        classify = self._invoke(
            "Classify", self.classify, {"item.$": "$.item", "patch.$": "$.patch"}, "$.row", suffix
        )
        for step in (dispatch, poll, prepare, presign, run, classify):
            step.add_catch(record_error, result_path="$.error")
        ready = sfn.Choice(self, f"PatchReady{suffix}")
        has_patch = sfn.Choice(self, f"HasPatch{suffix}")
        has_patch.when(
            sfn.Condition.is_string("$.patch.patch_key"),
            prepare.next(presign).next(run).next(classify),
        )
        has_patch.otherwise(classify)
        ready.when(sfn.Condition.boolean_equals("$.patch.done", True), has_patch)
        ready.otherwise(wait.next(poll).next(ready))
        return dispatch.next(ready)


def _env(name: str, path: str) -> tasks.TaskEnvironmentVariable:
    return tasks.TaskEnvironmentVariable(name=name, value=sfn.JsonPath.string_at(path))


def _fargate_platform() -> object:
    from aws_cdk import aws_ecs as ecs

    return ecs.FargatePlatformVersion.VERSION1_4


def _json(value: object) -> str:
    import json

    return json.dumps(value)
