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

from aws_cdk import aws_dynamodb as ddb
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.functions import FunctionParts
from infra.monitoring import MonitoringParts
from infra.pipeline_machine import PipelineMachine
from infra.rows_machine import RowsMachine
from infra.sandbox import Sandbox
from infra.settings import StackSettings


class Workflow(Construct, FunctionParts, RowsMachine, PipelineMachine, MonitoringParts):
    """The functions, both state machines and their monitoring, in one construct scope: one
    module each (functions.py, rows_machine.py, pipeline_machine.py, monitoring.py), and
    the resources keep the logical ids a deployed stack has (the Rows machine has a fixed
    name: a new id would make CloudFormation replace it, which a named resource refuses)."""

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
        self._functions(
            settings,
            bucket,
            table,
            idempotency,
            sandbox,
            runs_prefix,
            datasets_prefix,
            artifacts_prefix,
            grader,
        )
        rows_name, rows_arn = self._rows_machine(bucket)
        self._pipeline_machine(table, runs_prefix, rows_name, rows_arn)
        self._monitoring(settings, sandbox)
