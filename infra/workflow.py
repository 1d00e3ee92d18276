"""The pipeline: small Lambdas, the two state machines that run them, and the Fargate tasks.

Pipeline (one execution per run):
  Resolve (rows; the build phase's plan) ->
  Builds: DistributedMap over builds.json (mirrors, environments) -> Build task
  Prepares: DistributedMap over prepares.json (prepared workspaces, base runs) -> Prepare task
  Rows: a child execution of the Rows machine (startExecution.sync), its time limit the
        run's size (Resolve's timeout_seconds) -> Aggregate (leaderboard JSON, summary)
Rows (one execution per run): DistributedMap over items.json, MaxConcurrency =
  max_concurrent_rows, results to S3 (ResultWriter); per row:
  Dispatch (gold, empty, predictions) | DispatchWait (A2A: the row waits on a callback
  token, which Watch completes) -> Presign -> Evaluate task -> Classify; any failure ->
  RecordError (an error row; the row never fails the run).
Every Fargate task: Spot first; a failed task goes to TaskRetry, which retries capacity,
  Spot interruptions, image pulls and network start-up failures with full jitter
  (on-demand after Spot failed twice) and lets an out-of-memory kill or a crash be the
  row's verdict.
Watch: every minute (EventBridge), polls the participants rows wait on.
Stopped: an execution stopped, timed out or failed (EventBridge, with a DLQ) -> the run's
  record says so. Alarms on failed and timed-out executions and on the DLQ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import ArnFormat, AssetHashType, BundlingOptions, Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as ddb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from infra.bundling import LambdaBundler, sources_hash
from infra.sandbox import ISOLATION, OPEN, Sandbox
from infra.settings import StackSettings, retention
from swegreen.aws.pipeline import INSTANCE, SANDBOX_INPUT
from swegreen.core.classify import Status

ROOT = Path(__file__).resolve().parents[1]
# Throttling and service hiccups: retried with jitter. Anything else goes to RecordError.
LAMBDA_RETRYABLE = [
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
]
# What the state machine gives one Fargate task; the evaluate task's pre-signed URLs
# outlive it (swegreen.aws.pipeline.SANDBOX_URL_SECONDS).
SANDBOX_TASK_HOURS = 3
# ECS's own API errors: retried in place (RunTask throttled, a service hiccup).
ECS_RETRYABLE = [
    "ECS.AmazonECSException",
    "ECS.ServerException",
    "ECS.ThrottlingException",
    "ECS.LimitExceededException",
]
MAP_RESULTS = "map-results/"  # the distributed maps' ResultWriter prefix
METRICS_NAMESPACE = "SweGreen"  # the functions' metrics (powertools, functions/runtime.py)
# The error-rows alarm: at least this share of the rows written in 5 minutes, once there
# are enough rows for a share to mean something.
ERROR_RATIO_ALARM_PERCENT = 50
ERROR_RATIO_MIN_ROWS = 4
FIRST_ATTEMPT = {
    "number": 1,
    "capacity": "FARGATE_SPOT",
    "wait_seconds": 0,
    "retry": True,
    "why": "",
}


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
        artifacts_prefix: str,
        grader: str,
    ) -> None:
        super().__init__(scope, id)
        self.settings = settings
        self.bucket = bucket
        self.sandbox = sandbox
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
            "SWEGREEN_BUILD_CONCURRENCY": str(settings.build_concurrency),
            "SWEGREEN_PREPARE_BATCH": str(settings.prepare_batch),
            # to fit the Maps to the account's Fargate vCPU quotas (Resolve)
            "SWEGREEN_SANDBOX_VCPU": str(settings.sandbox_cpu / 1024),
            "SWEGREEN_BUILD_VCPU": str(settings.build_cpu / 1024),
            "SWEGREEN_GUARDRAILS": settings.guardrails.model_dump_json(),
            "SWEGREEN_GRADER": grader,
            "SWEGREEN_SANDBOX_ISOLATION": ISOLATION,
            "SWEGREEN_IDEMPOTENCY_TABLE": idempotency.table_name,
            "POWERTOOLS_SERVICE_NAME": "swegreen",
            "POWERTOOLS_METRICS_NAMESPACE": "SweGreen",
        }

        def function(
            name: str, timeout: int, memory: int = 512, handler: str | None = None
        ) -> lambda_.Function:
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
                handler=handler or f"{name.lower()}.handler",
                code=code,
                timeout=Duration.seconds(timeout),
                memory_size=memory,
                environment=environment,
                tracing=lambda_.Tracing.ACTIVE,
                log_group=log_group,
            )

        self.resolve = function("Resolve", 300, 1024)
        self.dispatch = function("Dispatch", 180)
        self.watch = function("Watch", 240)
        self.presign = function("Presign", 60)
        # Presign chooses each row's network configuration (infra/sandbox.py, ``networks``).
        self.presign.add_environment(
            "SWEGREEN_TASK_NETWORKS", Stack.of(self).to_json_string(sandbox.networks)
        )
        self.classify = function("Classify", 120)
        self.retry = function("TaskRetry", 30, 256, handler="retry.handler")
        self.aggregate = function("Aggregate", 300, 1024)
        # Resolve fits the run's concurrency to the account's Fargate vCPU quotas.
        self.resolve.add_to_role_policy(
            iam.PolicyStatement(
                actions=["servicequotas:GetServiceQuota"],
                resources=[
                    Stack.of(self).format_arn(
                        service="servicequotas",
                        resource="fargate",
                        resource_name="*",
                        arn_format=ArnFormat.SLASH_RESOURCE_NAME,
                    )
                ],
            )
        )
        self.stopped = function("Stopped", 30)
        self._grant_data(table, idempotency, runs_prefix, datasets_prefix, artifacts_prefix)

        # ---------------------------------------------------------------- Rows machine
        rows_map = sfn.DistributedMap(
            self,
            "RowsMap",
            state_name="Rows",
            item_reader=sfn.S3JsonItemReader(
                bucket=bucket, key=sfn.JsonPath.string_at("$.resolved.items_key")
            ),
            max_concurrency_path="$.resolved.max_concurrency",
            item_selector={"item.$": "$$.Map.Item.Value"},
            result_writer=sfn.ResultWriter(bucket=bucket, prefix=f"{MAP_RESULTS}rows"),
            tolerated_failure_percentage=100,
            map_execution_type=sfn.StateMachineType.STANDARD,
        )
        rows_map.item_processor(self._row())
        # Named, so that the functions that hand patches back to it (Dispatch, Watch) can
        # be granted it by ARN: a reference to it would be a cycle (it invokes them).
        rows_name = f"{Stack.of(self).stack_name}-Rows"
        self.rows_machine = self._machine("Rows", rows_map, name=rows_name)
        rows_arn = Stack.of(self).format_arn(
            service="states",
            resource="stateMachine",
            resource_name=rows_name,
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )

        # ---------------------------------------------------------------- Pipeline
        resolve = self._invoke(
            "Resolve",
            self.resolve,
            {
                "run_id.$": "$.run_id",
                "participants.$": "$.participants",
                "patches.$": "$.patches",
                "config.$": "$.config",
                "rebuild_envs.$": "$.rebuild_envs",
            },
            result_path="$.resolved",
        )
        aggregate = self._invoke(
            "Aggregate", self.aggregate, {"run_id.$": "$.run_id"}, result_path="$.leaderboard"
        )
        run_rows = tasks.StepFunctionsStartExecution(
            self,
            "RunRows",
            state_name="RowsPhase",
            state_machine=self.rows_machine,
            integration_pattern=sfn.IntegrationPattern.RUN_JOB,
            name=sfn.JsonPath.format("{}-rows", sfn.JsonPath.string_at("$.run_id")),
            input=sfn.TaskInput.from_object({"run_id.$": "$.run_id", "resolved.$": "$.resolved"}),
            # The run's size decides how long its rows may take (Resolve: every wave of
            # max_concurrent_rows rows at its slowest).
            task_timeout=sfn.Timeout.at("$.resolved.timeout_seconds"),
            result_path=sfn.JsonPath.DISCARD,
        )
        # A rows phase that failed or timed out still gets a leaderboard: Aggregate writes
        # every missing row as an error row.
        run_rows.add_catch(aggregate, result_path="$.rows_error")
        run_rows.next(aggregate)
        builds = self._phase("Builds", "build", "$.resolved.builds_key")
        prepares = self._phase("Prepares", "prepare", "$.resolved.prepares_key")
        # A phase that fails as a whole is no reason to stop: the rows report what is missing.
        want_prepares = (
            sfn.Choice(self, "Prepares?")
            .when(sfn.Condition.number_greater_than("$.resolved.prepares", 0), prepares)
            .otherwise(run_rows)
        )
        builds.add_catch(want_prepares, result_path="$.builds_error")
        prepares.add_catch(run_rows, result_path="$.prepares_error")
        prepares.next(run_rows)
        want_builds = (
            sfn.Choice(self, "Builds?")
            .when(sfn.Condition.number_greater_than("$.resolved.builds", 0), builds)
            .otherwise(want_prepares)
        )
        builds.next(want_prepares)
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
        self.state_machine = self._machine("Pipeline", resolve.next(want_builds))
        self._grant_tasks(runs_prefix)
        # A stopped run's rows phase stops with it (its execution is "<run id>-rows").
        self.stopped.add_environment("SWEGREEN_ROWS_MACHINE_ARN", rows_arn)
        self.stopped.add_to_role_policy(
            iam.PolicyStatement(
                actions=["states:StopExecution"],
                resources=[
                    Stack.of(self).format_arn(
                        service="states",
                        resource="execution",
                        resource_name=f"{rows_name}:*",
                        arn_format=ArnFormat.COLON_RESOURCE_NAME,
                    )
                ],
            )
        )
        # Dispatch and Watch hand patches back to the rows' executions.
        for fn in (self.dispatch, self.watch):
            fn.add_to_role_policy(
                iam.PolicyStatement(
                    actions=["states:SendTaskSuccess", "states:SendTaskFailure"],
                    resources=[rows_arn],
                )
            )

        # ---------------------------------------------------------------- events, alarms
        self.dead_letters = sqs.Queue(
            self,
            "EventDeadLetters",
            retention_period=Duration.days(14),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
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
            targets=[
                targets.LambdaFunction(
                    self.stopped, retry_attempts=4, dead_letter_queue=self.dead_letters
                )
            ],
        )
        events.Rule(
            self,
            "WatchParticipants",
            schedule=events.Schedule.rate(Duration.minutes(1)),
            targets=[
                targets.LambdaFunction(
                    self.watch, retry_attempts=0, dead_letter_queue=self.dead_letters
                )
            ],
        )
        # Encrypted with the account's SNS key (alarm texts name runs and functions).
        self.alarms = sns.Topic(
            self,
            "Alarms",
            display_name="swegreen alarms",
            master_key=kms.Alias.from_alias_name(self, "SnsKey", "alias/aws/sns"),
        )
        if settings.alarm_email:
            self.alarms.add_subscription(subscriptions.EmailSubscription(settings.alarm_email))
        action = cw_actions.SnsAction(self.alarms)
        five_minutes = Duration.minutes(5)
        for name, metric in (
            ("PipelineFailed", self.state_machine.metric_failed(period=five_minutes)),
            ("PipelineTimedOut", self.state_machine.metric_timed_out(period=five_minutes)),
            ("RowsFailed", self.rows_machine.metric_failed(period=five_minutes)),
            (
                "EventsUndelivered",
                self.dead_letters.metric_approximate_number_of_messages_visible(
                    period=five_minutes
                ),
            ),
        ):
            cloudwatch.Alarm(
                self,
                name,
                metric=metric,
                threshold=1,
                evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            ).add_alarm_action(action)
        functions = [
            self.resolve,
            self.dispatch,
            self.watch,
            self.presign,
            self.classify,
            self.retry,
            self.aggregate,
            self.stopped,
        ]
        rows = row_metrics(five_minutes)
        errors = rows["error"]
        total = " + ".join(f"FILL({k}, 0)" for k in rows)
        signals = {
            # A run whose rows mostly end in error finishes "successfully": say so.
            "ErrorRows": (
                cloudwatch.MathExpression(
                    expression=f"IF(({total}) >= {ERROR_RATIO_MIN_ROWS}, "
                    f"100 * FILL(error, 0) / ({total}), 0)",
                    using_metrics=rows,
                    label="error rows (% of rows written)",
                    period=five_minutes,
                ),
                ERROR_RATIO_ALARM_PERCENT,
            ),
            "LambdaErrors": (_sum("Errors", functions, five_minutes), 1),
            "LambdaThrottles": (_sum("Throttles", functions, five_minutes), 1),
        }
        for name, (metric, threshold) in signals.items():
            cloudwatch.Alarm(
                self,
                name,
                metric=metric,
                threshold=threshold,
                evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            ).add_alarm_action(action)
        self.dashboard = self._dashboard(rows, errors, sandbox, functions)

    def _dashboard(
        self,
        rows: dict[str, cloudwatch.IMetric],
        errors: cloudwatch.IMetric,
        sandbox: Sandbox,
        functions: list[lambda_.Function],
    ) -> cloudwatch.Dashboard:
        """One page for a run: rows written by status, error rows, task retries, running
        tasks, Lambda errors and throttles, the executions."""
        minute = Duration.minutes(1)
        retries = cloudwatch.Metric(
            namespace=METRICS_NAMESPACE,
            metric_name="TaskRetries",
            dimensions_map={"service": "swegreen"},
            statistic="Sum",
            period=minute,
        )
        running = cloudwatch.Metric(
            namespace="ECS/ContainerInsights",
            metric_name="RunningTaskCount",
            dimensions_map={"ClusterName": sandbox.cluster.cluster_name},
            statistic="Maximum",
            period=minute,
        )
        dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name="swegreen")
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Rows written, by status", left=list(rows.values()), stacked=True, width=12
            ),
            cloudwatch.GraphWidget(title="Error rows", left=[errors], width=12),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(title="Fargate task retries", left=[retries], width=8),
            cloudwatch.GraphWidget(title="Running tasks", left=[running], width=8),
            cloudwatch.GraphWidget(
                title="Lambda errors and throttles",
                left=[_sum("Errors", functions, minute)],
                right=[_sum("Throttles", functions, minute)],
                width=8,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Executions",
                left=[
                    self.state_machine.metric_started(period=minute),
                    self.state_machine.metric_succeeded(period=minute),
                    self.state_machine.metric_failed(period=minute),
                    self.rows_machine.metric_failed(period=minute),
                ],
                width=24,
            )
        )
        return dashboard

    # ------------------------------------------------------------------ machines
    def _machine(
        self, id: str, definition: sfn.IChainable, name: str | None = None
    ) -> sfn.StateMachine:
        log_group = logs.LogGroup(
            self,
            f"{id}Logs",
            retention=retention(self.settings.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        return sfn.StateMachine(
            self,
            id,
            state_machine_name=name,
            definition_body=sfn.DefinitionBody.from_chainable(definition),
            state_machine_type=sfn.StateMachineType.STANDARD,
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ERROR),
            # Standard workflows' own limit; the rows phase has the run's own (RunRows).
            timeout=Duration.days(360),
        )

    def _phase(self, name: str, command: str, key_path: str) -> sfn.DistributedMap:
        """A build-phase Map: one trusted Fargate task per item of the list at
        ``key_path``; an item that fails is logged and left to the rows to report."""
        phase = sfn.DistributedMap(
            self,
            f"{name}Map",
            state_name=name,
            item_reader=sfn.S3JsonItemReader(
                bucket=self.bucket, key=sfn.JsonPath.string_at(key_path)
            ),
            max_concurrency_path="$.resolved.build_concurrency",
            item_selector={
                "run_id.$": "$.run_id",
                "index.$": "$$.Map.Item.Index",
                "items_key.$": key_path,
                "config_json.$": "$.resolved.config_json",
            },
            result_writer=sfn.ResultWriter(bucket=self.bucket, prefix=f"{MAP_RESULTS}{command}"),
            tolerated_failure_percentage=100,
            map_execution_type=sfn.StateMachineType.STANDARD,
            result_path=sfn.JsonPath.DISCARD,
        )
        not_made = sfn.Pass(self, f"{name}ItemNotMade")  # the task's log says why
        start, done = self._fargate(
            name.removesuffix("s"),
            self.sandbox.builder_definition,
            self.sandbox.builder_container.container_name,
            command,
            [
                _env("SWEGREEN_RUN_ID", "$.run_id"),
                _env("SWEGREEN_ITEMS_KEY", "$.items_key"),
                {"Name": "SWEGREEN_ITEM_INDEX", "Value.$": "States.Format('{}', $.index)"},
                _env("SWEGREEN_CONFIG", "$.config_json"),
            ],
            {"AwsvpcConfiguration": self.sandbox.networks[OPEN]},
            not_made,
        )
        done.next(sfn.Succeed(self, f"{name}ItemMade"))
        phase.item_processor(start)
        return phase

    def _row(self) -> sfn.IChainable:
        """One row: get the patch, evaluate it, write the verdict. Never fails."""
        record_error = self._invoke(
            "RecordError", self.classify, {"item.$": "$.item", "error.$": "$.error"}, "$.row"
        )
        # If even the error row cannot be written, the iteration still succeeds; Aggregate
        # then writes the missing row as an error.
        record_error.add_catch(
            sfn.Pass(self, "RowLost"), errors=["States.ALL"], result_path="$.lost"
        )
        dispatch = self._invoke("Dispatch", self.dispatch, {"item.$": "$.item"}, "$.patch")
        # A participant may work for half an hour: the row waits on a callback token, at no
        # cost in state transitions, until Watch hands the patch back (or the deadline).
        dispatch_wait = tasks.LambdaInvoke(
            self,
            "DispatchWaitStep",
            state_name="DispatchWait",
            lambda_function=self.dispatch,
            integration_pattern=sfn.IntegrationPattern.WAIT_FOR_TASK_TOKEN,
            payload=sfn.TaskInput.from_object(
                {"item.$": "$.item", "token": sfn.JsonPath.task_token}
            ),
            result_path="$.patch",
            task_timeout=sfn.Timeout.at("$.item.wait_seconds"),
            retry_on_service_exceptions=False,
        )
        _lambda_retry(dispatch_wait)
        presign = self._invoke(
            "Presign", self.presign, {"item.$": "$.item", "patch.$": "$.patch"}, "$.sandbox"
        )
        classify = self._invoke(
            "Classify", self.classify, {"item.$": "$.item", "patch.$": "$.patch"}, "$.row"
        )
        evaluate, evaluated = self._fargate(
            "Evaluate",
            self.sandbox.task_definition,
            self.sandbox.container.container_name,
            "evaluate",
            [
                _env("SWEGREEN_RUN_ID", "$.item.run_id"),
                _env("SWEGREEN_INSTANCE_ID", "$.item.instance_id"),
                _env("SWEGREEN_CONFIG", "$.item.config_json"),
                _env("SWEGREEN_MODEL", "$.patch.model"),
                _env("SWEGREEN_INPUT_URL", "$.sandbox.input_url"),
                _env("SWEGREEN_TASK_NETWORK", "$.sandbox.network"),
            ],
            # the row's, as Presign chose it: closed unless its tests need the internet
            {"AwsvpcConfiguration.$": "$.sandbox.awsvpc"},
            record_error,
        )
        for step in (dispatch, dispatch_wait, presign, classify):
            step.add_catch(record_error, result_path="$.error")
        has_patch = sfn.Choice(self, "HasPatch")
        has_patch.when(sfn.Condition.is_string("$.patch.patch_key"), presign.next(evaluate))
        has_patch.otherwise(classify)
        evaluated.next(classify)
        dispatch.next(has_patch)
        dispatch_wait.next(has_patch)
        return (
            sfn.Choice(self, "Participant?")
            .when(sfn.Condition.string_equals("$.item.source", "a2a"), dispatch_wait)
            .otherwise(dispatch)
        )

    def _fargate(
        self,
        name: str,
        definition: Any,
        container: str,
        command: str,
        environment: list[dict[str, str]],
        network: dict[str, Any],
        on_failure: sfn.IChainable,
    ) -> tuple[sfn.IChainable, sfn.Pass]:
        """A Fargate task that survives its infrastructure: Spot first, and after a failure
        TaskRetry decides (capacity, Spot interruption, image pull, network start-up:
        again, with full jitter, on-demand after Spot failed twice; out of memory or a
        crash: ``on_failure`` with the error at ``$.error``). Returns the first state and
        the one reached on success."""
        first = sfn.Pass(
            self,
            f"{name}FirstAttempt",
            result=sfn.Result.from_object(FIRST_ATTEMPT),
            result_path="$.attempt",
        )
        done = sfn.Pass(self, f"{name}Done")
        decide = self._invoke(
            f"{name}Failed",
            self.retry,
            {"error.$": "$.error", "attempt.$": "$.attempt"},
            "$.attempt",
        )
        decide.add_catch(on_failure, result_path="$.retry_error")
        capacity = sfn.Choice(self, f"{name}Capacity?")
        runs = {}
        for provider, suffix in (("FARGATE_SPOT", "Spot"), ("FARGATE", "OnDemand")):
            run = sfn.CustomState(
                self,
                f"{name}{suffix}",
                state_json=self._run_task(
                    definition, container, command, environment, network, provider
                ),
            )
            run.add_retry(
                errors=ECS_RETRYABLE,
                interval=Duration.seconds(10),
                max_attempts=5,
                backoff_rate=2.0,
                jitter_strategy=sfn.JitterType.FULL,
                max_delay=Duration.seconds(120),
            )
            run.add_catch(decide, errors=["States.ALL"], result_path="$.error")
            run.next(done)
            runs[provider] = run
        capacity.when(sfn.Condition.string_equals("$.attempt.capacity", "FARGATE"), runs["FARGATE"])
        capacity.otherwise(runs["FARGATE_SPOT"])
        backoff = sfn.Wait(
            self, f"{name}Backoff", time=sfn.WaitTime.seconds_path("$.attempt.wait_seconds")
        )
        again = sfn.Choice(self, f"{name}Again?")
        again.when(sfn.Condition.boolean_equals("$.attempt.retry", True), backoff.next(capacity))
        again.otherwise(on_failure)
        decide.next(again)
        first.next(capacity)
        return first, done

    def _run_task(
        self,
        definition: Any,
        container: str,
        command: str,
        environment: list[dict[str, str]],
        network: dict[str, Any],
        provider: str,
    ) -> dict[str, Any]:
        """ecs:runTask.sync on a capacity provider (CDK's EcsRunTask knows only launch
        types); its permissions are granted in ``_grant_tasks``."""
        box = self.sandbox
        return {
            "Type": "Task",
            "Resource": f"arn:{Stack.of(self).partition}:states:::ecs:runTask.sync",
            "Parameters": {
                "Cluster": box.cluster.cluster_arn,
                "TaskDefinition": definition.task_definition_arn,
                "CapacityProviderStrategy": [{"CapacityProvider": provider, "Weight": 1}],
                "PlatformVersion": "1.4.0",
                "NetworkConfiguration": network,
                "Overrides": {
                    "ContainerOverrides": [
                        {"Name": container, "Command": [command], "Environment": environment}
                    ]
                },
            },
            "TimeoutSeconds": SANDBOX_TASK_HOURS * 3600,
            # Only the task's ARN is kept beside the state's input. (A None ResultPath,
            # "discard", would not survive: CustomState drops null members, and the
            # default ResultPath "$" would replace the row's input with the ECS answer.)
            "ResultSelector": {"task_arn.$": "$.TaskArn"},
            "ResultPath": "$.task",
        }

    def _invoke(
        self, name: str, fn: lambda_.IFunction, payload: dict, result_path: str
    ) -> tasks.LambdaInvoke:
        step = tasks.LambdaInvoke(
            self,
            f"{name}Step",  # construct ids must not clash with the functions'
            state_name=name,
            lambda_function=fn,
            payload=sfn.TaskInput.from_object(payload),
            payload_response_only=True,
            result_path=result_path,
            retry_on_service_exceptions=False,
        )
        _lambda_retry(step)
        return step

    # ------------------------------------------------------------------ permissions
    def _s3(self, fn: lambda_.IFunction, actions: list[str], *patterns: str) -> None:
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=actions, resources=[self.bucket.arn_for_objects(p) for p in patterns]
            )
        )

    def _list(self, fn: lambda_.IFunction, prefix: str) -> None:
        """ListBucket under ``prefix`` only: a missing object is then a 404, not a 403."""
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[self.bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{prefix}*"]}},
            )
        )

    def _grant_data(
        self,
        table: ddb.ITable,
        idempotency: ddb.ITable,
        runs: str,
        datasets: str,
        artifacts: str,
    ) -> None:
        """Least privilege, per function: the S3 prefixes and the DynamoDB calls each makes
        (swegreen.aws.dynamo_store). No function may delete an object version."""
        row = f"{runs}*/instances/*/"
        read, write, delete = ["s3:GetObject"], ["s3:PutObject"], ["s3:DeleteObject"]
        self._s3(self.resolve, read, f"{datasets}*", "predictions/*", f"{artifacts}repos/*.json")
        self._s3(self.resolve, write, f"{runs}*")
        self._list(self.resolve, artifacts)
        self._s3(self.dispatch, read, "predictions/*", f"{row}{INSTANCE}")
        self._s3(self.dispatch, write, f"{row}patch.diff")
        self._s3(self.watch, write, f"{row}patch.diff")
        # Presign's grant is also what its pre-signed URLs can do.
        self._s3(self.presign, read, f"{runs}*", f"{artifacts}*")
        self._s3(self.presign, write, f"{row}*")
        self._s3(self.presign, delete, f"{row}result.json")
        self._list(self.presign, artifacts)
        self._s3(self.classify, read + write, f"{runs}*")
        self._s3(self.classify, delete, f"{row}{SANDBOX_INPUT}")
        self._s3(self.aggregate, read + write, f"{runs}*")
        table.grant(
            self.resolve,
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:Query",
        )
        table.grant(self.dispatch, "dynamodb:PutItem")  # a row waiting for its participant
        table.grant(self.watch, "dynamodb:Query", "dynamodb:DeleteItem")
        table.grant(self.classify, "dynamodb:PutItem", "dynamodb:UpdateItem")
        table.grant(
            self.aggregate,
            "dynamodb:GetItem",
            "dynamodb:Query",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
        )
        table.grant(self.stopped, "dynamodb:UpdateItem", "dynamodb:PutItem")
        idempotency.grant(  # powertools' idempotency records
            self.classify,
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
        )

    def _grant_tasks(self, runs: str) -> None:
        """What running the Fargate tasks takes, and no more: RunTask of the two task
        definitions in this cluster, passing their roles, stopping and describing this
        cluster's tasks, and the rule Step Functions uses to follow them."""
        box = self.sandbox
        stack = Stack.of(self)
        definitions = (box.builder_definition, box.task_definition)
        statements = [
            iam.PolicyStatement(
                actions=["ecs:RunTask"],
                resources=[d.task_definition_arn for d in definitions],
                conditions={"ArnEquals": {"ecs:cluster": box.cluster.cluster_arn}},
            ),
            iam.PolicyStatement(
                actions=["ecs:StopTask", "ecs:DescribeTasks"],
                resources=[box.task_arn_pattern()],
            ),
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[
                    role.role_arn
                    for d in definitions
                    for role in (d.task_role, d.obtain_execution_role())
                ],
            ),
            iam.PolicyStatement(
                actions=["events:PutTargets", "events:PutRule", "events:DescribeRule"],
                resources=[
                    stack.format_arn(
                        service="events",
                        resource="rule",
                        resource_name="StepFunctionsGetEventsForECSTaskRule",
                    )
                ],
            ),
        ]
        for machine in (self.state_machine, self.rows_machine):
            for statement in statements:
                machine.add_to_role_policy(statement)
            # The distributed maps read their item lists and write their results; nothing
            # else of the bucket (CDK's item reader and writer grants are bucket-wide).
            machine.add_to_role_policy(
                iam.PolicyStatement(
                    effect=iam.Effect.DENY,
                    actions=["s3:GetObject", "s3:PutObject"],
                    not_resources=[
                        self.bucket.arn_for_objects(f"{runs}*/items.json"),
                        self.bucket.arn_for_objects(f"{runs}*/builds.json"),
                        self.bucket.arn_for_objects(f"{runs}*/prepares.json"),
                        self.bucket.arn_for_objects(f"{MAP_RESULTS}*"),
                    ],
                )
            )


