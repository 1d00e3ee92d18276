"""The stack's parameters, read once from CDK context (cdk.json, or -c key=value)."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from constructs import Node
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from swegreen.aws.guardrails import Guardrails

PREFIX = "swegreen:"
RETENTION_NAMES = {
    1: "ONE_DAY",
    3: "THREE_DAYS",
    5: "FIVE_DAYS",
    7: "ONE_WEEK",
    14: "TWO_WEEKS",
    30: "ONE_MONTH",
    60: "TWO_MONTHS",
    90: "THREE_MONTHS",
    180: "SIX_MONTHS",
    365: "ONE_YEAR",
}
# Fargate's valid (cpu, memory) pairs for the sizes a sandbox can use.
FARGATE_MEMORY = {
    1024: range(2048, 8193, 1024),
    2048: range(4096, 16385, 1024),
    4096: range(8192, 30721, 1024),
    8192: range(16384, 61441, 4096),
    16384: range(32768, 122881, 8192),
}


# A prebuilt sandbox image: ECR Public (pulled through a cache rule of this account's ECR,
# which the closed rows reach through their endpoints) or a private ECR repository; pinned
# by digest, so a redeploy never changes what evaluates.
IMAGE_PATTERN = (
    r"^(public\.ecr\.aws|[0-9]{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?)"
    r"/[a-z0-9]+(?:[._/-][a-z0-9]+)*(:[\w][\w.-]{0,127})?@sha256:[0-9a-f]{64}$"
)


class StackSettings(BaseModel):
    """Validated: a typo'd or out-of-range context value fails ``cdk synth`` with its name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vpc_id: str = Field(
        "",
        description="an existing VPC with private (with egress) and isolated subnets; empty: "
        "a new one, public and isolated subnets, no NAT",
    )
    vpc_endpoint_security_group: str = Field(
        "",
        pattern=r"^(sg-[0-9a-f]+)?$",
        description="the imported VPC's own interface endpoints' security group (ECR, Logs, "
        "private DNS on): the rows may send HTTPS to it and it admits them; empty: the VPC "
        "has none of its own (a run whose VPC has some anyway stops, naming this key)",
    )
    s3_prefix_list_id: str = Field(
        "",
        pattern=r"^(pl-[0-9a-f]+)?$",
        description="the region's S3 prefix list (com.amazonaws.<region>.s3), to which the "
        "closed rows may send HTTPS; empty: found at deploy time (AccountSetup)",
    )
    sandbox_image: str = Field(
        "",
        description="a prebuilt sandbox image, pinned by digest: public.ecr.aws/<alias>/"
        "<name>@sha256:<digest> (pulled through this account's ECR) or an image of this "
        "account's ECR; empty: cdk deploy builds container/Dockerfile (Docker and the "
        "internet needed)",
    )
    endpoint_lease_minutes: float = Field(
        10.0,
        ge=0,
        description="how long a run's taking of the closed rows' endpoints keeps them from "
        "Watch's reaping: a run starting within it finds them up (making them takes 2 min)",
    )
    endpoint_settle_seconds: float = Field(
        30.0,
        ge=0,
        description="how long a run's Endpoints step sees its endpoints standing before the "
        "rows start (longer than Watch takes from listing them to deleting them)",
    )
    standing_endpoints: bool = Field(
        False,
        description="keep the closed rows' interface endpoints (ECR, Logs) standing, about "
        "$44 a month; false: each run makes them (about 2 minutes) and they go when no run "
        "runs",
    )
    dashboard: bool = Field(
        True,
        description="a CloudWatch dashboard (free among an account's first three, then $3 a month)",
    )
    api_auth: Literal["iam", "api_key"] = "iam"
    sandbox_cpu: int = Field(2048, description="CPU units of a row's evaluate task")
    sandbox_memory_mib: int = 8192
    build_cpu: int = Field(4096, description="CPU units of a build-phase task")
    build_memory_mib: int = 16384
    sandbox_ephemeral_gib: int = Field(50, ge=21, le=200)
    build_concurrency: int = Field(
        50, ge=1, le=10000, description="build-phase tasks at once (environments, prepares)"
    )
    prepare_batch: int = Field(4, ge=1, le=50, description="instances prepared per task")
    api_quota_per_day: int = Field(
        20000,
        ge=1,
        description="api_key mode: requests a key may make per day. The green agent follows "
        "a run with a GET every 15 s (240 an hour, 5,760 a day): 20,000 follows three runs "
        "all day with room for retries, result pages and stops.",
    )
    alarm_email: str = Field("", description="where alarms are sent (empty: the topic only)")
    log_retention_days: int = 30
    default_config: dict[str, Any] = Field(default_factory=dict)
    retain_data: bool = True
    api_logging_role: bool = Field(
        True,
        description="create API Gateway's account-wide CloudWatch role (false: the account "
        "has one already; the API's access logs need it)",
    )
    guardrails: Guardrails = Field(
        default_factory=Guardrails, description="per-request ceilings (JSON, guardrails.py)"
    )

    @field_validator("default_config", "guardrails", mode="before")
    @classmethod
    def _json(cls, value: Any) -> Any:
        return json.loads(value or "{}") if isinstance(value, str) else value

    @field_validator("sandbox_image")
    @classmethod
    def _image(cls, value: str) -> str:
        if value and not re.match(IMAGE_PATTERN, value):
            raise ValueError(
                f"{value!r} is not an image the tasks can pull: give public.ecr.aws/<alias>/"
                "<name>@sha256:<digest> or <account>.dkr.ecr.<region>.amazonaws.com/<name>"
                "@sha256:<digest> (pinned by digest; the closed rows reach ECR only; "
                "docs/aws-deploy.md, 'Deploying without Docker')"
            )
        return value

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        if value not in RETENTION_NAMES:
            raise ValueError(f"must be one of {sorted(RETENTION_NAMES)} (CloudWatch's values)")
        return value

    @model_validator(mode="after")
    def _endpoint_group(self) -> StackSettings:
        if self.vpc_endpoint_security_group and not self.vpc_id:
            raise ValueError(
                "vpc_endpoint_security_group is the group of an imported VPC's own "
                "endpoints: give vpc_id too, or leave it empty (a new VPC has none)"
            )
        return self

    @model_validator(mode="after")
    def _fargate_sizes(self) -> StackSettings:
        for cpu_key, memory_key in (
            ("sandbox_cpu", "sandbox_memory_mib"),
            ("build_cpu", "build_memory_mib"),
        ):
            cpu, memory = getattr(self, cpu_key), getattr(self, memory_key)
            if cpu not in FARGATE_MEMORY:
                raise ValueError(f"{cpu_key} must be one of {sorted(FARGATE_MEMORY)}, not {cpu}")
            sizes = FARGATE_MEMORY[cpu]
            if memory not in sizes:
                raise ValueError(
                    f"{memory_key}: Fargate with {cpu} CPU units takes "
                    f"{sizes.start}-{sizes.stop - 1} MiB in steps of {sizes.step}, not {memory}"
                )
        return self

    @classmethod
    def from_context(cls, node: Node) -> StackSettings:
        values = {}
        for name in cls.model_fields:
            raw = node.try_get_context(PREFIX + name)
            if raw is not None:
                values[name] = raw
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{PREFIX}{'.'.join(map(str, e['loc']))}: {e['msg']}"
                if e["loc"]
                else f"{PREFIX}{e['msg'].removeprefix('Value error, ')}"
                for e in exc.errors()
            )
            raise ValueError(f"bad CDK context ({problems}); see docs/aws-deploy.md") from None


def retention(days: int) -> object:
    """CloudWatch Logs retention for ``days`` (validated by StackSettings)."""
    from aws_cdk import aws_logs as logs

    return getattr(logs.RetentionDays, RETENTION_NAMES[days])
