"""LocalStack's Lambda runs functions in Docker only; this executor runs each invocation as a
local process of the Lambda's Python (tests/aws/lambda_bootstrap.py in the unzipped code),
so the deployed functions run for real on a machine without Docker. Test-side only: it is
installed into the LocalStack virtualenv by the tests, never into the product.

Configured by the LocalStack process's environment: LAMBDA_RUNTIME_EXECUTOR=local-process,
SWEGREEN_LAMBDA_PYTHON (the interpreter) and SWEGREEN_LAMBDA_BOOTSTRAP (the runtime shim).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from localstack import config
from localstack.services.lambda_.invocation.lambda_models import FunctionVersion, InvocationResult
from localstack.services.lambda_.invocation.plugins import RuntimeExecutorPlugin
from localstack.services.lambda_.invocation.runtime_executor import RuntimeExecutor

KEEP = ("PATH", "HOME", "LANG", "SSL_CERT_FILE", "TMPDIR")


class LocalProcessExecutor(RuntimeExecutor):
    env: dict[str, str]

    def start(self, env_vars: dict[str, str]) -> None:
        self.env = {k: str(v) for k, v in env_vars.items()}

    def stop(self) -> None:
        pass

    def get_address(self) -> str:
        return "127.0.0.1"

    def get_endpoint_from_executor(self) -> str:
        return "127.0.0.1"

    def get_runtime_endpoint(self) -> str:
        port = config.GATEWAY_LISTEN[0].port
        return f"http://127.0.0.1:{port}/_localstack_lambda/{self.id}"

    def invoke(self, payload: dict[str, str]) -> InvocationResult:
        code = self.function_version.config.code.get_unzipped_code_location()
        with tempfile.TemporaryDirectory(prefix="lambda-") as tmp:
            result = Path(tmp) / "result.json"
            env = {k: os.environ[k] for k in KEEP if k in os.environ}
            env.update(self.env)
            env.update(
                EMULATOR_FUNCTION_ARN=payload["invoked-function-arn"],
                EMULATOR_RESULT=str(result),
                POWERTOOLS_TRACE_DISABLED="true",  # no X-Ray daemon here
            )
            timeout = float(self.env.get("AWS_LAMBDA_FUNCTION_TIMEOUT", "3"))
            try:
                proc = subprocess.run(
                    [
                        os.environ["SWEGREEN_LAMBDA_PYTHON"],
                        "-I",
                        os.environ["SWEGREEN_LAMBDA_BOOTSTRAP"],
                    ],
                    input=payload["payload"].encode(),
                    cwd=code,
                    env=env,
                    capture_output=True,
                    timeout=timeout,
                )
                logs = (proc.stdout + proc.stderr).decode(errors="replace")
                failed = proc.returncode != 0
            except subprocess.TimeoutExpired:
                logs, failed = f"Task timed out after {timeout:.2f} seconds", True
            body = result.read_bytes() if result.exists() else b'{"errorMessage": "no result"}'
        return InvocationResult(
            request_id=payload["invoke-id"], payload=body, is_error=failed, logs=logs
        )

    def get_logs(self) -> str:
        return ""

    @classmethod
    def prepare_version(cls, function_version: FunctionVersion) -> None:
        if function_version.config.code:
            function_version.config.code.prepare_for_execution()

    @classmethod
    def cleanup_version(cls, function_version: FunctionVersion) -> None:
        pass


class LocalProcessExecutorPlugin(RuntimeExecutorPlugin):
    name = "local-process"

    def load(self, *args: object, **kwargs: object) -> type[LocalProcessExecutor]:
        return LocalProcessExecutor
