"""Per-request ceilings of the deployed pipeline: what one request may cost at most.

A request is the AgentBeats platform's, or anyone's holding the API's credentials; its
config decides how many Fargate tasks run at once and for how long. The stack's owner sets
ceilings (the ``swegreen:guardrails`` context key, a JSON object of this model's fields);
the API Gateway refuses a body above them with a 400 (its JSON schema,
``config_schema``), and Resolve checks them again with what only it knows (the number of
rows, for the run's worst-case task-hours), so a run started any other way (the Step
Functions console) is held to them too.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# What a row may take beyond its eval script in the worst case (task start, downloads,
# retries): the pipeline's own ROW_OVERHEAD_SECONDS.
WORST_ROW_OVERHEAD_SECONDS = 1800
DEFAULT_EVAL_SECONDS = 1800  # the official harness's, when neither request nor recipe says


class Guardrails(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_concurrent_rows: int = Field(200, ge=1, le=10_000)
    max_eval_timeout: float = Field(7200, gt=0, le=3 * 3600)  # a task runs 3 h at most
    max_participant_timeout: float = Field(7200, gt=0)
    max_task_hours: float = Field(2000, gt=0)

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Guardrails:
        return cls.model_validate(json.loads(env.get("SWEGREEN_GUARDRAILS", "{}")))

    def config_schema(self) -> dict[str, Any]:
        """The draft-04 schema of ``config`` the API Gateway validates bodies against."""
        return {
            "type": "object",
            "properties": {
                "max_concurrent_rows": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": self.max_concurrent_rows,
                },
                "eval_timeout": {
                    "type": ["number", "null"],
                    "maximum": self.max_eval_timeout,
                },
                "participant_timeout": {
                    "type": "number",
                    "maximum": self.max_participant_timeout,
                },
            },
        }

    def check(
        self,
        *,
        max_concurrent_rows: int,
        eval_timeout: float | None,
        participant_timeout: float,
        rows: int,
        participant: bool,
    ) -> None:
        """Refuse a run above a ceiling, saying which and how to get under it."""
        asked = [
            ("max_concurrent_rows", max_concurrent_rows, "max_concurrent_rows"),
            ("eval_timeout", eval_timeout or 0, "max_eval_timeout"),
            ("participant_timeout", participant_timeout, "max_participant_timeout"),
        ]
        for key, value, field in asked:
            ceiling = getattr(self, field)
            if value > ceiling:
                raise ValueError(
                    f"{key} {value:g} is over this deployment's ceiling of {ceiling:g} "
                    f"(stack context swegreen:guardrails, {field}); ask for less"
                )
        per_row = (eval_timeout or DEFAULT_EVAL_SECONDS) + WORST_ROW_OVERHEAD_SECONDS
        hours = rows * per_row / 3600
        if hours > self.max_task_hours:
            raise ValueError(
                f"the run's worst case is {hours:.0f} task-hours ({rows} rows of up to "
                f"{per_row / 3600:.2f} h each), over this deployment's ceiling of "
                f"{self.max_task_hours:g} (stack context swegreen:guardrails, "
                "max_task_hours); select fewer rows (max_rows, instance_ids) or a shorter "
                "eval_timeout"
                + (" (the participant's own time is not counted)" if participant else "")
            )
