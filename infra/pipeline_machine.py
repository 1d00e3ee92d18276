"""The Pipeline state machine (one execution per run): Resolve, the build phase's two
distributed Maps (trusted tasks), the rows phase as a child execution, Aggregate; a run
that cannot start or publish says so in its record."""

from __future__ import annotations

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_dynamodb as ddb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks

from infra.sandbox import OPEN
from infra.states import (
    MAP_RESULTS,
    StateParts,
    _env,
)


class PipelineMachine(StateParts):
    """The Pipeline machine; mixed into the workflow construct (its resources keep their
    ids)."""

    def _pipeline_machine(
        self, table: ddb.ITable, runs_prefix: str, rows_name: str, rows_arn: str
    ) -> None:
        """Builds ``self.state_machine``, and lets Stopped, Dispatch and Watch reach the
        rows' executions."""
        # The execution's input as it is (StartEvent: what is left out takes its default).
        resolve = self._invoke("Resolve", self.resolve, None, result_path="$.resolved")
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
        # The closed rows' endpoints, made for this run (none standing: infra/sandbox.py);
        # if they fail to come up the run goes on and its closed rows say why; if the
        # VPC's own endpoints answer in a group the rows may not reach, no row could run:
        # the run stops, its record naming the setting that mends it.
        start: sfn.IChainable = want_builds
        if self.endpoints is not None:
            endpoints = self._invoke(
                "Endpoints", self.endpoints, {"run_id.$": "$.run_id"}, "$.endpoints"
            )
            endpoints.add_catch(
                run_failed, errors=["EndpointsUnreachable"], result_path="$.failure"
            )
            endpoints.add_catch(want_builds, result_path="$.endpoints_error")
            start = endpoints.next(want_builds)
        # A dry run ends once Resolve has recorded the run's estimate.
        dry_run = (
            sfn.Choice(self, "DryRun?")
            .when(
                sfn.Condition.boolean_equals("$.resolved.dry_run", True),
                sfn.Succeed(self, "Estimated"),
            )
            .otherwise(start)
        )
        self.state_machine = self._machine("Pipeline", resolve.next(dry_run))
        if self.endpoints is not None:  # Watch deletes them when no run of this machine runs
            self.watch.add_environment(
                "SWEGREEN_PIPELINE_ARN", self.state_machine.state_machine_arn
            )
            self.watch.add_to_role_policy(  # exactly what any_running asks, nothing more
                iam.PolicyStatement(
                    actions=["states:ListExecutions"],
                    resources=[self.state_machine.state_machine_arn],
                )
            )
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
        # Dispatch and Watch hand patches back to the rows' executions. The service
        # authorization reference lists no resource type for these actions (the task
        # token names the task): a statement scoped to an ARN is refused, "*" is the only
        # resource they accept. The token, unguessable and held by these two, is the scope.
        for fn in (self.dispatch, self.watch):
            fn.add_to_role_policy(
                iam.PolicyStatement(
                    actions=["states:SendTaskSuccess", "states:SendTaskFailure"],
                    resources=["*"],
                )
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
