"""Where the work runs: Fargate tasks of the sandbox image, split by trust
(docs/security-aws.md), on each task's own disk (no shared file system).

builder   the build phase (``build``, ``prepare``): runs no participant code; its role may
          read the run's item lists and instance.json files, and read and write the
          prebuilt artifacts (``artifacts/``), nothing else.
evaluate  one row: applies the patch and runs the tests; its role may do nothing at all
          (its input, artifacts and outputs go through the Presign step's pre-signed URLs).

Both run the sandbox image, pinned to linux/amd64. The builder runs as the image's
unprivileged user; the evaluate task starts as root only so that its engine can run the
tests as a uid of their own, which cannot write what the engine made. Fargate cannot run
bubblewrap, so both opt in to the weaker ``process`` isolation (SWEGREEN_ISOLATION), which
the rows' provenance records. Rows run in isolated subnets that reach only the VPC
endpoints they need, unless their tests need the internet (``networks``). Both can run on
Fargate Spot or on-demand (the state machine chooses per attempt: infra/workflow.py).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.account_setup import AccountSetup
from infra.settings import StackSettings, retention

ROOT = Path(__file__).resolve().parents[1]
# Every task's cache, on its own disk. Environments hold absolute paths, so an artifact is
# unpacked where it was built: the same path in every task.
CACHE_MOUNT = "/var/cache/swegreen"
# The sandbox image's user (container/Dockerfile, ARG SANDBOX_UID).
SANDBOX_UID = 10001
# Fargate has no user namespaces for bubblewrap: the explicit opt-in to the weaker mode.
ISOLATION = "process"
# The evaluate task's network configurations (awsvpc), chosen per row by Presign: CLOSED
# (the endpoints only) unless the row's tests need the internet (network_instances.json,
# a recipe's ``network``, the request's ``network_instances``).
CLOSED, OPEN = "closed", "open"
# The evaluate task starts as root, which only the engine stays: the tests run as this uid
# (swegreen.sandbox.isolation.DEFAULT_SANDBOX_UID, by setpriv), which owns nothing the engine made.
GRADER_USER = "0:0"
# A prebuilt image's cache keeps the last few images pulled through (an evaluation run's
# tasks use one; older ones only cost storage).
KEEP_FEW_IMAGES = {
    "rules": [
        {
            "rulePriority": 1,
            "description": "keep the 5 most recent images",
            "selection": {"tagStatus": "any", "countType": "imageCountMoreThan", "countNumber": 5},
            "action": {"type": "expire"},
        }
    ]
}
# Nothing the image does not COPY (container/Dockerfile: pyproject.toml, README.md,
# shared/): a smaller context, and no tree another process may be writing while it is
# copied (a test's in-tree wheel build under tests/ once raced the copy).
IMAGE_EXCLUDES = [
    ".venv",
    ".venv-*",
    "results",
    "node_modules",
    "cdk.out",
    ".git",
    "**/build",
    "**/__pycache__",
    "tests",
    "docs",
    "benchmarks",
    ".pytest_cache",
    ".ruff_cache",
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
        account: AccountSetup,
    ) -> None:
        super().__init__(scope, id)
        if settings.vpc_id:
            self.vpc = ec2.Vpc.from_lookup(self, "Vpc", vpc_id=settings.vpc_id)
            open_subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
            public_ip = False
        else:
            # The build phase and the rows whose tests need the network have the internet:
            # public subnets and public IPs instead of a NAT gateway's hourly cost, S3
            # through a gateway endpoint. Every other row runs in isolated subnets.
            self.vpc = ec2.Vpc(
                self,
                "Vpc",
                max_azs=2,
                nat_gateways=0,
                subnet_configuration=[
                    ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC),
                    ec2.SubnetConfiguration(
                        name="sandbox", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED
                    ),
                ],
            )
            self.vpc.add_gateway_endpoint(
                "S3",
                service=ec2.GatewayVpcEndpointAwsService.S3,
                subnets=[ec2.SubnetSelection(subnet_type=ec2.SubnetType.PUBLIC)],
            )
            open_subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PUBLIC)
            public_ip = True
        # No inbound rule: the tasks only call out.
        self.security_group = ec2.SecurityGroup(
            self, "Tasks", vpc=self.vpc, description="swegreen build tasks and network rows"
        )
        self.networks = {
            OPEN: {
                "Subnets": self.vpc.select_subnets(**_selection(open_subnets)).subnet_ids,
                "SecurityGroups": [self.security_group.security_group_id],
                "AssignPublicIp": "ENABLED" if public_ip else "DISABLED",
            },
            CLOSED: self._closed_network(
                settings, account.s3_prefix_list_id, bucket, runs_prefix, artifacts_prefix
            ),
        }
        # The interface endpoints' private DNS answers for the whole VPC: the build tasks
        # and the open rows resolve ECR and Logs to them too, so they are let in as well
        # (else they could neither pull their image nor write their logs).
        self.endpoints.add_ingress_rule(
            self.security_group, ec2.Port.tcp(443), "build tasks and open rows"
        )
        self.cluster = ecs.Cluster(
            self,
            "Cluster",
            vpc=self.vpc,
            container_insights_v2=ecs.ContainerInsights.ENABLED,
            enable_fargate_capacity_providers=True,  # FARGATE and FARGATE_SPOT
        )
        # its capacity providers need ECS's service-linked role, which AccountSetup makes
        self.cluster.node.add_dependency(account.resource)
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=retention(settings.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        image, pull = self._image(settings)

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
            user=f"{SANDBOX_UID}:{SANDBOX_UID}",
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
            # a Fargate task is a machine of its own: a batch clears the tests' uid between rows
            {"SWEGREEN_TASK_IS_MACHINE": "1"},
            settings.sandbox_memory_mib,
            user=GRADER_USER,
        )
        for definition in (self.builder_definition, self.task_definition):
            for statement in pull:
                definition.obtain_execution_role().add_to_principal_policy(statement)

    def _image(
        self, settings: StackSettings
    ) -> tuple[ecs.ContainerImage, list[iam.PolicyStatement]]:
        """The sandbox image, and what the tasks' execution role needs to pull it.

        Default: built from container/Dockerfile by ``cdk deploy`` (a Docker daemon and the
        internet on the deploying machine), pushed to the CDK bootstrap's repository. With
        ``swegreen:sandbox_image``: that image, pinned by digest; one of ECR Public through a
        pull-through cache rule of this account's ECR (ECR fetches it upstream on the first
        pull; the tasks only ever talk to their own region's ECR, through the endpoints),
        whose repositories keep a few images (a creation template's lifecycle rule)."""
        if not settings.sandbox_image:
            image = ecs.ContainerImage.from_asset(
                str(ROOT),
                file="container/Dockerfile",
                target="sandbox",
                exclude=IMAGE_EXCLUDES,
                # the task definitions say X86_64: an image built on an ARM machine must
                # not deploy tasks that fail at start
                platform=ecr_assets.Platform.LINUX_AMD64,
            )
            return image, []  # from_asset grants its own pull
        stack = Stack.of(self)
        registry, _, path = settings.sandbox_image.partition("/")
        name = path.split("@")[0].split(":")[0]
        if registry == "public.ecr.aws":
            digest = hashlib.sha256(stack.stack_name.encode()).hexdigest()[:8]
            prefix = f"swegreen-{digest}"  # this stack's own cache namespace
            ecr.CfnPullThroughCacheRule(
                self,
                "ImageCache",
                ecr_repository_prefix=prefix,
                upstream_registry_url="public.ecr.aws",
            )
            ecr.CfnRepositoryCreationTemplate(
                self,
                "ImageCacheRepositories",
                prefix=prefix,
                applied_for=["PULL_THROUGH_CACHE"],
                description="swegreen's sandbox images, as pulled through from ECR Public",
                image_tag_mutability="MUTABLE",
                lifecycle_policy=json.dumps(KEEP_FEW_IMAGES),
            )
            host = f"{stack.account}.dkr.ecr.{stack.region}.{stack.url_suffix}"
            uri = f"{host}/{prefix}/{path}"
            repository = f"{prefix}/{name}"
            # the first pull creates the cache's repository and imports the image
            extra = ["ecr:CreateRepository", "ecr:BatchImportUpstreamImage"]
        else:
            uri, repository, extra = settings.sandbox_image, name, []
        arn = stack.format_arn(service="ecr", resource="repository", resource_name=repository)
        pull = [
            iam.PolicyStatement(
                actions=[
                    "ecr:BatchCheckLayerAvailability",
                    "ecr:GetDownloadUrlForLayer",
                    "ecr:BatchGetImage",
                    *extra,
                ],
                resources=[arn],
            ),
            iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]),
        ]
        return ecs.ContainerImage.from_registry(uri), pull

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
        *,
        user: str,
    ) -> ecs.ContainerDefinition:
        # No init process (--init): it would hold the task's environment, readable to tests
        # of the same uid through /proc (the entry point makes itself unreadable too).
        return definition.add_container(
            name,
            image=image,
            command=[phase],  # swegreen.aws.sandbox_task's argument
            user=user,
            logging=ecs.LogDrivers.aws_logs(stream_prefix=name, log_group=self.log_group),
            memory_limit_mib=memory_mib,
            environment={
                **environment,
                "SWEGREEN_CACHE_DIR": CACHE_MOUNT,
                "SWEGREEN_ISOLATION": ISOLATION,
            },
        )

    def _closed_network(
        self,
        settings: StackSettings,
        s3_prefix_list: str,
        bucket: s3.IBucket,
        runs_prefix: str,
        artifacts_prefix: str,
    ) -> dict[str, object]:
        """Where a row's tests run (docs/security-aws.md): isolated subnets (no route out
        of the VPC), no public IP, and a security group that reaches only the endpoints the
        task needs: S3 (a gateway endpoint whose policy admits this bucket's run and
        artifact objects and ECR's image layers), ECR and CloudWatch Logs."""
        isolated = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)
        group = ec2.SecurityGroup(
            self,
            "ClosedTasks",
            vpc=self.vpc,
            description="swegreen rows: the VPC endpoints only",
            allow_all_outbound=False,
        )
        endpoints = ec2.SecurityGroup(
            self,
            "Endpoints",
            vpc=self.vpc,
            description="swegreen interface endpoints: HTTPS from the tasks",
            allow_all_outbound=False,
        )
        endpoints.add_ingress_rule(group, ec2.Port.tcp(443), "closed rows")
        self.endpoints = endpoints
        group.add_egress_rule(endpoints, ec2.Port.tcp(443), "ECR and CloudWatch Logs endpoints")
        if settings.vpc_endpoint_security_group:
            # An imported VPC's own endpoints: their private DNS answers for the whole VPC
            # (ours cannot be made beside them), so the rows must reach their group and it
            # must admit the rows and the build tasks (rules added to the owner's group).
            theirs = ec2.SecurityGroup.from_security_group_id(
                self, "VpcEndpoints", settings.vpc_endpoint_security_group, mutable=True
            )
            group.add_egress_rule(theirs, ec2.Port.tcp(443), "the VPC's own endpoints")
            theirs.add_ingress_rule(group, ec2.Port.tcp(443), "swegreen closed rows")
            theirs.add_ingress_rule(
                self.security_group, ec2.Port.tcp(443), "swegreen build tasks and open rows"
            )
        # S3's addresses only (the region's prefix list, given or found at deploy time:
        # AccountSetup), reached through the gateway endpoint
        group.add_egress_rule(
            ec2.Peer.prefix_list(s3_prefix_list), ec2.Port.tcp(443), "S3 (gateway endpoint)"
        )
        gateway = self.vpc.add_gateway_endpoint(
            "SandboxS3", service=ec2.GatewayVpcEndpointAwsService.S3, subnets=[isolated]
        )
        stack = Stack.of(self)
        gateway.add_to_policy(
            iam.PolicyStatement(
                principals=[iam.AnyPrincipal()],
                actions=["s3:GetObject", "s3:PutObject"],
                resources=[
                    bucket.arn_for_objects(f"{runs_prefix}*"),
                    bucket.arn_for_objects(f"{artifacts_prefix}*"),
                ],
            )
        )
        gateway.add_to_policy(  # the image's layers, as ECR serves them
            iam.PolicyStatement(
                principals=[iam.AnyPrincipal()],
                actions=["s3:GetObject"],
                resources=[
                    f"arn:{stack.partition}:s3:::prod-{stack.region}-starport-layer-bucket/*"
                ],
            )
        )
        subnet_ids = self.vpc.select_subnets(**_selection(isolated)).subnet_ids
        # ECR (API and Docker) and Logs: interface endpoints, billed by the hour. Made by
        # each run and deleted when none runs (swegreen.aws.endpoints), unless the owner
        # keeps them standing (swegreen:standing_endpoints).
        self.endpoint_spec: dict[str, object] | None = None
        if settings.standing_endpoints:
            for name, service in (
                ("EcrApi", ec2.InterfaceVpcEndpointAwsService.ECR),
                ("EcrDocker", ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER),
                ("Logs", ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS),
            ):
                self.vpc.add_interface_endpoint(
                    name,
                    service=service,
                    subnets=isolated,
                    security_groups=[endpoints],
                    private_dns_enabled=True,
                    open=False,
                )
        else:
            self.endpoint_spec = {
                "vpc_id": self.vpc.vpc_id,
                "subnet_ids": subnet_ids,
                "security_group_id": endpoints.security_group_id,
                "shared_security_group_id": settings.vpc_endpoint_security_group,
                "owner": stack.stack_name,
                "region": stack.region,
                "lease_seconds": settings.endpoint_lease_minutes * 60,
                "settle_seconds": settings.endpoint_settle_seconds,
            }
        return {
            "Subnets": subnet_ids,
            "SecurityGroups": [group.security_group_id],
            "AssignPublicIp": "DISABLED",
        }

    def task_arn_pattern(self) -> str:
        """Every task of this cluster (what StopTask and DescribeTasks act on)."""
        stack = Stack.of(self)
        return stack.format_arn(
            service="ecs", resource="task", resource_name=f"{self.cluster.cluster_name}/*"
        )


def _selection(selection: ec2.SubnetSelection) -> dict[str, object]:
    return {"subnet_type": selection.subnet_type} if selection.subnet_type else {}
