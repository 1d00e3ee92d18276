"""Where the work runs: Fargate tasks of the sandbox image, split by trust
(docs/security-aws.md), on each task's own disk (no shared file system).

builder   the build phase (``build``, ``prepare``): runs no participant code; its role may
          read the run's item lists and instance.json files, and read and write the
          prebuilt artifacts (``artifacts/``), nothing else.
evaluate  one row: applies the patch and runs the tests; its role may do nothing at all
          (its input, artifacts and outputs go through the Presign step's pre-signed URLs).

Both run the sandbox image, pinned to linux/amd64, as a non-root user. Fargate cannot run
bubblewrap, so both opt in to the weaker ``process`` isolation (SWEGREEN_ISOLATION), which
the rows' provenance records. Both can run on Fargate Spot or on-demand (the state machine
chooses per attempt: infra/workflow.py).
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.settings import StackSettings, retention

ROOT = Path(__file__).resolve().parents[1]
# Every task's cache, on its own disk. Environments hold absolute paths, so an artifact is
# unpacked where it was built: the same path in every task.
CACHE_MOUNT = "/var/cache/swegreen"
# The sandbox image's user (container/Dockerfile, ARG SANDBOX_UID).
SANDBOX_UID = 10001
# Fargate has no user namespaces for bubblewrap: the explicit opt-in to the weaker mode.
ISOLATION = "process"
IMAGE_EXCLUDES = [
    ".venv",
    ".venv-*",
    "results",
    "node_modules",
    "cdk.out",
    ".git",
    "build",
    "**/__pycache__",
]


class Sandbox(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        settings: StackSettings,
        bucket: s3.IBucket,
        runs_prefix: str,
        artifacts_prefix: str,
        instance_name: str,
    ) -> None:
        super().__init__(scope, id)
        if settings.vpc_id:
            self.vpc = ec2.Vpc.from_lookup(self, "Vpc", vpc_id=settings.vpc_id)
            self.subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
            self.public_ip = False
        else:
            # Tasks need the internet (repositories, package index, participants): public
            # subnets and public IPs instead of a NAT gateway's hourly cost; S3 through a
            # gateway endpoint (free, and artifact downloads stay off the internet).
            self.vpc = ec2.Vpc(
                self,
                "Vpc",
                max_azs=2,
                nat_gateways=0,
                subnet_configuration=[
                    ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC)
                ],
                gateway_endpoints={
                    "S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3)
                },
            )
            self.subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PUBLIC)
            self.public_ip = True
        # No inbound rule: the tasks only call out.
        self.security_group = ec2.SecurityGroup(
            self, "Tasks", vpc=self.vpc, description="swegreen sandbox tasks"
        )
        self.cluster = ecs.Cluster(
            self,
            "Cluster",
            vpc=self.vpc,
            container_insights_v2=ecs.ContainerInsights.ENABLED,
            enable_fargate_capacity_providers=True,  # FARGATE and FARGATE_SPOT
        )
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=retention(settings.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        image = ecs.ContainerImage.from_asset(
            str(ROOT),
            file="container/Dockerfile",
            target="sandbox",
            exclude=IMAGE_EXCLUDES,
            # the task definitions say X86_64: an image built on an ARM machine must not
            # deploy tasks that fail at start
            platform=ecr_assets.Platform.LINUX_AMD64,
        )

        # builder: the build phase; the artifacts read-write, the run's inputs read-only.
        self.builder_definition = self._task_definition(
            "Builder", settings.build_cpu, settings.build_memory_mib, settings
        )
        self.builder_container = self._container(
            self.builder_definition,
            "builder",
            "build",
            image,
            {"SWEGREEN_BUCKET": bucket.bucket_name, "SWEGREEN_RUNS_PREFIX": runs_prefix},
            settings.build_memory_mib,
        )
        role = self.builder_definition.task_role
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[
                    bucket.arn_for_objects(f"{runs_prefix}*/instances/*/{instance_name}"),
                    bucket.arn_for_objects(f"{runs_prefix}*/builds.json"),
                    bucket.arn_for_objects(f"{runs_prefix}*/prepares.json"),
                ],
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject", "s3:PutObject"],
                resources=[bucket.arn_for_objects(f"{artifacts_prefix}*")],
            )
        )
        role.add_to_principal_policy(  # a missing artifact is a 404, not a 403
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{artifacts_prefix}*"]}},
            )
        )

        # evaluate: no permissions at all (pre-signed URLs instead).
        self.task_definition = self._task_definition(
            "Task", settings.sandbox_cpu, settings.sandbox_memory_mib, settings
        )
        self.container = self._container(
            self.task_definition,
            "sandbox",
            "evaluate",
            image,
            {},
            settings.sandbox_memory_mib,
        )

    def _task_definition(
        self, id: str, cpu: int, memory: int, settings: StackSettings
    ) -> ecs.FargateTaskDefinition:
        return ecs.FargateTaskDefinition(
            self,
            id,
            cpu=cpu,
            memory_limit_mib=memory,
            ephemeral_storage_gib=settings.sandbox_ephemeral_gib,
            runtime_platform=ecs.RuntimePlatform(
                cpu_architecture=ecs.CpuArchitecture.X86_64,
                operating_system_family=ecs.OperatingSystemFamily.LINUX,
            ),
        )

    def _container(
        self,
        definition: ecs.FargateTaskDefinition,
        name: str,
        phase: str,
        image: ecs.ContainerImage,
        environment: dict[str, str],
        memory_mib: int,
    ) -> ecs.ContainerDefinition:
        # No init process (--init): it would run as this user with the task's environment,
        # readable to the tests through /proc (the entry point makes itself unreadable).
        return definition.add_container(
            name,
            image=image,
            command=[phase],  # swegreen.aws.sandbox_task's argument
            user=f"{SANDBOX_UID}:{SANDBOX_UID}",
            logging=ecs.LogDrivers.aws_logs(stream_prefix=name, log_group=self.log_group),
            memory_limit_mib=memory_mib,
            environment={
                **environment,
                "SWEGREEN_CACHE_DIR": CACHE_MOUNT,
                "SWEGREEN_ISOLATION": ISOLATION,
            },
        )

    def task_arn_pattern(self) -> str:
        """Every task of this cluster (what StopTask and DescribeTasks act on)."""
        from aws_cdk import Stack

        stack = Stack.of(self)
        return stack.format_arn(
            service="ecs", resource="task", resource_name=f"{self.cluster.cluster_name}/*"
        )
