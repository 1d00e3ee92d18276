"""What both state machines are made of: a Lambda step with its retries, a Fargate task
that survives its infrastructure (Spot first, TaskRetry deciding), and a logged, traced
Standard machine. Built in the workflow's scope (``WorkflowParts``)."""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks

from infra.settings import retention
from swegreen.aws.pipeline.models import SANDBOX_TASK_SECONDS  # URLs signed just past it

# Throttling and service hiccups: retried with jitter. Anything else goes to RecordError.
LAMBDA_RETRYABLE = [
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
]
# ECS's own API errors: retried in place (RunTask throttled, a service hiccup).
ECS_RETRYABLE = [
    "ECS.AmazonECSException",
    "ECS.ServerException",
    "ECS.ThrottlingException",
    "ECS.LimitExceededException",
]
MAP_RESULTS = "map-results/"  # the distributed maps' ResultWriter prefix
FIRST_ATTEMPT = {
    "number": 1,
    "capacity": "FARGATE_SPOT",
    "wait_seconds": 0,
    "retry": True,
    "why": "",
}


class StateParts:
    """Builders of states; mixed into the workflow construct, which holds the functions,
    the sandbox and the settings they use."""

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

    def _fargate(
        self,
        name: str,
        definition: Any,
        container: str,
        command: str,
        environment: list[dict[str, str]],
        network: dict[str, Any],
        on_failure: sfn.IChainable,
        before: sfn.INextable | None = None,
    ) -> tuple[sfn.IChainable, sfn.Pass]:
        """A Fargate task that survives its infrastructure: Spot first, and after a failure
        TaskRetry decides (capacity, Spot interruption, image pull, network start-up:
        again, with full jitter, on-demand after Spot failed twice; out of memory or a
        crash: ``on_failure`` with the error at ``$.error``). ``before`` runs ahead of
        every attempt (the evaluate task's URLs, signed for that attempt alone). Returns
        the first state and the one reached on success."""
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
        decide.next(again)
        start: sfn.IChainable = capacity
        if before is not None:
            before.next(capacity)
            start = before  # type: ignore[assignment]
        again.when(sfn.Condition.boolean_equals("$.attempt.retry", True), backoff.next(start))
        again.otherwise(on_failure)
        first.next(start)
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
            "TimeoutSeconds": SANDBOX_TASK_SECONDS,
            # Only the task's ARN is kept beside the state's input. (A None ResultPath,
            # "discard", would not survive: CustomState drops null members, and the
            # default ResultPath "$" would replace the row's input with the ECS answer.)
            "ResultSelector": {"task_arn.$": "$.TaskArn"},
            "ResultPath": "$.task",
        }

    def _invoke(
        self, name: str, fn: lambda_.IFunction, payload: dict | None, result_path: str
    ) -> tasks.LambdaInvoke:
        """``fn`` called with ``payload`` (an object of paths; None: the state's input)."""
        step = tasks.LambdaInvoke(
            self,
            f"{name}Step",  # construct ids must not clash with the functions'
            state_name=name,
            lambda_function=fn,
            payload=None if payload is None else sfn.TaskInput.from_object(payload),
            payload_response_only=True,
            result_path=result_path,
            retry_on_service_exceptions=False,
        )
        _lambda_retry(step)
        return step


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
