"""What every handler shares: settings from the environment, clients, the pipeline, and
powertools' logger, tracer and metrics. Built on first use (a Lambda's cold start) and
kept for the warm invocations that follow."""

from __future__ import annotations

import functools
import os

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer

from swegreen.aws.dynamo_store import DynamoStore
from swegreen.aws.endpoints import EndpointSpec
from swegreen.aws.pipeline import Pipeline, PipelineSettings
from swegreen.aws.pipeline.base import signing_s3

SERVICE = "swegreen"
logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(namespace="SweGreen", service=SERVICE)


@functools.cache
def settings() -> PipelineSettings:
    return PipelineSettings.from_env(dict(os.environ))


@functools.cache
def pipeline() -> Pipeline:
    s = settings()
    table = boto3.resource("dynamodb").Table(s.table)
    # the sandbox's pre-signed URLs (Presign): SigV4, the bucket's regional endpoint
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    s3 = signing_s3(region, os.environ)
    return Pipeline(
        s, s3, DynamoStore(table), boto3.client("service-quotas"), boto3.client("lambda")
    )


@functools.cache
def ec2() -> object:
    return boto3.client("ec2")


@functools.cache
def endpoint_spec() -> EndpointSpec | None:
    """The closed rows' endpoints (SWEGREEN_ENDPOINTS), if this stack makes them per run."""
    raw = os.environ.get("SWEGREEN_ENDPOINTS")
    return EndpointSpec.model_validate_json(raw) if raw else None


@functools.cache
def stepfunctions() -> object:
    """For callback tokens (Dispatch, Watch)."""
    return boto3.client("stepfunctions")
