"""Operations: the events that end a run's record (a stopped, timed-out or failed
execution, with a dead-letter queue), Watch's schedule, the alarms and the dashboard."""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs

from infra.sandbox import Sandbox
from infra.settings import StackSettings
from swegreen.core.classify import Status

METRICS_NAMESPACE = "SweGreen"  # the functions' metrics (powertools, functions/runtime.py)
# The error-rows alarm: at least this share of the rows written in 5 minutes, once there
# are enough rows for a share to mean something.
ERROR_RATIO_ALARM_PERCENT = 50
ERROR_RATIO_MIN_ROWS = 4


class MonitoringParts:
    """Events, alarms and the dashboard; mixed into the workflow construct."""

    def _monitoring(self, settings: StackSettings, sandbox: Sandbox) -> None:
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
        # Encrypted (alarm texts name runs and functions) with a key of the stack's own:
        # CloudWatch cannot publish to a topic under the AWS managed SNS key, whose policy
        # no one can change; this key's policy lets CloudWatch, for this account only, make
        # and read the data keys its alarm messages need ($1 a month, docs/aws.md).
        key = kms.Key(
            self,
            "AlarmsKey",
            description="swegreen: the alarm topic's messages",
            enable_key_rotation=True,
        )
        key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}},
            )
        )
        self.alarms = sns.Topic(self, "Alarms", display_name="swegreen alarms", master_key=key)
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
            self.predictions,
            *([self.endpoints] if self.endpoints is not None else []),  # closed rows' VPC
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
        }
        for kind in ("Errors", "Throttles"):
            # a math expression takes 10 metrics at most: an alarm per ten functions
            for n, metric in enumerate(_sums(kind, functions, five_minutes)):
                signals[f"Lambda{kind}{n + 1 if n else ''}"] = (metric, 1)
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
        if settings.dashboard:  # $3 a month past an account's first three
            self._dashboard(rows, errors, sandbox, functions)

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
        # named after the stack: dashboard names are unique per account and region, so a
        # second stack in the account (another region's, a test deployment) must not clash
        dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            # dashboard names are the account's, in every region: the region makes a second
            # region's stack of the same name its own
            dashboard_name=f"{Stack.of(self).stack_name}-swegreen-{Stack.of(self).region}",
        )
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
                left=_sums("Errors", functions, minute),
                right=_sums("Throttles", functions, minute),
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


# CloudWatch's limit on the metrics one math expression (and so one alarm) may use
MAX_EXPRESSION_METRICS = 10


def _sums(
    name: str, functions: list[lambda_.Function], period: Duration
) -> list[cloudwatch.IMetric]:
    """``name`` (Errors, Throttles) summed over ``functions``, ten functions a sum at
    most (``MAX_EXPRESSION_METRICS``): one more function never breaks the deploy."""
    sums: list[cloudwatch.IMetric] = []
    for start in range(0, len(functions), MAX_EXPRESSION_METRICS):
        chunk = functions[start : start + MAX_EXPRESSION_METRICS]
        using = {
            f"{name.lower()}{start + n}": fn.metric(name, statistic="Sum", period=period)
            for n, fn in enumerate(chunk)
        }
        part = (
            f" ({start + 1}-{start + len(chunk)})"
            if len(functions) > MAX_EXPRESSION_METRICS
            else ""
        )
        sums.append(
            cloudwatch.MathExpression(
                expression=" + ".join(f"FILL({k}, 0)" for k in using),
                using_metrics=using,
                label=f"Lambda {name.lower()}{part}",
                period=period,
            )
        )
    return sums
