"""What every handler shares: settings from the environment, clients, the pipeline, and
powertools' logger, tracer and metrics. Built on first use (a Lambda's cold start) and
kept for the warm invocations that follow."""

from __future__ import annotations

import functools
import os

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from botocore.config import Config

from swegreen.aws.dynamo_store import DynamoStore
from swegreen.aws.pipeline import Pipeline, PipelineSettings

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
    # SigV4 for the sandbox's pre-signed URLs (Presign).
    s3 = boto3.client("s3", config=Config(signature_version="s3v4"))
    return Pipeline(s, s3, DynamoStore(table), boto3.client("service-quotas"))


@functools.cache
def stepfunctions() -> object:
    """For callback tokens (Dispatch, Watch)."""
    return boto3.client("stepfunctions")
