"""The pipeline's Lambda functions (one code asset, thin handlers in functions/) and what
each may do: least privilege per function, and the Fargate tasks' permissions for the
state machines."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as ddb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3

from infra.bundling import lambda_code
from infra.sandbox import ISOLATION, Sandbox
from infra.settings import StackSettings, retention
from infra.states import MAP_RESULTS
from swegreen.aws.endpoints import LEASE_TAG, TAG
from swegreen.aws.pipeline import INSTANCE, PREDICTION, PREDICTIONS_PREFIX, SANDBOX_INPUT
from swegreen.aws.predictions_upload import UPLOADS_PREFIX

ROOT = Path(__file__).resolve().parents[1]


class FunctionParts:
    """The functions and their grants; mixed into the workflow construct."""

    def _functions(
        self,
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
        """The functions, their environment and their data grants."""
        code = lambda_code()
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
        # and to the account's Lambda concurrency (GetAccountSettings takes no resource)
        self.resolve.add_to_role_policy(
            iam.PolicyStatement(actions=["lambda:GetAccountSettings"], resources=["*"])
        )
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
        # PUT /predictions and POST /predictions/uploads (infra/front_door.py)
        self.predictions = function("Predictions", 30, 1024)
        self.endpoints: lambda_.Function | None = None
        if sandbox.endpoint_spec is not None:
            self._endpoints(function("Endpoints", 900, 256), sandbox.endpoint_spec)
        self._grant_data(table, idempotency, runs_prefix, datasets_prefix, artifacts_prefix)

    def _endpoints(self, fn: lambda_.Function, spec: dict[str, object]) -> None:
        """Endpoints makes the closed rows' interface endpoints before a run's rows; Watch
        deletes them when no run runs. Both may touch only endpoints tagged as this
        stack's (swegreen.aws.endpoints)."""
        self.endpoints = fn
        stack = Stack.of(self)
        spec_json = stack.to_json_string(spec)
        owner = {"StringEquals": {f"aws:RequestTag/{TAG}": stack.stack_name}}
        mine = {"StringEquals": {f"ec2:ResourceTag/{TAG}": stack.stack_name}}

        def ec2_arn(kind: str, name: str = "*") -> str:
            return stack.format_arn(service="ec2", resource=kind, resource_name=name)

        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["ec2:CreateVpcEndpoint"],
                resources=[ec2_arn("vpc-endpoint")],
                conditions=owner,
            )
        )
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["ec2:CreateVpcEndpoint"],
                resources=[ec2_arn("vpc"), ec2_arn("subnet"), ec2_arn("security-group")],
            )
        )
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["ec2:CreateTags"],
                resources=[ec2_arn("vpc-endpoint")],
                conditions={"StringEquals": {"ec2:CreateAction": "CreateVpcEndpoint"}},
            )
        )
        # a run's lease on the stack's own endpoints (swegreen.aws.endpoints: LEASE_TAG)
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["ec2:CreateTags"],
                resources=[ec2_arn("vpc-endpoint")],
                conditions={
                    **mine,
                    "ForAllValues:StringEquals": {"aws:TagKeys": [LEASE_TAG]},
                },
            )
        )
        # private DNS: the endpoint's hosted zone is associated with the VPC
        fn.add_to_role_policy(
            iam.PolicyStatement(actions=["route53:AssociateVPCWithHostedZone"], resources=["*"])
        )
        for f in (fn, self.watch):
            f.add_environment("SWEGREEN_ENDPOINTS", spec_json)
            f.add_to_role_policy(  # Describe* takes no resource but "*"
                iam.PolicyStatement(actions=["ec2:DescribeVpcEndpoints"], resources=["*"])
            )
        self.watch.add_to_role_policy(
            iam.PolicyStatement(
                actions=["ec2:DeleteVpcEndpoints"],
                resources=[ec2_arn("vpc-endpoint")],
                conditions=mine,
            )
        )

    # ------------------------------------------------------------------ permissions
    def _s3(self, fn: lambda_.IFunction, actions: list[str], *patterns: str) -> None:
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=actions, resources=[self.bucket.arn_for_objects(p) for p in patterns]
            )
        )

    def _list(self, fn: lambda_.IFunction, *prefixes: str) -> None:
        """ListBucket under ``prefixes`` only: a missing object there is then a 404 (S3
        answers 403 AccessDenied to a caller that may not list), which the steps read as
        "not there" (a row without its result, a dataset not uploaded yet)."""
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[self.bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{p}*" for p in prefixes]}},
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
        # Each may list where it reads (_list): every read may find its object missing.
        predictions = PREDICTIONS_PREFIX
        self._s3(self.resolve, read, f"{datasets}*", f"{predictions}*", f"{artifacts}repos/*.json")
        self._s3(self.resolve, write, f"{runs}*")
        self._list(self.resolve, datasets, predictions, artifacts)
        self._s3(self.dispatch, read, f"{predictions}*", f"{row}{INSTANCE}", f"{row}{PREDICTION}")
        self._s3(self.dispatch, write, f"{row}patch.diff")
        self._list(self.dispatch, predictions, runs)
        self._s3(self.watch, write, f"{row}patch.diff")
        # Presign's grant is also what its pre-signed URLs can do.
        self._s3(self.presign, read, f"{runs}*", f"{artifacts}*")
        self._s3(self.presign, write, f"{row}*")
        self._s3(self.presign, delete, f"{row}result.json")
        self._list(self.presign, runs, artifacts)
        self._s3(self.classify, read + write, f"{runs}*")
        self._s3(self.classify, delete, f"{row}{SANDBOX_INPUT}")
        self._list(self.classify, runs)
        self._s3(self.aggregate, read + write, f"{runs}*")
        self._list(self.aggregate, runs)
        # what it keeps, and what its pre-signed URLs may put: a fresh key there each
        self._s3(self.predictions, write, f"{UPLOADS_PREFIX}*")
        # DeleteItem: a run resumed with fewer rows drops its selection's last items
        table.grant(
            self.resolve,
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:Query",
            "dynamodb:DeleteItem",
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
            "dynamodb:DeleteItem",  # as Resolve: the run's record rewritten
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


def _json(value: object) -> str:
    import json

    return json.dumps(value)
