"""The assessment request AgentBeats sends: ``{"participants": {role: url}, "config": {...}}``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from swegreen.core.config import EvalConfig, build_config
from swegreen.core.errors import ConfigError, SweGreenError
from swegreen.core.ids import check_id


class RequestError(SweGreenError):
    """The request cannot be run; the message says what to fix."""


class AssessmentRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    participants: dict[str, str]
    config: dict[str, Any] = {}

    @field_validator("participants")
    @classmethod
    def _urls(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError('name at least one participant: {"agent": "http://host:port"}')
        for role, url in value.items():
            check_id(role, "participant role")  # it names the participant's run
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"participant {role!r} has no http(s) URL: {url!r}")
        return value


def parse_request(text: str, defaults: Mapping[str, Any]) -> tuple[AssessmentRequest, EvalConfig]:
    """Validate the request's JSON and its config (over the server's defaults)."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(
            f"the request is not JSON ({exc.msg} at line {exc.lineno}); send "
            '{"participants": {"agent": "http://..."}, "config": {...}}'
        ) from None
    if not isinstance(raw, dict):
        raise RequestError("the request must be a JSON object with 'participants' and 'config'")
    try:
        request = AssessmentRequest.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise RequestError(f"invalid request: {problems}") from None
    try:
        config = build_config(("server defaults", defaults), ("request config", request.config))
    except ConfigError as exc:
        raise RequestError(str(exc)) from None
    server = build_config(("server defaults", defaults))
    for key in ("isolation", "environments"):
        # Who runs the green agent decides how participant code is sandboxed, not a request.
        if getattr(config, key) != getattr(server, key):
            raise RequestError(
                f"config key {key!r} is the green agent host's setting "
                f"({getattr(server, key)!r}); a request cannot change it (set it where the "
                f"server starts: its scenario.toml or SWEGREEN_{key.upper()} instead)"
            )
    return request, config
