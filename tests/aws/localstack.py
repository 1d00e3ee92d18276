"""LocalStack (community, pinned) as a local process without Docker, for the front door's
test: API Gateway's service integrations and VTL templates, Step Functions and DynamoDB run
in LocalStack itself, the Lambda functions run as local Python 3.12 processes through the
test-side executor plugin in ``localstack_offline/``.

What the community edition lacks is worked around here, never in the product: DynamoDB
is the official DynamoDB Local jar from the npm package (LocalStack would download it),
with a no-op stand-in for LocalStack's class-loader agent; ECS and EFS do not exist, so
their resources are left out of the deployed template and referenced by made-up ARNs (the
sandbox step then fails, and that row is recorded as ``error``: the moto test covers the
sandbox); and the ASL parser only reads ``ToleratedFailurePercentage`` as a decimal.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3
import httpx

from swegreen.environments.interpreters import InterpreterSearch, find_interpreter
from tests.aws.local_services import ROOT, dynamodb_local_jar, wait_for, zip_dir
from tests.helpers import free_port

PLUGIN = Path(__file__).resolve().parent / "localstack_offline"
BOOTSTRAP = Path(__file__).resolve().parent / "lambda_bootstrap.py"
VENV = ROOT / ".venv-localstack"
ACCOUNT = "000000000000"
REGION = "us-east-1"
CREDENTIALS = {"aws_access_key_id": "test", "aws_secret_access_key": "test"}
# Resource types the community edition does not provide.
ABSENT = ("AWS::ECS::TaskDefinition", "AWS::ECS::Cluster", "AWS::EFS::")
TOLERATED = re.compile(r'("ToleratedFailurePercentage":\d+)(?=[,}])')
NOOP_AGENT = """public final class NoopAgent {
    public static void premain(String args, java.lang.instrument.Instrumentation inst) {}
}
"""


def localstack_python() -> Path:
    """A Python 3.13 virtualenv with LocalStack and the plugin, rebuilt when they change."""
    python = VENV / "bin" / "python"
    digest = hashlib.sha256(
        b"".join(p.read_bytes() for p in sorted(PLUGIN.glob("*")) if p.is_file())
    ).hexdigest()
    stamp = VENV / ".installed"
    if python.exists() and stamp.exists() and stamp.read_text() == digest:
        return python
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        raise FileNotFoundError("uv is needed to build the LocalStack virtualenv (make setup)")
    base = find_interpreter("3.13", InterpreterSearch.from_environ(os.environ))
    subprocess.run([uv, "venv", "--clear", "--quiet", "--python", str(base), str(VENV)], check=True)
    # built from a copy: an in-tree build/ would appear under tests/ while other workers
    # copy the repository (the CDK assets)
    with tempfile.TemporaryDirectory() as scratch:
        source = shutil.copytree(
            PLUGIN,
            Path(scratch) / PLUGIN.name,
            ignore=shutil.ignore_patterns("build", "*.egg-info"),
        )
        subprocess.run(
            [uv, "pip", "install", "--quiet", "--python", str(python), "--reinstall-package",
             "swegreen-localstack-offline", str(source)],
            check=True,
        )  # fmt: skip
    stamp.write_text(digest)
    return python


def filesystem_root(root: Path) -> Path:
    """LocalStack's FILESYSTEM_ROOT with its Java and DynamoDB Local already in place."""
    lib = root / "usr" / "lib" / "localstack"
    java = shutil.which("java")
    javac = shutil.which("javac")
    if java is None or javac is None:
        raise FileNotFoundError("LocalStack's DynamoDB needs a JDK 17+ (java, javac) on PATH")
    (lib / "java").mkdir(parents=True, exist_ok=True)
    (lib / "java" / "21").symlink_to(Path(java).resolve().parent.parent)
    ddb = lib / "dynamodb-local" / "2"
    shutil.copytree(dynamodb_local_jar().parent, ddb)
    agent = root / "noop-agent"
    agent.mkdir()
    (agent / "NoopAgent.java").write_text(NOOP_AGENT)
    (agent / "manifest.txt").write_text("Premain-Class: NoopAgent\n")
    subprocess.run([javac, "-d", str(agent), str(agent / "NoopAgent.java")], check=True)
    jar = Path(javac).resolve().parent / "jar"
    subprocess.run(
        [jar, "cfm", str(ddb / "ddb-local-loader-0.1.jar"), str(agent / "manifest.txt"),
         "-C", str(agent), "NoopAgent.class"],
        check=True,
    )  # fmt: skip
    return root


