"""Participants that already exist, unchanged: doubles of five public SWE-bench
participants (tests/a2a/contracts.py, written from reading their code), served over A2A on
127.0.0.1 by a2a-sdk 1.x and by 0.3, given sample tasks by the real green agent with its
shipped defaults, and each resolving them with the gold patch.

A dialect the request asks for or a card declares is still served; a participant given a
shape it cannot read is an ``error`` in its own words.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2a.helpers import new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.types import AgentExtension, AgentSkill
from google.protobuf.struct_pb2 import Struct

from swegreen.agent.server import agent_card, build_app, open_task
from swegreen.core.dataset import load_dataset
from swegreen.core.task_dialects import EXTENSION_URI
from swegreen.sample import SampleBenchmark
from tests.a2a.contracts import CONTRACTS, CONTRACTS_V03, Contract
from tests.helpers import Server, free_port, serving, start, stop, wait_for_card
from tests.test_agent import Outcome, assess

ROOT = Path(__file__).resolve().parents[1]
INSTANCE = "sample__calculator-2"
ONE_PER_REPO = ["sample__calculator-1", "sample__ledger-1", "sample__textkit-1"]


class Double(AgentExecutor):
    """A contract served by a2a-sdk 1.x."""

    def __init__(self, contract: Contract) -> None:
        self.contract = contract

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        _task, updater = await open_task(context, event_queue)
        texts = [p.text for p in context.message.parts if p.WhichOneof("content") == "text"]
        reply = await asyncio.to_thread(self.contract.answer, context.context_id, texts)
        if reply.how == "failed":
            await updater.failed(updater.new_agent_message([new_text_part(reply.text)]))
        elif reply.how == "status":
            await updater.complete(updater.new_agent_message([new_text_part(reply.text)]))
        else:
            await updater.add_artifact([new_text_part(reply.text)], name=reply.name)
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


def gold_patches(sample: SampleBenchmark) -> dict[str, str]:
    return {i.instance_id: i.patch for i in load_dataset(str(sample.dataset)).instances}


# where each contract's reply puts its patch, as the row records it
REPLIES = {
    "mini": "status message: bare diff",
    "purple": "artifact: JSON text part 'patch'",
    "tagged": "artifact: <patch> tag",
    "agentswe": "artifact: bare diff",
    "pro": "artifact: JSON text part 'patch'",
    "agentswe_waiting": "artifact: bare diff",
}


def check_rows(rows: dict[str, Any], expected: dict[str, tuple[str, str]], count: int) -> None:
    """Each role's rows resolved, with its dialect, what chose it and the reply's shape."""
    for role, (dialect, chosen_by) in expected.items():
        instances = rows[role]["instances"]
        assert len(instances) == count, (role, instances)
        for row in instances:
            assert (row["status"], row["reason"]) == ("resolved", "all_tests_pass"), (role, row)
            conversation = row["conversation"]
            assert conversation["dialect"] == dialect, (role, conversation)
            assert conversation["dialect_chosen_by"] == chosen_by, (role, conversation)
            assert conversation["reply"] == REPLIES[role], (role, conversation)
    for role in {"agentswe", "agentswe_waiting"} & set(expected):
        for turns in rows[role]["instances"]:
            assert turns["conversation"]["turns"] == 4, (role, turns)
            assert turns["interaction"]["steps"] == 3  # bash, debug, bash: under the budget


@pytest.fixture(scope="module")
def green(session_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start(["serve"], session_cache, tmp_path_factory.mktemp("green"), "green")
    try:
        yield server
    finally:
        stop([server])


def double(contract: Contract, role: str, url: str, dialect: str | None = None) -> Any:
    """A text-only card, as the public participants publish; ``dialect``: declared with
    the extension."""
    skill = AgentSkill(id="fix", name="fix", description="fixes issues", tags=["swe-bench"])
    card = agent_card(role, "a participant written elsewhere", url, [skill])
    del card.default_input_modes[:]
    card.default_input_modes.append("text")
    if dialect is not None:
        params = Struct()
        params.update({"dialect": dialect})
        card.capabilities.extensions.append(AgentExtension(uri=EXTENSION_URI, params=params))
    return build_app(Double(contract), card)


async def assess_doubles(
    green: Server, contracts: dict[str, Contract], config: dict[str, Any], declared: dict[str, str]
) -> Outcome:
    """The contracts served by a2a-sdk 1.x, assessed by the real green agent on the sample."""
    async with contextlib.AsyncExitStack() as stack:
        participants = {
            role: await stack.enter_async_context(
                serving(lambda url, c=contract, r=role: double(c, r, url, declared.get(r)))
            )
            for role, contract in contracts.items()
        }
        request = {
            "participants": participants,
            "config": {
                "dataset": "swegreen:sample",
                "instance_ids": [INSTANCE],
                "max_concurrent_rows": len(contracts),
                "participant_timeout": 120,
                **config,
            },
        }
        return await assess(green.url, request)


def test_public_participants_work_with_the_shipped_defaults(
    green: Server, sample: SampleBenchmark, tmp_path: Path
) -> None:
    """a2a-sdk 1.x, text-only cards, no dialect asked for: each contract reads the one
    message it gets, and resolves its row."""
    contracts = {name: cls(gold_patches(sample), tmp_path) for name, cls in CONTRACTS.items()}
    rows = asyncio.run(assess_doubles(green, contracts, {}, {})).rows
    assert not any(c.complaints for c in contracts.values()), {
        k: c.complaints for k, c in contracts.items()
    }
    check_rows(rows, {role: ("universal", "default") for role in CONTRACTS}, 1)


def test_a_dialect_asked_for_or_declared_is_still_served(
    green: Server, sample: SampleBenchmark, tmp_path: Path
) -> None:
    """The request's ``task_dialect`` (per role) and a card's extension still choose."""
    roles = ("mini", "tagged", "agentswe")
    contracts = {name: CONTRACTS[name](gold_patches(sample), tmp_path) for name in roles}
    config = {"task_dialect": {"mini": "json", "agentswe": "agentswe"}}
    rows = asyncio.run(assess_doubles(green, contracts, config, {"tagged": "xml"})).rows
    assert not any(c.complaints for c in contracts.values())
    check_rows(
        rows,
        {
            "mini": ("json", "request"),
            "tagged": ("xml", "agent card extension"),
            "agentswe": ("agentswe", "request"),
        },
        1,
    )


def test_a_participant_that_cannot_read_its_task_is_an_error_in_its_own_words(
    green: Server, sample: SampleBenchmark, tmp_path: Path
) -> None:
    """Given a shape it does not read, each says so its own way: a failed task, an
    ``Error`` artifact, prose. Never a ``no_op`` for a task it could not read, and the
    row keeps what it said."""
    roles = ("mini", "pro", "tagged")
    contracts = {name: CONTRACTS[name](gold_patches(sample), tmp_path) for name in roles}
    config = {
        "task_dialect": {"mini": "xml", "pro": "standard", "tagged": "json"},
        "max_evaluator_error_share": 1,  # to see the rows (else: test_stop_rule.py)
    }
    rows = asyncio.run(assess_doubles(green, contracts, config, {})).rows
    assert all(c.complaints for c in contracts.values())
    [mini], [pro], [tagged] = (rows[role]["instances"] for role in roles)
    assert (mini["status"], mini["reason"]) == ("error", "participant_protocol"), mini
    assert "Invalid instance payload: Expected JSON" in mini["detail"], mini
    assert (pro["status"], pro["reason"]) == ("error", "participant_protocol"), pro
    assert "Error: could not parse problem payload" in pro["detail"], pro
    # a reply it made without the repository: its own words, not a protocol failure
    assert (tagged["status"], tagged["reason"]) == ("no_op", "no_patch"), tagged
    assert "I could not find the repository." in tagged["detail"], tagged
    assert rows["mini"]["counts"]["error"] == 1 and rows["mini"]["counts"]["no_op"] == 0


def test_an_agentswe_participant_without_a_workbench_was_never_evaluated(
    green: Server, sample: SampleBenchmark, tmp_path: Path
) -> None:
    """Where no workbench can run its commands (no interactive mode here; process mode
    under Amber), its first ``bash`` turn makes the row an error, not a ``no_op``."""
    contracts = {"agentswe": CONTRACTS["agentswe"](gold_patches(sample), tmp_path)}
    outcome = asyncio.run(assess_doubles(green, contracts, {"interactive": False}, {}))
    # its one row was all the assessment had: the stop rule publishes nothing
    assert outcome.state == "TASK_STATE_FAILED" and outcome.artifacts == [], outcome.statuses
    assert "protocol_unavailable 1" in outcome.statuses[-1], outcome.statuses
    assert "speaks the AgentSWE protocol" in outcome.statuses[-1], outcome.statuses


def test_public_participants_served_by_a2a_0_3_resolve_every_sample_row(
    green: Server, sample: SampleBenchmark, a2a03_python: Path, tmp_path: Path
) -> None:
    """a2a-sdk 0.3, which the public participants use, text-only cards that say nothing
    of dialects, and the shipped defaults: every contract resolves a row of each sample
    repository; so does an AgentSWE agent whose command turns end input-required with the
    artifact after the status."""
    gold = gold_patches(sample)
    (tmp_path / "gold.json").write_text(json.dumps(gold))
    script = ROOT / "tests" / "a2a" / "participant_v03.py"
    running: dict[str, tuple[str, subprocess.Popen[bytes], Path]] = {}
    try:
        for name in CONTRACTS_V03:
            port, log = free_port(), tmp_path / f"{name}.log"
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    [str(a2a03_python), str(script), str(port), name, str(tmp_path / "gold.json"),
                     str(tmp_path)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )  # fmt: skip
            running[name] = (f"http://127.0.0.1:{port}/", proc, log)
        for url, proc, log in running.values():
            wait_for_card(url, proc, log)
        request = {
            "participants": {name: url for name, (url, _, _) in running.items()},
            "config": {
                "dataset": "swegreen:sample",
                "instance_ids": ONE_PER_REPO,
                "max_concurrent_rows": 2,
                "participant_timeout": 120,
            },
        }
        rows = asyncio.run(assess(green.url, request)).rows
    finally:
        for _, proc, _ in running.values():
            proc.terminate()
        for _, proc, _ in running.values():
            proc.wait(timeout=30)
    logs = {name: log.read_text()[-2000:] for name, (_, _, log) in running.items()}
    assert not any("bad task" in text for text in logs.values()), logs
    check_rows(rows, {role: ("universal", "default") for role in CONTRACTS_V03}, len(ONE_PER_REPO))
