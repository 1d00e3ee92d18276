"""The aws backend's client settings and how it words a failed run."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from swegreen.aws.front_door_client import FrontDoorError, FrontDoorSettings, failure_message


def test_the_signing_region_comes_from_the_api_host_unless_given() -> None:
    url = "https://abc123.execute-api.eu-west-3.amazonaws.com/v1"
    settings = FrontDoorSettings(url=url)
    assert settings.url.endswith("/v1/")
    assert settings.signing_region() == "eu-west-3"
    assert FrontDoorSettings(url=url, region="us-east-2").signing_region() == "us-east-2"
    with pytest.raises(FrontDoorError, match="--api-region"):
        FrontDoorSettings(url="http://127.0.0.1:4566/restapis/x/v1/").signing_region()


@pytest.mark.parametrize("field", [{"url": "ftp://x"}, {"url": "http://x", "poll_seconds": 0}])
def test_bad_settings_are_refused(field: dict) -> None:
    with pytest.raises(ValidationError):
        FrontDoorSettings(**field)


def test_a_lambda_error_document_becomes_one_line() -> None:
    doc = {"errorType": "DatasetError", "errorMessage": "no such file", "stackTrace": ["..."]}
    assert failure_message(json.dumps(doc)) == "DatasetError: no such file"
    assert failure_message("States.Timeout after 3600 s") == "States.Timeout after 3600 s"
    assert failure_message("[1, 2]") == "[1, 2]"
