"""Where patches are evaluated: Fargate tasks running the sandbox image, with the git and
environment caches on EFS so an environment built once serves every later task."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_efs as efs
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.settings import StackSettings, retention

ROOT = Path(__file__).resolve().parents[1]
CACHE_MOUNT = "/var/cache/swegreen"
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
    ) -> None:
        super().__init__(scope, id)
        if settings.vpc_id:
            self.vpc = ec2.Vpc.from_lookup(self, "Vpc", vpc_id=settings.vpc_id)
            self.subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
            self.public_ip = False
        else:
            # Tasks need the internet (repositories, package index, participants): public
            # subnets and public IPs instead of a NAT gateway's hourly cost.
            self.vpc = ec2.Vpc(
                self,
                "Vpc",
                max_azs=2,
                nat_gateways=0,
                subnet_configuration=[
                    ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC)
                ],
            )
            self.subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PUBLIC)
            self.public_ip = True
        self.security_group = ec2.SecurityGroup(
            self, "Tasks", vpc=self.vpc, description="swegreen sandbox tasks"
        )
        self.file_system = efs.FileSystem(
            self,
            "Cache",
            vpc=self.vpc,
            encrypted=True,
            throughput_mode=efs.ThroughputMode.ELASTIC,
            removal_policy=RemovalPolicy.RETAIN if settings.retain_data else RemovalPolicy.DESTROY,
        )
        self.file_system.connections.allow_default_port_from(self.security_group)
        access_point = self.file_system.add_access_point(
            "CacheRoot",
            path="/swegreen",
            posix_user=efs.PosixUser(uid="0", gid="0"),
            create_acl=efs.Acl(owner_uid="0", owner_gid="0", permissions="755"),
        )
        self.cluster = ecs.Cluster(
            self, "Cluster", vpc=self.vpc, container_insights_v2=ecs.ContainerInsights.ENABLED
        )
        self.task_definition = ecs.FargateTaskDefinition(
            self,
            "Task",
            cpu=settings.sandbox_cpu,
            memory_limit_mib=settings.sandbox_memory_mib,
            ephemeral_storage_gib=settings.sandbox_ephemeral_gib,
            runtime_platform=ecs.RuntimePlatform(
                cpu_architecture=ecs.CpuArchitecture.X86_64,
                operating_system_family=ecs.OperatingSystemFamily.LINUX,
            ),
        )
        self.task_definition.add_volume(
            name="cache",
            efs_volume_configuration=ecs.EfsVolumeConfiguration(
                file_system_id=self.file_system.file_system_id,
                transit_encryption="ENABLED",
                authorization_config=ecs.AuthorizationConfig(
                    access_point_id=access_point.access_point_id, iam="ENABLED"
                ),
            ),
        )
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=retention(settings.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.container = self.task_definition.add_container(
            "sandbox",
            image=ecs.ContainerImage.from_asset(
                str(ROOT), file="container/Dockerfile", target="sandbox", exclude=IMAGE_EXCLUDES
            ),
            logging=ecs.LogDrivers.aws_logs(stream_prefix="sandbox", log_group=self.log_group),
            memory_limit_mib=settings.sandbox_memory_mib,
            environment={
                "SWEGREEN_BUCKET": bucket.bucket_name,
                "SWEGREEN_RUNS_PREFIX": runs_prefix,
                "SWEGREEN_CACHE_DIR": CACHE_MOUNT,
            },
        )
        self.container.add_mount_points(
            ecs.MountPoint(container_path=CACHE_MOUNT, source_volume="cache", read_only=False)
        )
        # Least privilege: the task reads and writes run artifacts, and mounts its cache.
        bucket.grant_read_write(self.task_definition.task_role, f"{runs_prefix}*")
        self.file_system.grant(
            self.task_definition.task_role,
            "elasticfilesystem:ClientMount",
            "elasticfilesystem:ClientWrite",
            "elasticfilesystem:ClientRootAccess",
        )
