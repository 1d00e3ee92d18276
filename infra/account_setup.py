"""AccountSetup: a custom resource (a Python function of the stack's code asset, no
provider framework) that makes ECS's service-linked role when the account has none and
finds the region's S3 prefix list, before the cluster and the closed rows' egress rule
that need them (swegreen.aws.account_setup)."""

from __future__ import annotations

from aws_cdk import CustomResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.bundling import lambda_code
from infra.settings import StackSettings, retention
from swegreen.aws.account_setup import ECS_PATH, ECS_ROLE, ECS_SERVICE

SETUP_SERVICE_TIMEOUT = 600  # seconds: the function's own 300, twice


class AccountSetup(Construct):
    def __init__(self, scope: Construct, id: str, *, settings: StackSettings) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        log_group = logs.LogGroup(
            self,
            "Logs",
            retention=retention(settings.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        fn = lambda_.Function(
            self,
            "Function",
            runtime=lambda_.Runtime.PYTHON_3_12,
            architecture=lambda_.Architecture.X86_64,
            handler="setup.handler",
            code=lambda_code(),
            # the new role's wait (ROLE_WAIT_SECONDS, 240 s) and the answer
            timeout=Duration.seconds(300),
            memory_size=256,
            environment={"POWERTOOLS_SERVICE_NAME": "swegreen"},
            log_group=log_group,
        )
        ecs_role = stack.format_arn(
            service="iam",
            region="",
            resource="role",
            resource_name=f"{ECS_PATH.strip('/')}/{ECS_ROLE}",
        )
        fn.add_to_role_policy(iam.PolicyStatement(actions=["iam:GetRole"], resources=[ecs_role]))
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["iam:CreateServiceLinkedRole"],
                resources=[ecs_role],
                conditions={"StringEquals": {"iam:AWSServiceName": ECS_SERVICE}},
            )
        )
        fn.add_to_role_policy(  # Describe* takes no resource but "*"
            iam.PolicyStatement(actions=["ec2:DescribeManagedPrefixLists"], resources=["*"])
        )
        self.resource = CustomResource(
            self,
            "Resource",
            service_token=fn.function_arn,
            resource_type="Custom::SweGreenAccountSetup",
            properties={"S3PrefixListId": settings.s3_prefix_list_id},
            # a function that never answers (killed, out of memory) fails the stack in
            # this long, not CloudFormation's default hour
            service_timeout=Duration.seconds(SETUP_SERVICE_TIMEOUT),
        )

    @property
    def s3_prefix_list_id(self) -> str:
        """The region's S3 prefix list (the one given in the settings, else found)."""
        return self.resource.get_att_string("S3PrefixListId")
