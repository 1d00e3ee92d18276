"""The green agent's own model: short plain-language diagnoses and a run summary.

Only outside the grading path: a verdict is decided by the official grader and the
decision tree, never by a model. The model is optional; when it cannot be reached the
run goes on and says so once (``unavailable``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from swegreen.core.results import InstanceResult
from swegreen.core.scrub import NO_SCRUBBING, Scrub

DIAGNOSIS_PROMPT = """\
You review an automated evaluation of a coding agent's patch for the SWE-bench instance
{instance_id}. The verdict is final; explain it, in at most three sentences, to the
agent's developer: what most likely went wrong. Do not speculate beyond the evidence.

Verdict: {status} (reason: {reason})
F2P tests passing: {f2p_passed}/{f2p_total}; P2P tests passing: {p2p_passed}/{p2p_total}
Failing F2P tests: {f2p_failing}
Failing P2P tests: {p2p_failing}
Detail: {detail}

End of the test log:
{log_tail}
"""
SUMMARY_PROMPT = """\
Summarize this SWE-bench Verified evaluation of a coding agent for its developer in at
most four sentences (what it solved, what kinds of failures dominate). Numbers:
{numbers}
"""


@dataclass
class Diagnoser:
    """Asks ``model`` (any litellm model) for diagnoses; one failure disables it for the run."""

    model: str
    timeout: float = 90.0
    mock_response: str | None = None  # litellm's own mock, for offline demos and tests
    scrub: Scrub = NO_SCRUBBING  # the host's secrets never reach the model
    unavailable: str | None = None
    calls: int = field(default=0)

    async def diagnose(self, row: InstanceResult, log_tail: str) -> str | None:
        prompt = DIAGNOSIS_PROMPT.format(
            instance_id=row.instance_id,
            status=row.status.value,
            reason=row.reason,
            f2p_passed=row.f2p_passed,
            f2p_total=row.f2p_total,
            p2p_passed=row.p2p_passed,
            p2p_total=row.p2p_total,
            f2p_failing=", ".join(row.f2p_failing[:10]) or "none",
            p2p_failing=", ".join(row.p2p_failing[:10]) or "none",
            detail=row.detail[:1500],
            log_tail=log_tail[-3000:] or "(no test log)",
        )
        return await self._ask(prompt)

    async def summarize(self, numbers: dict[str, Any]) -> str | None:
        return await self._ask(SUMMARY_PROMPT.format(numbers=numbers))

    async def _ask(self, prompt: str) -> str | None:
        if self.unavailable is not None:
            return None
        try:
            import litellm  # heavy; only when a diagnosis is asked for
        except ImportError:  # the green-docker image leaves it out (container/)
            self.unavailable = (
                f"{self.model} unavailable: litellm is not installed here (the green-docker "
                "image leaves it out; the green-agent image has it)"
            )
            return None
        self.calls += 1
        try:
            response = await asyncio.wait_for(
                litellm.acompletion(
                    model=self.model,
                    messages=[{"role": "user", "content": self.scrub(prompt)}],
                    mock_response=self.mock_response,
                    timeout=self.timeout,
                    max_tokens=300,
                ),
                self.timeout + 5,
            )
            text = response.choices[0].message.content or ""
            return text.strip() or None
        except Exception as exc:  # unreachable model, bad key, timeout: diagnoses are optional
            self.unavailable = f"{self.model} unavailable ({type(exc).__name__}: {str(exc)[:200]})"
            return None
