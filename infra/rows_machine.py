"""The Rows state machine (one child execution per run): a distributed Map over the run's
items, at most max_concurrent_rows at once; per row Dispatch or DispatchWait, Presign,
the Evaluate task, Classify, or RecordError. A row never fails the run."""

from __future__ import annotations

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks

from infra.states import (
    MAP_RESULTS,
    StateParts,
    _env,
    _lambda_retry,
)


class RowsMachine(StateParts):
    """The Rows machine; mixed into the workflow construct (its resources keep their ids)."""

    def _rows_machine(self, bucket: s3.IBucket) -> tuple[str, str]:
        """Builds ``self.rows_machine``; returns its name and ARN (known by name, not by
        reference: Dispatch and Watch, which it invokes, are granted it)."""
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
        # Named, so that its ARN is known without a reference to it (Stopped stops its
        # executions by that ARN; a reference would be a cycle: it invokes the functions).
        rows_name = f"{Stack.of(self).stack_name}-Rows"
        self.rows_machine = self._machine("Rows", rows_map, name=rows_name)
        rows_arn = Stack.of(self).format_arn(
            service="states",
            resource="stateMachine",
            resource_name=rows_name,
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )

        return rows_name, rows_arn

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
            _evaluate_env(_env("SWEGREEN_MODEL", "$.patch.model")),
            # the row's, as Presign chose it: closed unless its tests need the internet
            {"AwsvpcConfiguration.$": "$.sandbox.awsvpc"},
            record_error,
            before=presign,  # each attempt's own URLs, valid just past its deadline
        )
        for step in (dispatch, dispatch_wait, presign, classify):
            step.add_catch(record_error, result_path="$.error")
        has_patch = sfn.Choice(self, "HasPatch")
        has_patch.when(sfn.Condition.is_string("$.patch.patch_key"), evaluate)
        has_patch.otherwise(classify)
        evaluated.next(classify)
        dispatch.next(has_patch)
        dispatch_wait.next(has_patch)
        return (
            sfn.Choice(self, "Participant?")
            .when(sfn.Condition.is_present("$.item.batch[0]"), self._batch())
            .when(sfn.Condition.string_equals("$.item.source", "a2a"), dispatch_wait)
            .otherwise(dispatch)
        )

    def _batch(self) -> sfn.IChainable:
        """A batch of rows (patches known up front): every row's patch, one task that
        evaluates them in turn (its start paid once), every row written. A failed or
        reclaimed task's retry evaluates only the rows without a result; a batch that
        fails for good writes the rows that have one as graded, the others as errors."""
        start = sfn.Pass(
            self,
            "BatchStart",
            result=sfn.Result.from_object({"rows": {}}),  # Dispatch may fail before any
            result_path="$.patches",
        )
        batch = {"item.$": "$.item", "patches.$": "$.patches"}
        record_error = self._invoke(
            "BatchRecordError", self.classify, {**batch, "error.$": "$.error"}, "$.row"
        )
        record_error.add_catch(
            sfn.Pass(self, "BatchLost"), errors=["States.ALL"], result_path="$.lost"
        )
        dispatch = self._invoke("BatchDispatch", self.dispatch, {"item.$": "$.item"}, "$.patches")
        presign = self._invoke("BatchPresign", self.presign, batch, "$.sandbox")
        classify = self._invoke("BatchClassify", self.classify, batch, "$.row")
        evaluate, evaluated = self._fargate(
            "BatchEvaluate",
            self.sandbox.task_definition,
            self.sandbox.container.container_name,
            "evaluate",
            _evaluate_env(),  # each row's model is in the batch's manifest
            {"AwsvpcConfiguration.$": "$.sandbox.awsvpc"},
            record_error,
            before=presign,  # each attempt: the rows still to do, their own URLs
        )
        for step in (dispatch, presign, classify):
            step.add_catch(record_error, result_path="$.error")
        # rows without a patch (empty, none) are decided without a task, as locally
        any_patch = sfn.Choice(self, "BatchHasPatch")
        any_patch.when(sfn.Condition.boolean_equals("$.patches.any_patch", True), evaluate)
        any_patch.otherwise(classify)
        start.next(dispatch).next(any_patch)
        evaluated.next(classify)
        return start


def _evaluate_env(*extra: dict[str, str]) -> list[dict[str, str]]:
    """The evaluate task's variables: a row's or a batch's (its manifest at the input URL)."""
    return [
        _env("SWEGREEN_RUN_ID", "$.item.run_id"),
        _env("SWEGREEN_INSTANCE_ID", "$.item.instance_id"),
        _env("SWEGREEN_CONFIG", "$.item.config_json"),
        *extra,
        _env("SWEGREEN_INPUT_URL", "$.sandbox.input_url"),
        _env("SWEGREEN_TASK_NETWORK", "$.sandbox.network"),
    ]
