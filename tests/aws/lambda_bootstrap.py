"""A Lambda runtime stand-in: imports the handler from the deployed package and calls it.

Run as ``python3.12 -I lambda_bootstrap.py`` in the unzipped code (Lambda's /var/task),
the event on stdin. Writes the JSON result, or Lambda's error document (and exits 1), to the
file ``EMULATOR_RESULT``: stdout is the function's log, as in Lambda. ``EMULATOR_FAULT`` (the
test's fault injection, never set by the product) names an instance id whose invocation
throws before the handler runs, as a crashed function would.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
import uuid


class Context:
    def __init__(self) -> None:
        self.function_name = os.environ["AWS_LAMBDA_FUNCTION_NAME"]
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"))
        self.invoked_function_arn = os.environ["EMULATOR_FUNCTION_ARN"]
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "emulator"
        self._deadline = time.monotonic() + float(
            os.environ.get("AWS_LAMBDA_FUNCTION_TIMEOUT", "3")
        )

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def main() -> int:
    sys.path.insert(0, os.getcwd())  # /var/task comes first, as in Lambda
    event = json.load(sys.stdin)
    module_name, function_name = os.environ["_HANDLER"].rsplit(".", 1)
    try:
        item = event.get("item") or {}
        row = f"{item.get('run_id')}/{item.get('instance_id')}"
        if row in json.loads(os.environ.get("EMULATOR_FAULTS", "[]")):
            raise RuntimeError(f"injected fault: {module_name} crashed on {row}")
        handler = getattr(importlib.import_module(module_name), function_name)
        result = handler(event, Context())
    except Exception as exc:
        error = {
            "errorMessage": str(exc),
            "errorType": type(exc).__name__,
            "stackTrace": traceback.format_tb(exc.__traceback__),
        }
        traceback.print_exc()
        _answer(error)
        return 1
    _answer(result)
    return 0


def _answer(document: object) -> None:
    with open(os.environ["EMULATOR_RESULT"], "w") as out:
        json.dump(document, out)


if __name__ == "__main__":
    sys.exit(main())
