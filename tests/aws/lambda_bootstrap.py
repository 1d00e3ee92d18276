"""A Lambda runtime stand-in: a warm execution environment. It imports the handler from the
deployed package once and calls it for every invocation it is given, as Lambda reuses an
environment (module-level state, such as the handlers' cached clients, carries over).

Run as ``python3.12 -I lambda_bootstrap.py`` in the unzipped code (Lambda's /var/task).
With ``EMULATOR_RESPONSE_FD`` set (tests/aws/emulator.py), each invocation is one JSON line
on stdin, ``{"event", "result", "faults"}``: the handler's result, or Lambda's error
document, is written to the file ``result``, then one line, ``ok`` or ``error``, to that
file descriptor. Without it (the LocalStack executor), one invocation: the event is stdin,
the result goes to the file ``EMULATOR_RESULT``, and the exit status is 1 on an error.
stdout is the function's log, as in Lambda. ``faults`` (the test's fault injection, never
set by the product) name ``run_id/instance_id`` rows whose invocation throws before the
handler runs, as a crashed function would.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
import uuid
from typing import Any


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


def invoke(request: dict[str, Any], handler_name: str) -> bool:
    module_name, function_name = handler_name.rsplit(".", 1)
    event = request["event"]
    try:
        item = (event.get("item") if isinstance(event, dict) else None) or {}
        row = f"{item.get('run_id')}/{item.get('instance_id')}"
        if row in request.get("faults", []):
            raise RuntimeError(f"injected fault: {module_name} crashed on {row}")
        handler = getattr(importlib.import_module(module_name), function_name)
        result = handler(event, Context())
    except Exception as exc:
        traceback.print_exc()
        _answer(
            request["result"],
            {
                "errorMessage": str(exc),
                "errorType": type(exc).__name__,
                "stackTrace": traceback.format_tb(exc.__traceback__),
            },
        )
        return False
    _answer(request["result"], result)
    return True


def main() -> int:
    sys.path.insert(0, os.getcwd())  # /var/task comes first, as in Lambda
    if "EMULATOR_RESPONSE_FD" not in os.environ:
        request = {"event": json.load(sys.stdin), "result": os.environ["EMULATOR_RESULT"]}
        return 0 if invoke(request, os.environ["_HANDLER"]) else 1
    responses = int(os.environ["EMULATOR_RESPONSE_FD"])
    for line in sys.stdin:
        ok = invoke(json.loads(line), os.environ["_HANDLER"])
        sys.stdout.flush()
        sys.stderr.flush()
        os.write(responses, b"ok\n" if ok else b"error\n")
    return 0


def _answer(path: str, document: object) -> None:
    with open(path, "w") as out:
        json.dump(document, out)


if __name__ == "__main__":
    sys.exit(main())
