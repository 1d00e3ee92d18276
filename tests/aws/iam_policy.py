"""The synthesized template's IAM policies, evaluated as AWS evaluates them for S3, and
put in front of a moto S3 client: the emulators enforce no IAM, so this is how the tests
see what a function's calls get on a real account.

Evaluation: an explicit Deny wins, else any Allow whose action, resource and conditions
match; nothing else is allowed. S3's rule for a missing object (GetObject, HeadObject):
404 only where the caller may also ``s3:ListBucket`` the bucket (here: with ``s3:prefix``
the object's key), else 403 AccessDenied, which is what a function without the list grant
gets on a real account for every object that is not there.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from botocore.awsrequest import AWSResponse

# What each S3 call is, to IAM: (action, on the object or the bucket)
S3_ACTIONS = {
    "GetObject": ("s3:GetObject", "object"),
    "HeadObject": ("s3:GetObject", "object"),
    "PutObject": ("s3:PutObject", "object"),
    "DeleteObject": ("s3:DeleteObject", "object"),
    "ListObjectsV2": ("s3:ListBucket", "bucket"),
    "ListObjects": ("s3:ListBucket", "bucket"),
}


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def render(value: Any, names: dict[str, str]) -> str:
    """A policy's resource with its intrinsics resolved: ``names`` maps a logical id to
    what its Ref gives; an ARN GetAtt of a bucket is its ARN; anything else a placeholder
    that matches nothing real."""
    if isinstance(value, str):
        return value
    if "Ref" in value:
        return names.get(value["Ref"], f"<{value['Ref']}>")
    if "Fn::GetAtt" in value:
        logical, attribute = value["Fn::GetAtt"]
        if attribute == "Arn" and logical in names:
            return f"arn:aws:s3:::{names[logical]}"
        return f"<{logical}.{attribute}>"
    if "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return sep.join(render(p, names) for p in parts)
    return "<intrinsic>"


def role_statements(template: dict[str, Any], function: str) -> list[dict[str, Any]]:
    """Every statement of the policies attached to the role of the Lambda function whose
    logical id starts with ``function``."""
    resources = template["Resources"]
    (fn,) = [
        v
        for k, v in resources.items()
        if k.startswith(function) and v["Type"] == "AWS::Lambda::Function"
    ]
    role = fn["Properties"]["Role"]["Fn::GetAtt"][0]
    return [
        statement
        for v in resources.values()
        if v["Type"] == "AWS::IAM::Policy" and {"Ref": role} in v["Properties"]["Roles"]
        for statement in v["Properties"]["PolicyDocument"]["Statement"]
    ]


def _matches(patterns: Any, value: str) -> bool:
    return any(fnmatch.fnmatchcase(value, p) for p in _listed(patterns))


def _conditions(block: dict[str, Any], context: dict[str, str]) -> bool:
    for operator, tests in block.items():
        for key, wanted in tests.items():
            if key not in context:
                return False
            if operator == "StringLike":
                ok = _matches(wanted, context[key])
            elif operator == "StringEquals":
                ok = context[key] in _listed(wanted)
            else:
                raise NotImplementedError(f"condition operator {operator}")
            if not ok:
                return False
    return True


def _applies(
    statement: dict[str, Any], action: str, resource: str, context: dict[str, str], names: dict
) -> bool:
    if "Action" in statement and not _matches(statement["Action"], action):
        return False
    if "NotAction" in statement and _matches(statement["NotAction"], action):
        return False
    listed = [render(r, names) for r in _listed(statement.get("Resource", "*"))]
    if "NotResource" in statement:
        listed = [render(r, names) for r in _listed(statement["NotResource"])]
        if _matches(listed, resource):
            return False
    elif not _matches(listed, resource):
        return False
    return _conditions(statement.get("Condition", {}), context)


def allowed(
    statements: list[dict[str, Any]],
    action: str,
    resource: str,
    names: dict[str, str],
    context: dict[str, str] | None = None,
) -> bool:
    """Whether ``action`` on ``resource`` is allowed by ``statements``."""
    context = context or {}
    hits = [s for s in statements if _applies(s, action, resource, context, names)]
    return not any(s["Effect"] == "Deny" for s in hits) and any(
        s["Effect"] == "Allow" for s in hits
    )


def _error(code: str, status: int, message: str) -> tuple[AWSResponse, dict[str, Any]]:
    http = AWSResponse("https://s3.invalid/", status, {}, None)
    parsed = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return http, parsed


class Enforced:
    """A moto S3 client that answers as a real account would answer the role holding
    ``statements``. ``denied`` records each refusal (operation, key)."""

    def __init__(self, client: Any, statements: list[dict[str, Any]], names: dict[str, str]):
        self.client = client
        self.statements = statements
        self.names = names
        self.denied: list[tuple[str, str]] = []
        events = client.meta.events
        events.register("before-parameter-build.s3.*", self._keep_params)
        events.register("before-call.s3.*", self._judge)

    @staticmethod
    def _keep_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["iam_params"] = dict(params)

    def _may(self, action: str, resource: str, context: dict[str, str] | None = None) -> bool:
        return allowed(self.statements, action, resource, self.names, context)

    def _exists(self, bucket: str, key: str) -> bool:
        found = self.client.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
        return any(o["Key"] == key for o in found.get("Contents", []))

    def _judge(self, model: Any, context: dict[str, Any], **_: Any) -> Any:
        name = model.name
        if name not in S3_ACTIONS:
            return None
        params = context.get("iam_params", {})
        bucket, key = params.get("Bucket", ""), params.get("Key", "")
        action, on = S3_ACTIONS[name]
        if on == "bucket":
            ok = self._may(
                action, f"arn:aws:s3:::{bucket}", {"s3:prefix": params.get("Prefix", "")}
            )
        else:
            ok = self._may(action, f"arn:aws:s3:::{bucket}/{key}")
            if ok and action == "s3:GetObject":
                present = self._unjudged(lambda: self._exists(bucket, key))
                if not present and not self._may(
                    "s3:ListBucket", f"arn:aws:s3:::{bucket}", {"s3:prefix": key}
                ):
                    ok = False  # S3's answer for a missing object the caller may not list
        if ok:
            return None
        self.denied.append((name, key))
        return _error("AccessDenied", 403, f"not allowed: {action} on {bucket}/{key}")

    def _unjudged(self, call: Any) -> Any:
        events = self.client.meta.events
        events.unregister("before-call.s3.*", self._judge)
        try:
            return call()
        finally:
            events.register("before-call.s3.*", self._judge)


def data_bucket(template: dict[str, Any], bucket_name: str) -> dict[str, str]:
    """The stack's bucket (the one the functions are told of) as ``bucket_name``."""
    for v in template["Resources"].values():
        if v["Type"] == "AWS::Lambda::Function":
            ref = v["Properties"]["Environment"]["Variables"].get("SWEGREEN_BUCKET")
            if isinstance(ref, dict) and "Ref" in ref:
                return {ref["Ref"]: bucket_name}
    raise AssertionError("no function is told of a bucket")
