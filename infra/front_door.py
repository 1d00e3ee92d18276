"""The front door: ``POST /runs`` starts an execution, ``GET /runs/{id}`` reports on it,
``PUT /predictions`` keeps a predictions file for a run to grade.

Direct service integrations (Step Functions StartExecution, DynamoDB GetItem, S3
GetObject and PutObject), no Lambda in the request path: nothing to cold-start, and the
same API runs in LocalStack without Docker. Requests are validated against a JSON schema
at the gateway; access is IAM (SigV4) or an API key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_dynamodb as ddb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.settings import StackSettings, retention
from swegreen.aws.guardrails import Guardrails
from swegreen.aws.pipeline import PATCHES_PATTERN
from swegreen.stores import artifacts as art


def run_request_schema(guardrails: Guardrails) -> dict[str, Any]:
    """Draft-04 (what API Gateway validates) form of swegreen.aws.pipeline.RunRequest, with
    the deployment's ceilings on its config (a body above them: 400); tests/aws/test_stack.py
    checks that the two accept and refuse the same bodies."""
    return {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "title": "RunRequest",
        "type": "object",
        "properties": {
            "participants": {
                "type": "object",
                "maxProperties": 1,
                "additionalProperties": {"type": "string", "pattern": "^https?://"},
            },
            "patches": {"type": "string", "minLength": 1, "pattern": PATCHES_PATTERN},
            "config": guardrails.config_schema(),
            "rebuild_envs": {"type": "boolean"},
            "batch": {"type": "boolean"},
            "dry_run": {"type": "boolean"},
        },
        "additionalProperties": False,
    }


RUN_REQUEST_SCHEMA = run_request_schema(Guardrails())

TEMPLATES = Path(__file__).resolve().parent / "templates"
JSON = "application/json"


def template(name: str, **values: str) -> str:
    """A VTL mapping template from ``templates/``, its ``{{placeholders}}`` filled in."""
    lines = (TEMPLATES / f"{name}.vtl").read_text().splitlines()
    text = "\n".join(line for line in lines if not line.startswith("##"))
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    return text


class FrontDoor(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        settings: StackSettings,
        state_machine: sfn.IStateMachine,
        table: ddb.ITable,
        bucket: s3.IBucket,
        runs_prefix: str,
        predictions: lambda_.IFunction,
    ) -> None:
        super().__init__(scope, id)
        access_logs = logs.LogGroup(
            self, "AccessLogs", retention=retention(settings.log_retention_days)
        )
        self.api = apigw.RestApi(
            self,
            "Api",
            rest_api_name=f"{Stack.of(self).stack_name}-swegreen",  # one per stack
            description="Start SWE-bench Verified evaluations and read their leaderboards",
            deploy_options=apigw.StageOptions(
                stage_name="v1",
                throttling_rate_limit=10,
                throttling_burst_limit=20,
                access_log_destination=apigw.LogGroupLogDestination(access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),
            ),
            # AWS::ApiGateway::Account is one per region: it replaces whatever logging role
            # the account has. Off for accounts that have one (swegreen:api_logging_role);
            # kept when the stack goes, so other APIs' logging does not break with it.
            cloud_watch_role=settings.api_logging_role,
            cloud_watch_role_removal_policy=RemovalPolicy.RETAIN
            if settings.api_logging_role
            else None,
        )
        role = iam.Role(
            self, "IntegrationRole", assumed_by=iam.ServicePrincipal("apigateway.amazonaws.com")
        )
        state_machine.grant_start_execution(role)
        state_machine.grant_execution(role, "states:StopExecution")
        table.grant(role, "dynamodb:GetItem")
        bucket.grant_read(role, f"{runs_prefix}*/{art.RESULT_PAGES}*")
        auth = (
            apigw.AuthorizationType.IAM
            if settings.api_auth == "iam"
            else apigw.AuthorizationType.NONE
        )
        api_key_required = settings.api_auth == "api_key"
        method_options = {"authorization_type": auth, "api_key_required": api_key_required}

        model = self.api.add_model(
            "RunRequest",
            content_type="application/json",
            schema=apigw.JsonSchema(**_cdk_schema(run_request_schema(settings.guardrails))),
            model_name="RunRequest",
        )
        validator = self.api.add_request_validator(
            "Body", validate_request_body=True, validate_request_parameters=True
        )
        runs = self.api.root.add_resource("runs")
        start = _service_call(
            role,
            "states",
            "StartExecution",
            template("start_execution", state_machine_arn=state_machine.state_machine_arn),
            apigw.IntegrationResponse(
                status_code="202",
                selection_pattern="2\\d{2}",
                response_templates={JSON: template("started")},
            ),
        )
        runs.add_method(
            "POST",
            start,
            request_models={"application/json": model},
            request_validator=validator,
            method_responses=_method_responses("202"),
            **method_options,
        )
        run = runs.add_resource("{id}")
        get = _service_call(
            role,
            "dynamodb",
            "GetItem",
            template("get_run", table_name=table.table_name),
            apigw.IntegrationResponse(
                status_code="200",
                selection_pattern="2\\d{2}",
                response_templates={JSON: template("run")},
            ),
        )

        def on_run(verb: str, integration: apigw.AwsIntegration, ok: str) -> None:
            """A method on /runs/{id}: the id required, the run found or 404."""
            run.add_method(
                verb,
                integration,
                request_parameters={"method.request.path.id": True},
                request_validator=validator,
                method_responses=_method_responses(ok),
                **method_options,
            )

        on_run("GET", get, "200")
        stop = _service_call(
            role,
            "states",
            "StopExecution",
            template("stop_execution", state_machine_arn=state_machine.state_machine_arn),
            apigw.IntegrationResponse(
                status_code="202",
                selection_pattern="2\\d{2}",
                response_templates={JSON: template("stopping")},
            ),
        )
        on_run("DELETE", stop, "202")
        # results.json in pages (Aggregate cuts them under 10 MB, API Gateway's limit):
        # /results is page 1 (a run that fits: the whole file), /results/{page} the rest.
        results = run.add_resource("results")
        page = results.add_resource("{page}")
        for resource, page_part, params in (
            (results, "1", {}),
            (page, "{page}", {"integration.request.path.page": "method.request.path.page"}),
        ):
            integration = apigw.AwsIntegration(
                service="s3",
                integration_http_method="GET",
                path=f"{bucket.bucket_name}/{runs_prefix}{{id}}/{art.RESULT_PAGES}{page_part}.json",
                options=apigw.IntegrationOptions(
                    credentials_role=role,
                    request_parameters={
                        "integration.request.path.id": "method.request.path.id",
                        **params,
                    },
                    integration_responses=[
                        apigw.IntegrationResponse(status_code="200", selection_pattern="2\\d{2}"),
                        apigw.IntegrationResponse(
                            status_code="404",
                            selection_pattern="40[34]",  # S3 says 403 for a missing key
                            response_templates={
                                JSON: '{"error": "no results for this run (yet), or no such page"}'
                            },
                        ),
                        _THROTTLED,
                        _BAD_GATEWAY,
                    ],
                ),
            )
            resource.add_method(
                "GET",
                integration,
                request_parameters={
                    "method.request.path.id": True,
                    **{k.replace("integration", "method"): True for k in params},
                },
                method_responses=_method_responses("200"),
                **method_options,
            )
        # PUT /predictions: a predictions file checked (400 with the line and the reason
        # if malformed) and kept at a key the request id names, so no upload replaces
        # another's; POST /predictions/uploads: a pre-signed PUT for one too large to send
        # through the API (swegreen.aws.predictions_upload). The green agent asks its
        # participants where they are and sends only their patches here; a run then
        # grades that key (POST /runs {"patches": key}).
        uploads = self.api.root.add_resource("predictions")
        through = apigw.LambdaIntegration(predictions, proxy=True)
        uploads.add_method(
            "PUT", through, method_responses=_method_responses("201"), **method_options
        )
        uploads.add_resource("uploads").add_method(
            "POST", through, method_responses=_method_responses("201"), **method_options
        )
        if api_key_required:
            key = self.api.add_api_key("Key")
            plan = self.api.add_usage_plan(
                "Plan",
                throttle=apigw.ThrottleSettings(rate_limit=10, burst_limit=20),
                quota=apigw.QuotaSettings(
                    limit=settings.api_quota_per_day, period=apigw.Period.DAY
                ),
            )
            plan.add_api_key(key)
            plan.add_api_stage(stage=self.api.deployment_stage)


# S3 throttled (503 SlowDown) or refused for the moment: the client tries again.
_THROTTLED = apigw.IntegrationResponse(
    status_code="429",
    selection_pattern="429|503",
    response_templates={JSON: '{"error": "throttled: try again"}'},
)
# Whatever no other response matched (a 5xx of the service, a broken integration): never a
# success. Integration responses without a selection pattern are the default.
_BAD_GATEWAY = apigw.IntegrationResponse(
    status_code="502",
    response_templates={
        JSON: '{"error": "the service behind this API failed; try again later", '
        '"status": "$context.integration.status"}'
    },
)
ERROR_STATUSES = ("400", "404", "409", "429", "502")


def _method_responses(ok: str) -> list[apigw.MethodResponse]:
    return [apigw.MethodResponse(status_code=c) for c in (ok, *ERROR_STATUSES)]


def _service_call(
    role: iam.IRole,
    service: str,
    action: str,
    request_template: str,
    success: apigw.IntegrationResponse,
) -> apigw.AwsIntegration:
    """A direct AWS service integration: the request mapped by a VTL template; a 2xx by
    ``success``, a 4xx by ``service_error.vtl`` (404, 409, 429 or 400 by the error's type),
    anything else 502. Unmapped requests are refused rather than passed through."""
    return apigw.AwsIntegration(
        service=service,
        action=action,
        options=apigw.IntegrationOptions(
            credentials_role=role,
            request_templates={JSON: request_template},
            integration_responses=[
                success,
                apigw.IntegrationResponse(
                    status_code="400",
                    selection_pattern="4\\d{2}",
                    response_templates={JSON: template("service_error")},
                ),
                _BAD_GATEWAY,
            ],
            passthrough_behavior=apigw.PassthroughBehavior.NEVER,
        ),
    )


def _cdk_schema(schema: dict) -> dict:
    """The JSON schema as keyword arguments of apigw.JsonSchema."""
    mapping = {
        "$schema": "schema",
        "additionalProperties": "additional_properties",
        "maxProperties": "max_properties",
        "minLength": "min_length",
    }
    out: dict = {}
    for key, value in schema.items():
        name = mapping.get(key, key)
        if key == "$schema":
            out["schema"] = apigw.JsonSchemaVersion.DRAFT4
        elif key == "type" and isinstance(value, list):
            out["type"] = [getattr(apigw.JsonSchemaType, v.upper()) for v in value]
        elif key == "type":
            out["type"] = getattr(apigw.JsonSchemaType, value.upper())
        elif key == "properties":
            out["properties"] = {k: apigw.JsonSchema(**_cdk_schema(v)) for k, v in value.items()}
        elif key == "additionalProperties" and isinstance(value, dict):
            out["additional_properties"] = apigw.JsonSchema(**_cdk_schema(value))
        else:
            out[name] = value
    return out
