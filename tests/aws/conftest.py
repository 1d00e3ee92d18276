"""The AWS pipeline's fixtures: one ``cdk synth`` by the pinned CLI per session (what a user
runs before ``cdk deploy``), and the Python the Lambda runtime uses."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from swegreen.environments.interpreters import InterpreterSearch, find_interpreter
from tests.aws.local_services import FAKE_CREDENTIALS

ROOT = Path(__file__).resolve().parents[2]
STACK = "SweGreen"
# The e2e test polls participants every 5 s instead of the default 30 s.
TEST_CONTEXT = {
    "swegreen:poll_seconds": "5",
    # the emulated runs follow one another within minutes: endpoints go between them as
    # on an account whose runs are hours apart, and a run waits a second, not 30
    "swegreen:endpoint_lease_minutes": "0",
    "swegreen:endpoint_settle_seconds": "1",
}


def cdk_env() -> dict[str, str]:
    return {
        **os.environ,
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        "CDK_DISABLE_CLI_TELEMETRY": "true",
    }


@pytest.fixture(scope="session")
def assembly(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cli = ROOT / "node_modules" / ".bin" / "cdk"
    if not cli.exists():
        pytest.fail("the CDK CLI is not installed: run `make setup` (npm ci for package.json)")
    out = tmp_path_factory.mktemp("cdk") / "cdk.out"
    context = [arg for k, v in TEST_CONTEXT.items() for arg in ("-c", f"{k}={v}")]
    proc = subprocess.run(
        [str(cli), "synth", "--output", str(out), "--quiet", "--no-notices", *context],
        cwd=ROOT,
        env=cdk_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"cdk synth failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return out


@pytest.fixture(scope="session")
def template(assembly: Path) -> dict[str, Any]:
    return json.loads((assembly / f"{STACK}.template.json").read_text())


@pytest.fixture(scope="session")
def lambda_asset(assembly: Path) -> Path:
    """The unzipped Lambda code asset (one for all five functions)."""
    manifest = json.loads((assembly / f"{STACK}.assets.json").read_text())
    zips = [a for a in manifest["files"].values() if a["source"].get("packaging") == "zip"]
    assert len(zips) == 1, f"expected one Lambda code asset, found {len(zips)}"
    return assembly / zips[0]["source"]["path"]


@pytest.fixture(scope="session")
def lambda_python() -> Path:
    """Python 3.12, the Lambda runtime the functions are built for."""
    return find_interpreter("3.12", InterpreterSearch.from_environ(os.environ))


@pytest.fixture
def mocked_s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An S3 client on moto's in-process AWS (fake credentials, no endpoint override)."""
    from moto import mock_aws

    for key, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield boto3.client("s3", region_name="us-east-1")
