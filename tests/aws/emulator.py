"""An offline AWS for the pipeline's end-to-end test: the moto server (pinned) with the
three gaps ../shared/docs/aws-offline.md lists filled from the test side.

- Lambda: an invocation runs the deployed function for real: its zip (the CDK asset, as
  CloudFormation created the function from S3) is unpacked and its handler called in a
  Python 3.12 process (Lambda's runtime), with the function's environment variables and
  its timeout. As in Lambda, an execution environment is reused by later invocations
  while it is warm (a few per function), and discarded when an invocation times out.
- ECS: ``RunTask`` starts the task's container entry point (``python -m
  swegreen.aws.sandbox_task`` and the container's command, the override's if it has one, as
  in container/Dockerfile) as a local process with the task definition's environment plus
  the container overrides; the task stops when the process exits, with its exit code. Like
  real ECS, a non-string environment value and overrides over 8192 characters are refused.
  The process gets AWS credentials only if its task role is granted some S3 action (the
  template says), as a container reaches nothing without them. Each task has a disk of its
  own: under bubblewrap, its own empty directory is mounted at ``cache_path`` (where the
  image's cache directory is, for every task: prebuilt artifacts unpack where they were
  built).
- Step Functions' ``states:startExecution.sync:2`` (the rows phase's child execution): its
  parameters and answers are translated between Step Functions' casing and botocore's
  (moto passes them as written), as for ECS.
- Step Functions' ``ecs:runTask`` passes CapacityProviderStrategy on, as AWS's does (moto
  drops it), and ``ecs:runTask.sync`` fails the state (``States.TaskFailed``, the task's
  description as the cause) when the task stopped with a non-zero exit code or none at
  all, as AWS does; moto would report success.
- Step Functions: a state machine created by CloudFormation is executable.
- DynamoDB: an item's writes are applied one at a time, as DynamoDB applies them (moto's
  concurrent ``ADD`` could lose one).

- Step Functions' ``ecs:runTask`` turns RunTask's refusals into the state's error as AWS
  does: an answer with ``failures`` and no task fails it with ``AmazonECS.Unknown`` (the
  answer as the cause), an ECS error with ``ECS.<code>`` (``ECS.ThrottlingException``);
  moto's parser would fail on the empty task list or call both ``States.Runtime``.
- Service Quotas answers the Fargate vCPU quotas set in ``fargate_quotas`` (moto knows
  only VPC's).

Faults for the failure tests, per (run id, instance id) so runs can share the emulator:
``lambda_faults`` (function-name fragment -> rows whose invocation throws),
``sandbox_faults`` (rows whose evaluate container exits 3 instead of evaluating),
``spot_faults`` (rows whose first N evaluate tasks Spot reclaims before they run) and
``refusals`` (rows whose next RunTasks ECS refuses, in order: ``"quota"``, the account's
vCPU limit, or ``"throttle"``, RunTask throttled).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import io
import json
import logging
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
import botocore.session
import httpx
from botocore import xform_name

from infra.sandbox import CACHE_MOUNT
from tests.aws.endpoint_relay import unix_to_tcp
from tests.aws.local_services import FAKE_CREDENTIALS, ROOT, wait_for, zip_dir
from tests.helpers import free_port

ACCOUNT = "123456789012"
REGION = "us-east-1"
BOOTSTRAP = Path(__file__).with_name("lambda_bootstrap.py")
RELAY = Path(__file__).with_name("endpoint_relay.py")
SANDBOX_COMMAND = [sys.executable, "-m", "swegreen.aws.sandbox_task"]
HOST_ENV_DROP = ("AWS_", "PYTHONPATH", "VIRTUAL_ENV", "POWERTOOLS_")
WARM_PER_FUNCTION = 4  # idle execution environments kept per function
OVERRIDES_LIMIT = 8192  # characters of RunTask's overrides, JSON included (ECS's limit)


@dataclass(eq=False)
class _Runtime:
    """One Lambda execution environment: a bootstrap process serving invocations."""

    proc: subprocess.Popen[bytes]
    responses: int  # the read end of its answer pipe


def _host_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(HOST_ENV_DROP)}


class Emulator:
    def __init__(self, workdir: Path, lambda_python: Path) -> None:
        self.workdir = workdir
        self.lambda_python = lambda_python
        self.cache_path = workdir / "task-cache"  # every task's own disk is mounted here
        self.cache_path.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.lambda_faults: dict[str, set[tuple[str, str]]] = {}
        self.sandbox_faults: set[tuple[str, str]] = set()
        self.spot_faults: dict[tuple[str, str], int] = {}
        self.refusals: dict[tuple[str, str], list[str]] = {}
        self.refused: list[tuple[str, str, str]] = []  # (run id, instance id, kind)
        self.fargate_quotas: dict[str, float] = {}  # Service Quotas code -> vCPUs
        self.invocations: list[tuple[str, float, bool]] = []  # (function, seconds, errored)
        self.tasks: list[dict[str, Any]] = []
        # host paths a task must see though they lie under the host's /tmp (which each
        # task gets a private one of): the repositories it clones, as a real task reaches
        # its sources over the network
        self.visible: list[Path] = []
        self.task_roles: dict[str, set[str]] = {}  # task definition family -> role's actions
        self._runtimes: list[_Runtime] = []  # every Lambda execution environment started
        self._idle: dict[str, list[_Runtime]] = {}  # function ARN -> warm, unused ones
        self._started = 0
        self.bwrap = bwrap_usable()
        self._lock = threading.Lock()
        # moto's ECS backend is not thread-safe (see __enter__): every change to its tasks,
        # the request threads' and the task threads' own, holds this lock
        self._ecs_lock = threading.RLock()
        self._stack = ExitStack()

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Emulator:
        from moto.awslambda.models import LambdaFunction
        from moto.dynamodb.models import DynamoDBBackend
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

        # moto's ECS backend is not thread-safe: DescribeTasks (the .sync integration's
        # poll) iterates the task table while RunTask or StopTask from another request
        # thread changes it ("dictionary changed size during iteration", a 500 that the
        # state machine turned into an error row under load). One lock serializes them,
        # and the task threads' changes to a task (attributes moto's describe iterates).
        ecs_lock = self._ecs_lock

        def serialized(name: str, kind: Any = EC2ContainerServiceBackend, lock: Any = None) -> Any:
            method = getattr(kind, name)
            held = ecs_lock if lock is None else lock

            def call(backend: Any, *args: Any, **kwargs: Any) -> Any:
                with held:
                    return method(backend, *args, **kwargs)

            return call

        # moto's DynamoDB applies a write by reading the item, changing a copy and putting
        # it back, unlocked: two Lambdas' concurrent `ADD finished_count :one` could lose
        # one (a run "finished" with 7 of 8 rows counted). DynamoDB applies each item's
        # writes atomically: one lock over moto's writes does the same.
        ddb_lock = threading.RLock()
        ddb_writes = ("put_item", "update_item", "delete_item", "transact_write_items")

        signature = inspect.signature(original_run_task)

        def run_task(backend: Any, *args: Any, **kwargs: Any) -> list[Any]:
            # moto's ECS responses pass everything positionally
            given = signature.bind(backend, *args, **kwargs).arguments
            emulator._check_overrides(given.get("overrides") or {})
            strategy = given.get("capacity_provider_strategy") or []
            capacity = strategy[0]["capacityProvider"] if strategy else given.get("launch_type")
            with ecs_lock:
                tasks = original_run_task(backend, *args, **kwargs)
            network = given.get("networking_configuration")  # moto's Task may not keep it
            for task in tasks:
                emulator._start_container(backend, task, capacity, network)
            return tasks

        from moto.core.exceptions import JsonRESTError
        from moto.core.responses import ActionResult
        from moto.ecs.responses import EC2ContainerServiceResponse
        from moto.servicequotas.models import ServiceQuotasBackend

        original_run_task_response = EC2ContainerServiceResponse.run_task

        def run_task_response(response: Any) -> Any:
            """ECS refuses the task as a full account would (see ``refusals``)."""
            overrides = response._get_param("overrides") or {}
            env = {
                p.get("name"): p.get("value")
                for c in overrides.get("containerOverrides", [])
                for p in c.get("environment", [])
            }
            row = (env.get("SWEGREEN_RUN_ID", ""), env.get("SWEGREEN_INSTANCE_ID", ""))
            with self._lock:
                pending = self.refusals.get(row) or []
                kind = pending.pop(0) if pending else None
                if kind is not None:
                    self.refused.append((*row, kind))
            if kind == "throttle":
                raise JsonRESTError("ThrottlingException", "Rate exceeded")
            if kind == "quota":
                reason = "You've reached the limit on the number of vCPUs you can run concurrently"
                failure = {"arn": response._get_param("cluster", "default"), "reason": reason}
                return ActionResult({"tasks": [], "failures": [failure]})
            return original_run_task_response(response)

        original_quota = ServiceQuotasBackend.get_service_quota

        def get_service_quota(backend: Any, service_code: str, quota_code: str) -> Any:
            if service_code == "fargate" and quota_code in self.fargate_quotas:
                return {
                    "ServiceCode": service_code,
                    "QuotaCode": quota_code,
                    "Value": self.fargate_quotas[quota_code],
                }
            return original_quota(backend, service_code, quota_code)

        patches = [
            *cloudformation_gaps(),
            mock.patch.object(EC2ContainerServiceResponse, "run_task", run_task_response),
            mock.patch.object(ServiceQuotasBackend, "get_service_quota", get_service_quota),
            mock.patch.object(LambdaFunction, "invoke", invoke),
            mock.patch.object(EC2ContainerServiceBackend, "run_task", run_task),
            *(
                mock.patch.object(EC2ContainerServiceBackend, name, serialized(name))
                for name in ("describe_tasks", "stop_task", "list_tasks")
            ),
            *(
                mock.patch.object(
                    DynamoDBBackend, name, serialized(name, DynamoDBBackend, ddb_lock)
                )
                for name in ddb_writes
            ),
            # CloudFormation's state machines go where executions run.
            mock.patch.object(sfn_models, "stepfunctions_backends", stepfunctions_parser_backends),
            mock.patch.dict(os.environ, {"MOTO_PORT": str(self.port)}),
            # a custom resource's answer comes to this server (moto names Docker's host)
            mock.patch("moto.settings.moto_server_host", lambda: "http://127.0.0.1"),
        ]
        for patch in patches:
            self._stack.enter_context(patch)
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        server.start()
        self._stack.callback(server.stop)
        self._stack.callback(self._stop_runtimes)
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
        # a custom resource (AccountSetup) keeps the stack in progress until its function
        # has answered CloudFormation
        deadline = time.monotonic() + 600
        while True:
            description = cfn.describe_stacks(StackName=stack)["Stacks"][0]
            if not description["StackStatus"].endswith("_IN_PROGRESS"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"stack {stack}: still {description['StackStatus']}")
            time.sleep(0.5)
        if description["StackStatus"] != "CREATE_COMPLETE":
            raise RuntimeError(f"stack {stack}: {description['StackStatus']}")
        self.task_roles = task_role_actions(json.loads(template))
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
        name = fn.function_name
        event = json.loads(body) if isinstance(body, str) and body else (body or {})
        calls = self.workdir / "invocations"
        calls.mkdir(parents=True, exist_ok=True)
        result = calls / f"{name}-{uuid.uuid4().hex}.json"
        faults = [
            f"{r}/{i}" for part, rows in self.lambda_faults.items() if part in name for r, i in rows
        ]
        request = json.dumps({"event": event, "result": str(result), "faults": faults})
        started = time.monotonic()
        runtime = self._runtime(fn)
        answer = b""
        try:
            runtime.proc.stdin.write(request.encode() + b"\n")
            runtime.proc.stdin.flush()
            poller = select.poll()  # not select(): no limit on descriptor numbers
            poller.register(runtime.responses, select.POLLIN)
            if poller.poll(float(fn.timeout) * 1000):
                answer = os.read(runtime.responses, 64)
        except OSError:  # a runtime that died: its pipes are broken
            pass
        if answer.strip() in (b"ok", b"error"):
            errored = answer.strip() == b"error"
            payload = result.read_bytes()
            self._release(fn, runtime)
        else:  # timed out, or the runtime died: Lambda discards the environment
            self._discard(runtime)
            errored = True
            if time.monotonic() - started >= float(fn.timeout):
                error = (
                    f"Task timed out after {float(fn.timeout):.2f} seconds",
                    "Sandbox.Timedout",
                )
            else:
                error = (f"runtime exited {runtime.proc.returncode}", "Runtime.ExitError")
            payload = json.dumps({"errorMessage": error[0], "errorType": error[1]}).encode()
        with self._lock:
            self.invocations.append((name, time.monotonic() - started, errored))
            if errored:
                with (calls / "errors.log").open("ab") as log:
                    log.write(f"{name} {request[:300]}\n  -> ".encode() + payload[:2000] + b"\n")
        return payload, errored

    def _runtime(self, fn: Any) -> _Runtime:
        """A warm execution environment of ``fn``, or a new one (a cold start)."""
        key = fn.function_arn
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if idle:
                return idle.pop()
            self._started += 1
            number = self._started
        code = self._code_dir(fn)
        calls = self.workdir / "invocations"
        calls.mkdir(parents=True, exist_ok=True)
        read_end, write_end = os.pipe()
        env = {
            **_host_env(),
            **self.env(),
            **fn.environment_vars,
            "_HANDLER": fn.handler,
            "AWS_LAMBDA_FUNCTION_NAME": fn.function_name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(fn.memory_size),
            "AWS_LAMBDA_FUNCTION_TIMEOUT": str(fn.timeout),
            "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12",
            "EMULATOR_FUNCTION_ARN": fn.function_arn,
            "EMULATOR_RESPONSE_FD": str(write_end),
            "POWERTOOLS_TRACE_DISABLED": "true",  # no X-Ray daemon here
        }
        with (calls / f"{fn.function_name}-{number}.log").open("wb") as log:
            proc = subprocess.Popen(
                [str(self.lambda_python), "-I", str(BOOTSTRAP)],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=code,
                env=env,
                pass_fds=(write_end,),
            )
        os.close(write_end)
        runtime = _Runtime(proc, read_end)
        with self._lock:
            self._runtimes.append(runtime)
        return runtime

    def _release(self, fn: Any, runtime: _Runtime) -> None:
        with self._lock:
            idle = self._idle.setdefault(fn.function_arn, [])
            if len(idle) < WARM_PER_FUNCTION:
                idle.append(runtime)
                return
        self._discard(runtime)

    def _discard(self, runtime: _Runtime) -> None:
        with self._lock:
            if runtime not in self._runtimes:
                return  # discarded already: its descriptor number may be reused by now
            self._runtimes.remove(runtime)
        if runtime.proc.poll() is None:
            runtime.proc.kill()
        runtime.proc.wait()
        os.close(runtime.responses)
        with contextlib.suppress(OSError):
            runtime.proc.stdin.close()

    def _stop_runtimes(self) -> None:
        for runtime in list(self._runtimes):
            self._discard(runtime)

    # ------------------------------------------------------------------ ECS
    @staticmethod
    def _check_overrides(overrides: dict[str, Any]) -> None:
        """Real ECS refuses non-string environment values and overrides over 8192 characters;
        moto would take them."""
        from moto.ecs.exceptions import InvalidParameterException

        for container in overrides.get("containerOverrides", []):
            for pair in container.get("environment", []):
                if not isinstance(pair.get("value"), str) or not isinstance(pair.get("name"), str):
                    raise InvalidParameterException(
                        f"Container Overrides environment values must be strings: {pair!r}"
                    )
        size = len(json.dumps(overrides, separators=(",", ":")))
        if size > OVERRIDES_LIMIT:
            raise InvalidParameterException(
                f"Container Overrides length must be at most {OVERRIDES_LIMIT}, not {size}"
            )

    def _start_container(
        self, backend: Any, task: Any, capacity: str | None, network: dict[str, Any] | None
    ) -> None:
        definition = backend.describe_task_definition(task.task_definition_arn)
        container = definition.container_definitions[0]
        env = {p["name"]: p["value"] for p in container.get("environment") or []}
        command = list(container.get("command", []))
        for override in task.overrides.get("containerOverrides", []):
            if override.get("name") == container["name"]:
                env.update({p["name"]: p["value"] for p in override.get("environment", [])})
                command = list(override.get("command") or command)
        phase = command[0] if command else "evaluate"
        instance_id = env.get("SWEGREEN_INSTANCE_ID") or f"{phase}-{env.get('SWEGREEN_ITEM_INDEX')}"
        task_dir = self.workdir / "tasks" / f"{instance_id}-{task.id[:8]}"
        task_dir.mkdir(parents=True)
        closed = _assign_public_ip(network) == "DISABLED"
        refused = _pull_refusal(backend, network)
        keep: list[str] = []
        env = {k: str(self.cache_path) if v == CACHE_MOUNT else v for k, v in env.items()}
        command = [*SANDBOX_COMMAND, *command]
        relay = None
        if closed and self.bwrap is not None:
            # its own network namespace: the endpoints (the emulated AWS) and nothing else
            # a short path: a Unix socket's may not pass 107 bytes, which a deep temp dir
            # and a long instance id together do
            sock = Path(tempfile.mkdtemp(prefix="relay-", dir="/tmp")) / "s"
            relay = unix_to_tcp(str(sock), self.port)
            keep.append(str(sock.parent))
            command = [sys.executable, str(RELAY), str(sock), str(self.port), "--", *command]
        view = self._own_disk(closed=closed, keep=keep)
        row = (env.get("SWEGREEN_RUN_ID", ""), instance_id)
        if row in self.sandbox_faults:
            command = [sys.executable, "-c", "import sys; print('injected crash'); sys.exit(3)"]
        actions = self.task_roles.get(definition.family, set())
        credentials = self.env() if any(a.startswith("s3:") for a in actions) else {}
        log = task_dir / "output.log"
        record: dict[str, Any] = {
            "instance_id": instance_id,
            "phase": phase,
            "capacity": capacity,
            "task": task.id,
            "container": container["name"],
            "log": str(log),
            "env": env,
            "credentials": bool(credentials),
            "own_disk": self.bwrap is not None,
            # "closed": no public IP (isolated subnets): only the endpoints are reachable
            "network": "closed" if closed else "open",
            "network_cut": relay is not None,
            # the image pull through the interface endpoints, by the deployed groups' rules
            "pull": refused or "ok",
        }
        with self._lock:
            self.tasks.append(record)
            reclaim = self.spot_faults.get(row, 0) > 0 and capacity == "FARGATE_SPOT"
            if reclaim:
                self.spot_faults[row] -= 1
        if refused is not None:  # the image cannot be pulled: ECS stops it unstarted
            record["exit_code"] = None
            with self._ecs_lock:
                for c in task.containers:
                    c.exitCode = None
                    c.last_status = "STOPPED"
                task.stopped_reason = refused
                task.stop_code = "TaskFailedToStart"
                task.desired_status = task.last_status = "STOPPED"
            return
        if reclaim:  # Spot took the capacity back before the container ran
            record["exit_code"] = None
            with self._ecs_lock:
                for c in task.containers:
                    c.exitCode = None  # moto's default is 0; a reclaimed container has none
                    c.last_status = "STOPPED"
                task.stopped_reason = "Your Spot Task was interrupted."
                task.stop_code = "SpotInterruption"
                task.desired_status = task.last_status = "STOPPED"
            return

        def run() -> None:
            with log.open("wb") as out:
                proc = subprocess.run(
                    [*view, *command],
                    # The image's code is this checkout's (container/Dockerfile copies shared/).
                    env={**_host_env(), **credentials, **env, "PYTHONPATH": str(ROOT / "shared")},
                    cwd=task_dir,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            record["exit_code"] = proc.returncode
            if relay is not None:
                relay.close()
                shutil.rmtree(sock.parent, ignore_errors=True)
            with self._ecs_lock:
                for c in task.containers:
                    c.exitCode = proc.returncode
                    c.last_status = "STOPPED"
                task.stopped_reason = "Essential container in task exited"
                task.stop_code = "EssentialContainerExited"
                task.desired_status = "STOPPED"
                task.last_status = "STOPPED"

        threading.Thread(target=run, daemon=True, name=f"task-{instance_id}").start()

    def _own_disk(self, *, closed: bool, keep: Sequence[str] = ()) -> list[str]:
        """The bubblewrap prefix that gives the task a disk of its own at ``cache_path``,
        its own processes and temporary directories (a Fargate task is a machine of its
        own: a batch task clears what one row's tests left before the next, and must see
        no other task's) and, ``closed``, a network namespace of its own
        (endpoint_relay.py; ``keep``: host directories it still sees, its relay's).

        The disk is a tmpfs, gone with the task as Fargate's ephemeral storage is: a task
        unpacks an environment of about 300 MB, which took 7 s of system time on this
        machine's disk and takes 0.5 s in memory (the artifacts' sizes are not changed)."""
        if self.bwrap is None:  # no mount namespaces here: every task shares cache_path
            return []
        # what the task runs from (this checkout, its interpreter) stays in sight when it
        # lies under the host's /tmp (a CI checkout may)
        needed = [
            *keep,
            *(
                str(p)
                for p in [*_host_code(), self.workdir.resolve(), *self.visible]
                if _under_tmp(p.resolve())
            ),
        ]
        return [
            self.bwrap,
            "--dev-bind",
            "/",
            "/",
            "--unshare-pid",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
            "--tmpfs",
            "/var/tmp",
            # the parents of what it keeps, passable (bubblewrap makes them 0700: the
            # uid the tests run as could not reach them)
            *[arg for parent in _parents(needed) for arg in ("--perms", "0755", "--dir", parent)],
            *[arg for path in needed for arg in ("--bind", path, path)],
            "--tmpfs",
            str(self.cache_path),
            *(["--unshare-net"] if closed else []),
            "--die-with-parent",
            "--",
        ]


def _host_code() -> list[Path]:
    """The checkout and the interpreters a task's command runs from."""
    paths = {Path(__file__).resolve().parents[2], Path(sys.prefix), Path(sys.base_prefix)}
    return sorted(p.resolve() for p in paths)


def _parents(paths: Sequence[str]) -> list[str]:
    """The directories above ``paths`` inside /tmp and /var/tmp, shallowest first."""
    out: dict[str, None] = {}
    for path in paths:
        chain = [p for p in reversed(Path(path).parents) if _under_tmp(p)]
        out.update((str(p), None) for p in chain)
    return list(out)


def _under_tmp(path: Path) -> bool:
    return any(p in (Path("/tmp"), Path("/var/tmp")) for p in path.parents)


def _pull_refusal(backend: Any, network: dict[str, Any] | None) -> str | None:
    """Why the task's image could not be pulled, or None. Fargate pulls through the task's
    own network interface, and the VPC's interface endpoints answer for ECR and Logs in
    every subnet (private DNS): each must let the task's groups in on 443, and the task's
    groups must let HTTPS out to it. The deployed security groups decide, as in AWS."""
    from moto.ec2.models import ec2_backends

    ec2 = ec2_backends[backend.account_id][backend.region_name]
    groups = list(_awsvpc(network, "securitygroups") or [])
    if not groups:
        return None  # no awsvpc configuration: nothing to model
    interface = [
        e
        for e in ec2.vpc_end_points.values()
        if e.vpc_endpoint_type == "Interface" and str(e.state).lower() == "available"
    ]
    closed = _assign_public_ip(network) == "DISABLED"
    if closed and not any(e.service_name.endswith(".ecr.dkr") for e in interface):
        # an isolated subnet has no route to ECR but through its endpoints
        return (
            "CannotPullContainerError: pull image manifest has been retried 1 time(s): "
            "failed to resolve ref: dial tcp 443: i/o timeout (no route to ECR)"
        )

    def allows(rule: Any, peers: set[str]) -> bool:
        port = rule.ip_protocol == "-1" or (
            rule.ip_protocol == "tcp" and rule.from_port <= 443 <= rule.to_port
        )
        anywhere = rule.ip_range.get("CidrIp") == "0.0.0.0/0"
        return port and (anywhere or rule.source_group.get("GroupId") in peers)

    for endpoint in interface:
        mine = set(endpoint.security_group_ids)
        inbound = any(
            allows(rule, set(groups))
            for group in mine
            for rule in ec2.get_security_group_from_id(group).ingress_rules
        )
        outbound = any(
            allows(rule, mine)
            for group in groups
            for rule in ec2.get_security_group_from_id(group).egress_rules
        )
        if not (inbound and outbound):
            return (
                "CannotPullContainerError: pull image manifest has been retried 1 time(s): "
                f"failed to resolve ref: {endpoint.service_name}: dial tcp 443: i/o timeout"
            )
    return None


def _awsvpc(network: dict[str, Any] | None, name: str) -> Any:
    """A setting of RunTask's awsvpcConfiguration (``name`` lower-cased), however the
    caller cased it; None when absent."""
    for key, value in (network or {}).items():
        if key.lower() == "awsvpcconfiguration" and isinstance(value, dict):
            for inner, setting in value.items():
                if inner.lower() == name:
                    return setting
    return None


def _assign_public_ip(network: dict[str, Any] | None) -> str:
    """RunTask's ``assignPublicIp`` (ENABLED or DISABLED)."""
    return str(_awsvpc(network, "assignpublicip") or "DISABLED")  # ECS's default


def bwrap_usable() -> str | None:
    """bubblewrap, if it can bind-mount here (it needs user or mount namespaces)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None
    probe = subprocess.run(
        [bwrap, "--dev-bind", "/", "/", "--ro-bind", "/", "/", "--", "true"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    return bwrap if probe.returncode == 0 else None


def task_role_actions(template: dict[str, Any]) -> dict[str, set[str]]:
    """Task definition family -> the actions its task role's policies allow (moto keeps
    neither the role of a task definition nor who may do what)."""
    resources = template["Resources"]
    granted: dict[str, set[str]] = {}
    for policy in resources.values():
        if policy["Type"] != "AWS::IAM::Policy":
            continue
        for role in policy["Properties"].get("Roles", []):
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                actions = statement["Action"]
                granted.setdefault(role.get("Ref", ""), set()).update(
                    [actions] if isinstance(actions, str) else actions
                )
    families = {}
    for resource in resources.values():
        if resource["Type"] != "AWS::ECS::TaskDefinition":
            continue
        props = resource["Properties"]
        role = props.get("TaskRoleArn", {}).get("Fn::GetAtt", [""])[0]
        families[props["Family"]] = granted.get(role, set())
    return families


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
    original_sync = ecs_task._build_sync_resolver
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_sfn as sfn_sfn,
    )

    sfn_task = sfn_sfn.StateTaskServiceSfn
    original_sfn_parameters = sfn_task._normalise_parameters

    def sfn_parameters(
        task: Any,
        parameters: dict,
        boto_service_name: str | None = None,
        service_action_name: str | None = None,
    ) -> None:
        """startExecution's parameters (a child execution): moto's own step (Input to a
        string), then the casing botocore wants, as for ECS."""
        original_sfn_parameters(task, parameters, boto_service_name, service_action_name)
        normalise_parameters(task, parameters, boto_service_name, service_action_name)

    def sync_resolver(task: Any, env: Any, *args: Any, **kwargs: Any) -> Any:
        """As AWS: a task that stopped without exit code 0 fails the state with
        States.TaskFailed, the task's description as the cause."""
        from moto.stepfunctions.parser.api import HistoryEventType, TaskFailedEventDetails
        from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
            FailureEvent,
            FailureEventException,
        )
        from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import (
            StatesErrorName,
        )
        from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (  # noqa: E501
            StatesErrorNameType,
        )
        from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
        from moto.stepfunctions.parser.asl.utils.encoding import to_json_str

        resolve = original_sync(task, env, *args, **kwargs)

        def checked() -> Any:
            described = resolve()
            if described is None:
                return None
            codes = [c.get("ExitCode") for c in described.get("Containers", [])]
            if codes and all(code == 0 for code in codes):
                return described
            failed = StatesErrorNameType.StatesTaskFailed
            raise FailureEventException(
                FailureEvent(
                    env=env,
                    error_name=StatesErrorName(typ=failed),
                    event_type=HistoryEventType.TaskFailed,
                    event_details=EventDetails(
                        taskFailedEventDetails=TaskFailedEventDetails(
                            resource=task._get_sfn_resource(),
                            resourceType=task._get_sfn_resource_type(),
                            error=failed.to_name(),
                            cause=to_json_str(described),
                        )
                    ),
                )
            )

        return checked

    original_eval = ecs_task._eval_service_task

    def eval_service_task(task: Any, env: Any, *args: Any, **kwargs: Any) -> Any:
        """RunTask's refusals fail the state as on AWS (the module's docstring)."""
        from botocore.exceptions import ClientError
        from moto.stepfunctions.parser.asl.eval.callback.callback import (
            CallbackOutcomeFailure,
            CallbackOutcomeFailureError,
        )

        def fail(error: str, cause: str) -> None:
            raise CallbackOutcomeFailureError(
                CallbackOutcomeFailure(callback_id="", error=error, cause=cause)
            )

        try:
            original_eval(task, env, *args, **kwargs)
        except ClientError as exc:
            fail(f"ECS.{exc.response['Error']['Code']}", exc.response["Error"]["Message"])

    def ecs_response(
        task: Any,
        response: Any,
        boto_service_name: str | None = None,
        service_action_name: str | None = None,
    ) -> None:
        """As ``normalise_response``; a RunTask answer with failures and no task fails
        the state (moto's parser would go on to read a task that is not there)."""
        from moto.stepfunctions.parser.asl.eval.callback.callback import (
            CallbackOutcomeFailure,
            CallbackOutcomeFailureError,
        )

        normalise_response(task, response, boto_service_name, service_action_name)
        if service_action_name == "run_task" and not response.get("Tasks"):
            raise CallbackOutcomeFailureError(
                CallbackOutcomeFailure(
                    callback_id="", error="AmazonECS.Unknown", cause=json.dumps(response)
                )
            )

    # AWS's ecs:runTask integration takes CapacityProviderStrategy (Spot); moto's list of
    # the parameters it passes on lacks it and would drop it silently.
    run_task_parameters = {
        "runtask": sfn_ecs._SUPPORTED_API_PARAM_BINDINGS["runtask"] | {"CapacityProviderStrategy"}
    }
    return [
        mock.patch.dict(sfn_ecs._SUPPORTED_API_PARAM_BINDINGS, run_task_parameters),
        mock.patch.object(ecs_task, "_build_sync_resolver", sync_resolver),
        mock.patch.object(ecs_task, "_eval_service_task", eval_service_task),
        mock.patch.object(sfn_task, "_normalise_parameters", sfn_parameters),
        mock.patch.object(sfn_task, "_normalise_response", normalise_response),
        mock.patch.object(ecs_task, "_normalise_parameters", normalise_parameters),
        mock.patch.object(ecs_task, "_normalise_response", ecs_response),
        mock.patch.object(StepFunctionsParserBackend, "create_state_machine", create_with_number),
        mock.patch.object(FileSystem, "get_cfn_attribute", file_system_attribute, create=True),
        mock.patch.object(
            Method, "create_from_cloudformation_json", classmethod(method_from_cloudformation)
        ),
    ]
