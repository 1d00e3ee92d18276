"""Endpoints: the closed rows' interface endpoints made and waited for, before the rows
start (swegreen.aws.endpoints; Watch deletes them when no run is running)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime import ec2, endpoint_spec, logger, tracer
from swegreen.aws import endpoints


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    spec = endpoint_spec()
    if spec is None:  # a VPC whose endpoints the stack keeps (none configured)
        return {"ready": True, "made": []}
    # leave a minute of the function's own limit to answer
    budget = max(0.0, context.get_remaining_time_in_millis() / 1000 - 60)
    out = endpoints.ensure(ec2(), spec, wait_seconds=budget)
    logger.info("endpoints", extra=out)
    if out.get("unreachable"):  # the run stops with it (infra/pipeline_machine.py)
        raise endpoints.EndpointsUnreachable(out["problem"])
    return out
