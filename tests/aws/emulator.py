"""An offline AWS for the pipeline's end-to-end test: the moto server (pinned) with the
three gaps ../shared/docs/aws-offline.md lists filled from the test side.

- Lambda: an invocation runs the deployed function for real: its zip (the CDK asset, as
  CloudFormation created the function from S3) is unpacked and its handler called by a
  Python 3.12 process (Lambda's runtime), with the function's environment variables and
  its timeout.
- ECS: ``RunTask`` starts the task's container entry point (``python -m
  swegreen.aws.sandbox_task``, as in container/Dockerfile) as a local process with the
  task definition's environment plus the container overrides; the task stops when the
  process exits, with its exit code. Like real ECS, a non-string environment value is
  refused. The EFS cache mount is a local directory.
- Step Functions: a state machine created by CloudFormation is executable.

Faults for the failure tests, per (run id, instance id) so runs can share the emulator:
``lambda_faults`` (function-name fragment -> rows whose invocation throws) and
``sandbox_faults`` (rows whose container exits 3 instead of evaluating).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
import zipfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
import botocore.session
import httpx
from botocore import xform_name

from tests.aws.local_services import FAKE_CREDENTIALS, ROOT, wait_for, zip_dir
from tests.helpers import free_port

ACCOUNT = "123456789012"
REGION = "us-east-1"
BOOTSTRAP = Path(__file__).with_name("lambda_bootstrap.py")
SANDBOX_COMMAND = [sys.executable, "-m", "swegreen.aws.sandbox_task"]
HOST_ENV_DROP = ("AWS_", "PYTHONPATH", "VIRTUAL_ENV", "POWERTOOLS_")


def _host_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(HOST_ENV_DROP)}


class Emulator:
    def __init__(self, workdir: Path, lambda_python: Path, efs_dir: Path) -> None:
        self.workdir = workdir
        self.lambda_python = lambda_python
        self.efs_dir = efs_dir
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.lambda_faults: dict[str, set[tuple[str, str]]] = {}
        self.sandbox_faults: set[tuple[str, str]] = set()
        self.invocations: list[tuple[str, float, bool]] = []  # (function, seconds, errored)
        self.tasks: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stack = ExitStack()

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Emulator:
        from moto.awslambda.models import LambdaFunction
        from moto.ecs.models import EC2ContainerServiceBackend
        from moto.moto_server.threaded_moto_server import ThreadedMotoServer
        from moto.stepfunctions import models as sfn_models
        from moto.stepfunctions.parser.models import stepfunctions_parser_backends

        emulator = self
        original_run_task = EC2ContainerServiceBackend.run_task

        def invoke(fn: Any, body: str, request_headers: Any, response_headers: Any) -> bytes:
            payload, errored = emulator._invoke(fn, body)
            if errored:
                response_headers["x-amz-function-error"] = "Unhandled"
            return payload

        def run_task(backend: Any, *args: Any, **kwargs: Any) -> list[Any]:
            overrides = kwargs.get("overrides") or (args[3] if len(args) > 3 else None) or {}
            emulator._check_overrides(overrides)
            tasks = original_run_task(backend, *args, **kwargs)
            for task in tasks:
                emulator._start_container(backend, task)
            return tasks

        patches = [
            *cloudformation_gaps(),
            mock.patch.object(LambdaFunction, "invoke", invoke),
            mock.patch.object(EC2ContainerServiceBackend, "run_task", run_task),
            # CloudFormation's state machines go where executions run.
            mock.patch.object(sfn_models, "stepfunctions_backends", stepfunctions_parser_backends),
            mock.patch.dict(os.environ, {"MOTO_PORT": str(self.port)}),
        ]
        for patch in patches:
            self._stack.enter_context(patch)
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        server.start()
        self._stack.callback(server.stop)
        wait_for(self.endpoint + "/moto-api/")
        httpx.post(
            self.endpoint + "/moto-api/config",
            json={"stepfunctions": {"execute_state_machine": True}},
        ).raise_for_status()
        # Tasks stay RUNNING until their process exits (we stop them), not on a timer.
        httpx.post(
            self.endpoint + "/moto-api/state-manager/set-transition",
            json={
                "model_name": "ecs::task",
                "transition": {"progression": "manual", "times": 10**9},
            },
        ).raise_for_status()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def client(self, service: str) -> Any:
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    def env(self) -> dict[str, str]:
        """What a process inside this AWS gets: fake credentials and the emulator's endpoint."""
        return {**FAKE_CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    # ------------------------------------------------------------------ deploy
    def deploy(self, assembly: Path, stack: str) -> dict[str, str]:
        """``cdk deploy`` as far as an emulator allows: publish the file assets to the
        bootstrap bucket, then create the stack from the synthesized template."""
        manifest = json.loads((assembly / f"{stack}.assets.json").read_text())
        s3 = self.client("s3")
        for asset in manifest.get("files", {}).values():
            if asset["source"].get("packaging") != "zip":
                continue
            for dest in asset["destinations"].values():
                bucket = self._substitute(dest["bucketName"])
                if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
                    s3.create_bucket(Bucket=bucket)
                s3.put_object(
                    Bucket=bucket,
                    Key=dest["objectKey"],
                    Body=zip_dir(assembly / asset["source"]["path"]),
                )
        self.client("ssm").put_parameter(
            Name="/cdk-bootstrap/hnb659fds/version", Value="30", Type="String", Overwrite=True
        )
        cfn = self.client("cloudformation")
        template = (assembly / f"{stack}.template.json").read_text()
        cfn.create_stack(
            StackName=stack,
            TemplateBody=template,
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"],
        )
        description = cfn.describe_stacks(StackName=stack)["Stacks"][0]
        if description["StackStatus"] != "CREATE_COMPLETE":
            raise RuntimeError(f"stack {stack}: {description['StackStatus']}")
        return {o["OutputKey"]: o["OutputValue"] for o in description.get("Outputs", [])}

    @staticmethod
    def _substitute(text: str) -> str:
        return text.replace("${AWS::AccountId}", ACCOUNT).replace("${AWS::Region}", REGION)

    # ------------------------------------------------------------------ Lambda
    def _code_dir(self, fn: Any) -> Path:
        digest = hashlib.sha256(fn.code_bytes).hexdigest()[:16]
        target = self.workdir / "lambda-code" / digest
        with self._lock:
            if not (target / ".unpacked").exists():
                with zipfile.ZipFile(io.BytesIO(fn.code_bytes)) as archive:
                    archive.extractall(target)
                (target / ".unpacked").write_text("")
        return target

    def _invoke(self, fn: Any, body: str) -> tuple[bytes, bool]:
        code = self._code_dir(fn)
        name = fn.function_name
        event = body if isinstance(body, str) and body else json.dumps(body or {})
        calls = self.workdir / "invocations"
        calls.mkdir(parents=True, exist_ok=True)
        stamp = f"{name}-{time.monotonic_ns()}"
        result, log = calls / f"{stamp}.json", calls / f"{stamp}.log"
        env = {
            **_host_env(),
            **self.env(),
            **fn.environment_vars,
            "_HANDLER": fn.handler,
            "AWS_LAMBDA_FUNCTION_NAME": name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(fn.memory_size),
            "AWS_LAMBDA_FUNCTION_TIMEOUT": str(fn.timeout),
            "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12",
            "EMULATOR_FUNCTION_ARN": fn.function_arn,
            "EMULATOR_RESULT": str(result),
            "POWERTOOLS_TRACE_DISABLED": "true",  # no X-Ray daemon here
        }
        faults = [
            f"{r}/{i}" for part, rows in self.lambda_faults.items() if part in name for r, i in rows
        ]
        env["EMULATOR_FAULTS"] = json.dumps(faults)
        started = time.monotonic()
        with log.open("wb") as out:
            try:
                proc = subprocess.run(
                    [str(self.lambda_python), "-I", str(BOOTSTRAP)],
                    input=event.encode(),
                    cwd=code,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=float(fn.timeout),
                )
                errored = proc.returncode != 0
                payload = result.read_bytes() if result.exists() else b""
                if not payload:
                    errored = True
                    payload = json.dumps(
                        {
                            "errorMessage": f"runtime exited {proc.returncode}",
                            "errorType": "Runtime.ExitError",
                        }
                    ).encode()
            except subprocess.TimeoutExpired:
                errored = True
                payload = json.dumps(
                    {
                        "errorMessage": f"Task timed out after {float(fn.timeout):.2f} seconds",
                        "errorType": "Sandbox.Timedout",
                    }
                ).encode()
        with self._lock:
            self.invocations.append((name, time.monotonic() - started, errored))
        return payload, errored

    # ------------------------------------------------------------------ ECS
    @staticmethod
    def _check_overrides(overrides: dict[str, Any]) -> None:
        """Real ECS refuses non-string environment values; moto would take them."""
        from moto.ecs.exceptions import InvalidParameterException

        for container in overrides.get("containerOverrides", []):
            for pair in container.get("environment", []):
                if not isinstance(pair.get("value"), str) or not isinstance(pair.get("name"), str):
                    raise InvalidParameterException(
                        f"Container Overrides environment values must be strings: {pair!r}"
                    )

    def _start_container(self, backend: Any, task: Any) -> None:
        definition = backend.describe_task_definition(task.task_definition_arn)
        container = definition.container_definitions[0]
        env = {p["name"]: p["value"] for p in container.get("environment") or []}
        for override in task.overrides.get("containerOverrides", []):
            if override.get("name") == container["name"]:
                env.update({p["name"]: p["value"] for p in override.get("environment", [])})
        # The EFS access point, mounted where the container expects its cache.
        env["SWEGREEN_CACHE_DIR"] = str(self.efs_dir)
        instance_id = env.get("SWEGREEN_INSTANCE_ID", task.id)
        command = SANDBOX_COMMAND
        if (env.get("SWEGREEN_RUN_ID"), instance_id) in self.sandbox_faults:
            command = [sys.executable, "-c", "import sys; print('injected crash'); sys.exit(3)"]
        logs = self.workdir / "tasks"
        logs.mkdir(parents=True, exist_ok=True)
        log = logs / f"{instance_id}-{task.id[:8]}.log"
        record = {"instance_id": instance_id, "task": task.id, "log": str(log), "env": env}
        with self._lock:
            self.tasks.append(record)

        def run() -> None:
            with log.open("wb") as out:
                proc = subprocess.run(
                    command,
                    # The image's code is this checkout's (container/Dockerfile copies shared/).
                    env={**_host_env(), **self.env(), **env, "PYTHONPATH": str(ROOT / "shared")},
                    cwd=self.workdir,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            record["exit_code"] = proc.returncode
            for c in task.containers:
                c.exitCode = proc.returncode
                c.last_status = "STOPPED"
            task.stopped_reason = "Essential container in task exited"
            task.stop_code = "EssentialContainerExited"
            task.desired_status = "STOPPED"
            task.last_status = "STOPPED"

        threading.Thread(target=run, daemon=True, name=f"task-{instance_id}").start()


def cloudformation_gaps() -> list[Any]:
    """Attributes moto's CloudFormation cannot resolve for the resources the stack uses."""
    from moto.efs.models import FileSystem

    def file_system_attribute(fs: Any, name: str) -> str:
        if name == "Arn":
            return fs.file_system_arn
        if name == "FileSystemId":
            return fs.file_system_id
        raise NotImplementedError(f"AWS::EFS::FileSystem.{name}")

    from moto.apigateway.models import Method, apigateway_backends

    def method_from_cloudformation(
        cls: Any, name: str, cfn: dict[str, Any], account_id: str, region_name: str, **kw: Any
    ) -> Any:
        """moto drops an integration's credentials and templates; AWS integrations need them."""
        props = cfn["Properties"]
        backend = apigateway_backends[account_id][region_name]
        method = backend.put_method(
            function_id=props["RestApiId"],
            resource_id=props["ResourceId"],
            method_type=props["HttpMethod"],
            authorization_type=props["AuthorizationType"],
            api_key_required=props.get("ApiKeyRequired"),
        )
        integration = props["Integration"]
        backend.put_integration(
            function_id=props["RestApiId"],
            resource_id=props["ResourceId"],
            method_type=props["HttpMethod"],
            integration_type=integration["Type"],
            uri=integration["Uri"],
            integration_method=integration["IntegrationHttpMethod"],
            credentials=integration.get("Credentials"),
            request_templates=integration.get("RequestTemplates"),
            passthrough_behavior=integration.get("PassthroughBehavior"),
            request_parameters=integration.get("RequestParameters"),
        )
        return method

    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    create_state_machine = StepFunctionsParserBackend.create_state_machine

    def create_with_number(backend: Any, name: str, definition: str, *a: Any, **kw: Any) -> Any:
        """moto's ASL grammar lexes ``ToleratedFailurePercentage: 100`` as an integer it then
        refuses; AWS takes it. The same value as a decimal parses."""
        definition = re.sub(
            r'("ToleratedFailurePercentage":\s*)(\d+)(?=[,}])', r"\1\2.0", definition
        )
        return create_state_machine(backend, name, definition, *a, **kw)

    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_ecs as sfn_ecs,
    )

    def operation(task: Any, service: str | None, action: str | None) -> Any:
        model = botocore.session.get_session().get_service_model(
            task._get_boto_service_name(service)
        )
        snake = task._get_boto_service_action(action)
        name = next(n for n in model.operation_names if xform_name(n) == snake)
        return model.operation_model(name)

    def normalise_parameters(
        task: Any,
        parameters: dict,
        boto_service_name: str | None = None,
        service_action_name: str | None = None,
    ) -> None:
        """Step Functions' PascalCase parameters -> the ECS API's members (moto: a no-op)."""
        op = operation(task, boto_service_name, service_action_name)
        task._to_boto_request(parameters, op.input_shape)

    def normalise_response(
        task: Any,
        response: Any,
        boto_service_name: str | None = None,
        service_action_name: str | None = None,
    ) -> None:
        op = operation(task, boto_service_name, service_action_name)
        task._from_boto_response(response, op.output_shape)

    ecs_task = sfn_ecs.StateTaskServiceEcs
    return [
        mock.patch.object(ecs_task, "_normalise_parameters", normalise_parameters),
        mock.patch.object(ecs_task, "_normalise_response", normalise_response),
        mock.patch.object(StepFunctionsParserBackend, "create_state_machine", create_with_number),
        mock.patch.object(FileSystem, "get_cfn_attribute", file_system_attribute, create=True),
        mock.patch.object(
            Method, "create_from_cloudformation_json", classmethod(method_from_cloudformation)
        ),
    ]
