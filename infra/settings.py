"""The stack's parameters, read once from CDK context (cdk.json, or -c key=value)."""

from __future__ import annotations

import json
from typing import Any, Literal

from constructs import Node
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

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


class StackSettings(BaseModel):
    """Validated: a typo'd or out-of-range context value fails ``cdk synth`` with its name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vpc_id: str = Field("", description="an existing VPC; empty: a new one, public subnets, no NAT")
    api_auth: Literal["iam", "api_key"] = "iam"
    sandbox_cpu: int = 4096
    sandbox_memory_mib: int = 16384
    sandbox_ephemeral_gib: int = Field(100, ge=21, le=200)
    distributed_threshold: int = Field(40, ge=0, description="rows above which the Map reads S3")
    poll_seconds: int = Field(30, ge=5, le=3600)
    log_retention_days: int = 30
    default_config: dict[str, Any] = Field(default_factory=dict)
    retain_data: bool = True

    @field_validator("default_config", mode="before")
    @classmethod
    def _json(cls, value: Any) -> Any:
        return json.loads(value or "{}") if isinstance(value, str) else value

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        if value not in RETENTION_NAMES:
            raise ValueError(f"must be one of {sorted(RETENTION_NAMES)} (CloudWatch's values)")
        return value

    @field_validator("sandbox_memory_mib")
    @classmethod
    def _fargate_size(cls, value: int, info: Any) -> int:
        cpu = info.data.get("sandbox_cpu")
        if cpu not in FARGATE_MEMORY:
            raise ValueError(f"sandbox_cpu must be one of {sorted(FARGATE_MEMORY)}, not {cpu}")
        if value not in FARGATE_MEMORY[cpu]:
            sizes = FARGATE_MEMORY[cpu]
            raise ValueError(
                f"Fargate with {cpu} CPU units takes {sizes.start}-{sizes.stop - 1} MiB "
                f"in steps of {sizes.step}, not {value}"
            )
        return value

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
                f"{PREFIX}{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()
            )
            raise ValueError(f"bad CDK context ({problems}); see docs/aws.md") from None


def retention(days: int) -> object:
    """CloudWatch Logs retention for ``days`` (validated by StackSettings)."""
    from aws_cdk import aws_logs as logs

    return getattr(logs.RetentionDays, RETENTION_NAMES[days])
