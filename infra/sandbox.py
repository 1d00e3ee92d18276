"""Where patches are evaluated: two Fargate tasks per row, split by trust (docs/security-aws.md).

prepare   runs no participant code; fills the shared cache on EFS (git mirrors,
          environments, base runs), mounted read-write; its role may mount the cache
          read-write and read the row's instance.json, nothing else.
evaluate  applies the patch and runs the tests; mounts the cache read-only, copies what it
          needs to its own disk; its role may only mount the cache read-only (no S3: its
          input and outputs go through the Presign step's pre-signed URLs).

Both run the sandbox image as a non-root user; the EFS access point makes every file
that user's. Fargate cannot run bubblewrap, so both opt in to the weaker ``process``
isolation (SWEGREEN_ISOLATION), which the rows' provenance records.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_efs as efs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.settings import StackSettings, retention

ROOT = Path(__file__).resolve().parents[1]
# The prepare task mounts the shared cache here; the evaluate task has its own cache here
# (on its disk) and the shared one read-only at SHARED_MOUNT. Environments hold absolute
# paths, so a copy evaluates only where it was built.
CACHE_MOUNT = "/var/cache/swegreen"
SHARED_MOUNT = "/mnt/shared-cache"
# The sandbox image's user (container/Dockerfile, ARG SANDBOX_UID); the access point
# writes every file as this user whatever the client claims.
SANDBOX_UID = 10001
ACCESS_POINT_PATH = "/sandbox-cache"  # earlier versions wrote /swegreen as root
# Fargate has no user namespaces for bubblewrap: the explicit opt-in to the weaker mode.
ISOLATION = "process"
CLIENT_ACTIONS = (
    "elasticfilesystem:ClientMount",
    "elasticfilesystem:ClientWrite",
    "elasticfilesystem:ClientRootAccess",
)
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
        instance_name: str,
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
        # Any file system policy replaces EFS's default one, which lets every client that
        # reaches a mount target in as root without IAM. This one only adds "TLS or
        # nothing": with it, a client needs a role that is granted below.
        self.file_system = efs.FileSystem(
            self,
            "Cache",
            vpc=self.vpc,
            encrypted=True,
            throughput_mode=efs.ThroughputMode.ELASTIC,
            removal_policy=RemovalPolicy.RETAIN if settings.retain_data else RemovalPolicy.DESTROY,
            file_system_policy=iam.PolicyDocument(
                statements=[
                    iam.PolicyStatement(
                        effect=iam.Effect.DENY,
                        principals=[iam.AnyPrincipal()],
                        actions=list(CLIENT_ACTIONS),
                        resources=["*"],
                        conditions={"Bool": {"aws:SecureTransport": "false"}},
                    )
                ]
            ),
        )
        self.file_system.connections.allow_default_port_from(self.security_group)
        uid = str(SANDBOX_UID)
        self.access_point = self.file_system.add_access_point(
            "SandboxRoot",
            path=ACCESS_POINT_PATH,
            posix_user=efs.PosixUser(uid=uid, gid=uid),
            create_acl=efs.Acl(owner_uid=uid, owner_gid=uid, permissions="755"),
        )
        self.cluster = ecs.Cluster(
            self, "Cluster", vpc=self.vpc, container_insights_v2=ecs.ContainerInsights.ENABLED
        )
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=retention(settings.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        image = ecs.ContainerImage.from_asset(
            str(ROOT), file="container/Dockerfile", target="sandbox", exclude=IMAGE_EXCLUDES
        )

        # prepare: the shared cache read-write, the row's instance.json.
        self.prepare_definition = self._task_definition("Prepare", settings)
        self.prepare_container = self._container(
            self.prepare_definition,
            "prepare",
            "prepare",
            image,
            {
                "SWEGREEN_BUCKET": bucket.bucket_name,
                "SWEGREEN_RUNS_PREFIX": runs_prefix,
                "SWEGREEN_CACHE_DIR": CACHE_MOUNT,
            },
            settings.sandbox_memory_mib,
        )
        self.prepare_container.add_mount_points(
            ecs.MountPoint(container_path=CACHE_MOUNT, source_volume="cache", read_only=False)
        )
        self._grant_mount(self.prepare_definition.task_role, write=True)
        self.prepare_definition.task_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[bucket.arn_for_objects(f"{runs_prefix}*/instances/*/{instance_name}")],
            )
        )

        # evaluate: the shared cache read-only, no S3 (pre-signed URLs instead).
        self.task_definition = self._task_definition("Task", settings)  # ids as before the split
        self.container = self._container(
            self.task_definition,
            "sandbox",
            "evaluate",
            image,
            {"SWEGREEN_CACHE_DIR": CACHE_MOUNT, "SWEGREEN_SHARED_CACHE": SHARED_MOUNT},
            settings.sandbox_memory_mib,
        )
        self.container.add_mount_points(
            ecs.MountPoint(container_path=SHARED_MOUNT, source_volume="cache", read_only=True)
        )
        self._grant_mount(self.task_definition.task_role, write=False)

    def _task_definition(self, id: str, settings: StackSettings) -> ecs.FargateTaskDefinition:
        definition = ecs.FargateTaskDefinition(
            self,
            id,
            cpu=settings.sandbox_cpu,
            memory_limit_mib=settings.sandbox_memory_mib,
            ephemeral_storage_gib=settings.sandbox_ephemeral_gib,
            runtime_platform=ecs.RuntimePlatform(
                cpu_architecture=ecs.CpuArchitecture.X86_64,
                operating_system_family=ecs.OperatingSystemFamily.LINUX,
            ),
        )
        definition.add_volume(
            name="cache",
            efs_volume_configuration=ecs.EfsVolumeConfiguration(
                file_system_id=self.file_system.file_system_id,
                transit_encryption="ENABLED",
                authorization_config=ecs.AuthorizationConfig(
                    access_point_id=self.access_point.access_point_id, iam="ENABLED"
                ),
            ),
        )
        return definition

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
            environment={**environment, "SWEGREEN_ISOLATION": ISOLATION},
        )

    def _grant_mount(self, role: iam.IRole, *, write: bool) -> None:
        """Mounting the cache through the access point only; never as root."""
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=list(CLIENT_ACTIONS[:2] if write else CLIENT_ACTIONS[:1]),
                resources=[self.file_system.file_system_arn],
                conditions={
                    "StringEquals": {
                        "elasticfilesystem:AccessPointArn": self.access_point.access_point_arn
                    }
                },
            )
        )
