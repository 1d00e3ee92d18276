"""The CDK app: ``cdk synth`` / ``cdk deploy`` (see docs/aws.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root

import aws_cdk as cdk

from infra.settings import StackSettings
from infra.stack import SweGreenStack


def main() -> None:
    app = cdk.App()
    env = None
    if os.environ.get("CDK_DEFAULT_ACCOUNT"):
        env = cdk.Environment(
            account=os.environ["CDK_DEFAULT_ACCOUNT"], region=os.environ.get("CDK_DEFAULT_REGION")
        )
    SweGreenStack(app, "SweGreen", settings=StackSettings.from_context(app.node), env=env)
    app.synth()


if __name__ == "__main__":
    main()