def row_metrics(period: Duration) -> dict[str, cloudwatch.IMetric]:
    """Rows written per status (Classify's ``Rows_<status>`` metric), keyed by status."""
    return {
        status.value: cloudwatch.Metric(
            namespace=METRICS_NAMESPACE,
            metric_name=f"Rows_{status.value}",
            dimensions_map={"service": "swegreen"},
            statistic="Sum",
            period=period,
            label=status.value,
        )
        for status in Status
    }


def _sum(name: str, functions: list[lambda_.Function], period: Duration) -> cloudwatch.IMetric:
    """``name`` (Errors, Throttles) summed over ``functions``."""
    using = {
        f"{name.lower()}{n}": fn.metric(name, statistic="Sum", period=period)
        for n, fn in enumerate(functions)
    }
    return cloudwatch.MathExpression(
        expression=" + ".join(f"FILL({k}, 0)" for k in using),
        using_metrics=using,
        label=f"Lambda {name.lower()}",
        period=period,
    )


def _lambda_retry(step: tasks.LambdaInvoke) -> None:
    step.add_retry(
        errors=LAMBDA_RETRYABLE,
        interval=Duration.seconds(2),
        max_attempts=6,
        backoff_rate=2.0,
        jitter_strategy=sfn.JitterType.FULL,
        max_delay=Duration.seconds(60),
    )


def _env(name: str, path: str) -> dict[str, str]:
    """A container override's variable: ECS wants strings, so only string fields here."""
    return {"Name": name, "Value.$": path}


def _json(value: object) -> str:
    import json

    return json.dumps(value)