class LocalStack:
    def __init__(self, workdir: Path, lambda_python: Path) -> None:
        self.workdir = workdir
        self.lambda_python = lambda_python
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / "localstack.log"

    def __enter__(self) -> LocalStack:
        python = localstack_python()
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.workdir),
            # Unzipped Lambda code goes to $TMPDIR/lambda: keep it in the test's folder.
            "TMPDIR": str(self.workdir),
            "SSL_CERT_FILE": os.environ.get("SSL_CERT_FILE", ""),
            "OVERRIDE_IN_DOCKER": "0",
            "FILESYSTEM_ROOT": str(filesystem_root(self.workdir / "fs")),
            "GATEWAY_LISTEN": f"127.0.0.1:{self.port}",
            "DISABLE_EVENTS": "1",
            "SKIP_SSL_CERT_DOWNLOAD": "1",
            "DNS_ADDRESS": "0",
            "LAMBDA_RUNTIME_EXECUTOR": "local-process",
            "SWEGREEN_LAMBDA_PYTHON": str(self.lambda_python),
            "SWEGREEN_LAMBDA_BOOTSTRAP": str(BOOTSTRAP),
        }
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(python), "-m", "localstack.runtime.main"],
                cwd=self.workdir,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            # a loaded machine starts it slowly: waited for while its log grows
            wait_for(
                f"{self.endpoint}/_localstack/health",
                timeout=180,
                proc=self.proc,
                progress=lambda: self.log.stat().st_size,
            )
        except (RuntimeError, TimeoutError) as exc:
            self.__exit__()
            raise RuntimeError(
                f"LocalStack did not start:\n{self.log.read_text()[-3000:]}"
            ) from exc
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def client(self, service: str) -> Any:
        return boto3.client(service, endpoint_url=self.endpoint, region_name=REGION, **CREDENTIALS)

    def api_url(self, api_url_output: str) -> str:
        """The stage URL of a deployed API, in LocalStack's path form (no DNS needed)."""
        api_id = httpx.URL(api_url_output).host.split(".")[0]
        return f"{self.endpoint}/restapis/{api_id}/v1/_user_request_/"

    def deploy(self, assembly: Path, stack: str) -> dict[str, str]:
        """``cdk deploy`` as LocalStack allows it: assets and the (too large to inline)
        template into the bootstrap bucket, then CreateStack from the template's URL."""
        manifest = json.loads((assembly / f"{stack}.assets.json").read_text())
        s3 = self.client("s3")
        template_url = ""
        for asset in manifest.get("files", {}).values():
            source = assembly / asset["source"]["path"]
            if source.name == f"{stack}.template.json":
                body = json.dumps(community_template(json.loads(source.read_text()))).encode()
            elif asset["source"].get("packaging") == "zip":
                body = zip_dir(source)
            else:
                body = source.read_bytes()
            for dest in asset["destinations"].values():
                bucket = dest["bucketName"].replace("${AWS::AccountId}", ACCOUNT)
                bucket = bucket.replace("${AWS::Region}", REGION)
                with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
                    s3.create_bucket(Bucket=bucket)
                s3.put_object(Bucket=bucket, Key=dest["objectKey"], Body=body)
                if source.name == f"{stack}.template.json":
                    template_url = f"{self.endpoint}/{bucket}/{dest['objectKey']}"
        self.client("ssm").put_parameter(
            Name="/cdk-bootstrap/hnb659fds/version", Value="30", Type="String", Overwrite=True
        )
        cfn = self.client("cloudformation")
        cfn.create_stack(StackName=stack, TemplateURL=template_url, Capabilities=["CAPABILITY_IAM"])
        # 300 s without a resource made is a stuck deploy; a slow one goes on
        deadline, made = time.monotonic() + 300, -1
        while True:
            described = cfn.describe_stacks(StackName=stack)["Stacks"][0]
            if not described["StackStatus"].endswith("IN_PROGRESS"):
                break
            events = len(cfn.describe_stack_events(StackName=stack)["StackEvents"])
            if events != made:
                deadline, made = time.monotonic() + 300, events
            if time.monotonic() > deadline:
                raise TimeoutError(f"stack {stack} still {described['StackStatus']}")
            time.sleep(1.0)
        if described["StackStatus"] != "CREATE_COMPLETE":
            failed = [
                f"{e['LogicalResourceId']}: {e.get('ResourceStatusReason', '')}"
                for e in cfn.describe_stack_events(StackName=stack)["StackEvents"]
                if e["ResourceStatus"] == "CREATE_FAILED"
            ]
            raise RuntimeError(f"stack {stack}: {described['StackStatus']}\n" + "\n".join(failed))
        return {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}


def community_template(template: dict[str, Any]) -> dict[str, Any]:
    """The stack without what LocalStack community lacks (see the module's docstring)."""
    resources = template["Resources"]
    fake = {
        name: f"arn:aws:{r['Type'].split('::')[1].lower()}:{REGION}:{ACCOUNT}:absent/{name}"
        for name, r in resources.items()
        if r["Type"].startswith(ABSENT)
    }
    for name in fake:
        del resources[name]

    def patch(node: Any) -> Any:
        if isinstance(node, dict):
            if set(node) == {"Ref"} and node["Ref"] in fake:
                return fake[node["Ref"]]
            if set(node) == {"Fn::GetAtt"} and node["Fn::GetAtt"][0] in fake:
                return fake[node["Fn::GetAtt"][0]]
            return {k: patch(v) for k, v in node.items()}
        if isinstance(node, list):
            return [patch(v) for v in node]
        if isinstance(node, str):
            return TOLERATED.sub(r"\1.0", node)
        return node

    for resource in resources.values():
        depends = resource.get("DependsOn")
        if depends is not None:
            depends = [depends] if isinstance(depends, str) else depends
            resource["DependsOn"] = [d for d in depends if d not in fake]
    return patch(template)
