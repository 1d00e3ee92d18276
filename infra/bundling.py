"""Building the Lambda code asset without Docker: pip installs manylinux wheels for the
Lambda runtime into a cached directory, and the handlers plus the core library are copied
beside them (its recipes and the sample's included: Resolve and Presign name the prebuilt
artifacts a row needs)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import jsii
from aws_cdk import AssetHashType, BundlingOptions, ILocalBundling
from aws_cdk import aws_lambda as lambda_

ROOT = Path(__file__).resolve().parents[1]
# Light by design: the grader and its dependencies run in the sandbox container.
LAMBDA_REQUIREMENTS = (
    "boto3>=1.34",  # bundled, not the runtime's: the version the code was tested with
    "pydantic>=2.7,<3",
    "aws-lambda-powertools[tracer,parser]>=3,<4",
    "httpx>=0.27",
    "a2a-sdk>=1.3,<2",
)
PYTHON_VERSION = "3.12"
PLATFORM = "manylinux2014_x86_64"
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc")


def sources_hash() -> str:
    """The asset's identity: handlers, library sources and requirements."""
    h = hashlib.sha256("\n".join(LAMBDA_REQUIREMENTS).encode())
    for base in (ROOT / "functions", ROOT / "shared" / "swegreen"):
        for path in sorted(base.rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            h.update(str(path.relative_to(ROOT)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


@jsii.implements(ILocalBundling)
class LambdaBundler:
    def __init__(self, cache_dir: Path | None = None) -> None:
        self.cache_dir = cache_dir or ROOT / "build" / "lambda-deps"

    def try_bundle(self, output_dir: str, *, image: object, **_options: object) -> bool:
        out = Path(output_dir)
        shutil.copytree(self._dependencies(), out, dirs_exist_ok=True)
        for handler in (ROOT / "functions").glob("*.py"):
            shutil.copy2(handler, out / handler.name)
        shutil.copytree(
            ROOT / "shared" / "swegreen", out / "swegreen", ignore=SKIP, dirs_exist_ok=True
        )
        return True

    def _dependencies(self) -> Path:
        key = hashlib.sha256("\n".join([*LAMBDA_REQUIREMENTS, PYTHON_VERSION, PLATFORM]).encode())
        target = self.cache_dir / key.hexdigest()[:16]
        if not (target / ".complete").exists():
            shutil.rmtree(target, ignore_errors=True)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--target",
                    str(target),
                    "--platform",
                    PLATFORM,
                    "--implementation",
                    "cp",
                    "--python-version",
                    PYTHON_VERSION,
                    "--only-binary=:all:",
                    *LAMBDA_REQUIREMENTS,
                ],
                check=True,
            )
            (target / ".complete").write_text("")
        return target


def lambda_code() -> lambda_.Code:
    """The one code asset of every function (the same hash: one asset in the assembly)."""
    return lambda_.Code.from_asset(
        str(ROOT / "functions"),
        asset_hash_type=AssetHashType.CUSTOM,
        asset_hash=sources_hash(),
        bundling=BundlingOptions(
            image=lambda_.Runtime.PYTHON_3_12.bundling_image, local=LambdaBundler()
        ),
    )
