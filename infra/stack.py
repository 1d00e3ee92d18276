"""The one stack: storage, the sandbox, the workflow and the front door."""

from __future__ import annotations

from importlib.metadata import version

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from infra.account_setup import AccountSetup
from infra.front_door import FrontDoor
from infra.sandbox import Sandbox
from infra.settings import StackSettings
from infra.storage import Storage
from infra.workflow import Workflow
from swegreen.aws.pipeline import INSTANCE
from swegreen.aws.prebuilt import PREFIX

RUNS_PREFIX = "runs/"
DATASETS_PREFIX = "datasets/"
ARTIFACTS_PREFIX = PREFIX  # prebuilt environments, mirrors, prepared workspaces


class SweGreenStack(Stack):
    def __init__(
        self, scope: Construct, id: str, *, settings: StackSettings, **kwargs: object
    ) -> None:
        super().__init__(scope, id, **kwargs)
        storage = Storage(self, "Storage", retain=settings.retain_data)
        account = AccountSetup(self, "AccountSetup", settings=settings)
        sandbox = Sandbox(
            self,
            "Sandbox",
            settings=settings,
            bucket=storage.bucket,
            runs_prefix=RUNS_PREFIX,
            artifacts_prefix=ARTIFACTS_PREFIX,
            instance_name=INSTANCE,
            account=account,
        )
        workflow = Workflow(
            self,
            "Workflow",
            settings=settings,
            bucket=storage.bucket,
            table=storage.table,
            idempotency=storage.idempotency,
            sandbox=sandbox,
            runs_prefix=RUNS_PREFIX,
            datasets_prefix=DATASETS_PREFIX,
            artifacts_prefix=ARTIFACTS_PREFIX,
            grader=f"swebench {version('swebench')}",
        )
        front = FrontDoor(
            self,
            "FrontDoor",
            settings=settings,
            state_machine=workflow.state_machine,
            table=storage.table,
            bucket=storage.bucket,
            runs_prefix=RUNS_PREFIX,
            predictions=workflow.predictions,
        )
        CfnOutput(self, "ApiUrl", value=front.api.url)
        CfnOutput(self, "StateMachineArn", value=workflow.state_machine.state_machine_arn)
        CfnOutput(self, "RowsStateMachineArn", value=workflow.rows_machine.state_machine_arn)
        CfnOutput(self, "WatchFunctionName", value=workflow.watch.function_name)
        if workflow.endpoints is not None:  # invoked ahead of a campaign of runs (docs/aws.md)
            CfnOutput(self, "EndpointsFunctionName", value=workflow.endpoints.function_name)
        CfnOutput(self, "AlarmTopicArn", value=workflow.alarms.topic_arn)
        CfnOutput(self, "BucketName", value=storage.bucket.bucket_name)
        CfnOutput(self, "TableName", value=storage.table.table_name)
