"""``POST /runs``'s body, and where predictions files live: what the API's client checks
before it sends (it imports no AWS SDK: the green agent's image has none) and what the
pipeline validates again (pipeline.models re-exports it)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swegreen.core.ids import check_id

# Where predictions files live in the bucket: the functions may read them there only.
PREDICTIONS_PREFIX = "predictions/"
PATCHES_PATTERN = r"^(gold|empty|predictions/.+)$"


class RunRequest(BaseModel):
    """``POST /runs``'s body: the green agent's assessment request, or a patch source."""

    model_config = ConfigDict(extra="forbid")

    participants: dict[str, str] = Field(default_factory=dict)
    patches: str | None = Field(
        None,
        min_length=1,
        description="gold, empty, or the S3 key of a predictions file under predictions/",
    )
    config: dict[str, Any] = Field(default_factory=dict)
    rebuild_envs: bool = Field(
        False, description="build again the environments whose earlier build failed"
    )
    batch: bool | None = Field(
        None,
        description="evaluate several rows per sandbox task (a task's start is paid once "
        "for them); default: yes when the patches are known up front (gold, empty, a "
        "predictions file), no for A2A participants (each row's patch comes when it comes)",
    )
    dry_run: bool = Field(
        False,
        description="only resolve the run: its rows, the quotas' concurrency and the "
        "estimate of its time and cost (GET /runs/{id}), nothing built or evaluated",
    )

    @model_validator(mode="after")
    def _one_source(self) -> RunRequest:
        if bool(self.participants) == bool(self.patches):
            raise ValueError(
                "give either participants (A2A URLs) or patches (gold, empty, an S3 key)"
            )
        if self.patches and not re.match(PATCHES_PATTERN, self.patches):
            raise ValueError(
                f"patches {self.patches!r}: give gold, empty, or the key of a predictions "
                f"file under {PREDICTIONS_PREFIX} in the stack's bucket (PUT /predictions "
                f"keeps one there; or aws s3 cp FILE s3://<bucket>/{PREDICTIONS_PREFIX}NAME)"
            )
        if len(self.participants) > 1:
            raise ValueError("a run evaluates one participant; start one run per participant")
        for role, url in self.participants.items():
            check_id(role, "participant role")
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"participant {role!r}: {url!r} is not an http(s) URL")
        return self
