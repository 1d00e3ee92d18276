"""The interactive mode's workbench: a sandboxed copy of the sample's prepared workspace
(real bubblewrap, real git, the sample's real environment)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from swegreen.core.dataset import Instance
from swegreen.core.errors import SandboxUnavailable
from swegreen.evaluation.engine import Engine, LocalSettings, build_engine
from swegreen.evaluation.workbench import CAPTURE_CAP, Workbenches
from swegreen.sample import SampleBenchmark
from swegreen.sandbox.isolation import Isolation
from tests.conftest import sample_config, sample_instance

INSTANCE = "sample__calculator-1"


def instance(sample: SampleBenchmark) -> Instance:
    return sample_instance(sample, INSTANCE)


def test_commands_work_in_a_private_copy_that_the_grader_never_sees(
    sample_engine: Engine, sample: SampleBenchmark
) -> None:
    inst = instance(sample)
    testbeds = sample_engine.testbeds

    async def scenario() -> dict[str, object]:
        seen: dict[str, object] = {}
        async with Workbenches(testbeds).open("workbench", inst) as bench:
            workdir = bench.workdir
            run = bench.run
            seen["history"] = (await run("git log --all --oneline | wc -l", 30)).output
            seen["home"] = (await run('touch "$HOME/x" "$TMPDIR/y" && echo writable', 30)).output
            seen["repos"] = (await run(f"ls {testbeds.repos.root}", 30)).output
            await run("python -c 'import calculator'", 30)  # leaves __pycache__ behind
            seen["clean"] = (await run("git status --short", 30)).output
            edit = "sed -i 's/return sum/return 0 + sum/' calculator/stats.py && echo new > NEW.txt"
            assert (await run(edit, 30)).exit_code == 0
            seen["diff"] = (await run("git add -A && git diff --cached --stat", 30)).output
            seen["daemon"] = (await run("sleep 600 & echo started", 30)).output
            seen["after"] = (await run("ps -e -o comm= | grep -c '^sleep$'", 30)).output
            slow = await run("echo partial; sleep 30", 1)
            seen["slow"] = (slow.exit_code, slow.output)
            flood = await run("yes", 30)
            seen["flood"] = (flood.exit_code, len(flood.output))
            # the graded workspace: another copy, as the evaluator opens it
            async with testbeds.open("graded", inst) as graded:
                seen["graded"] = (graded.repo / "calculator" / "stats.py").read_text()
                seen["graded_new"] = (graded.repo / "NEW.txt").exists()
                # where the test patch lives while a row is graded: never in sight
                (graded.host_dir / "eval.sh").write_text("TEST_PATCH_CANARY\n")
                look = (
                    f"ls {graded.repo}; cat {graded.host_dir}/eval.sh; ls {graded.workspace.parent}"
                )
                seen["look"] = (await run(look, 30)).output
            seen["mine"] = (workdir / "calculator" / "stats.py").read_text()
        seen["removed"] = not workdir.exists()
        return seen

    seen = asyncio.run(scenario())
    assert seen["history"].strip() == "1"  # no future commits: the cache is not there
    assert seen["home"] == "writable\n"
    assert "No such file or directory" in str(seen["repos"])
    assert seen["clean"] == ""  # byproducts and install leftovers are excluded
    assert "calculator/stats.py" in str(seen["diff"]) and "NEW.txt" in str(seen["diff"])
    assert "2 files changed" in str(seen["diff"])
    assert "started" in str(seen["daemon"]) and str(seen["after"]).strip() == "0"  # it died
    assert seen["slow"] == (None, "partial\n")  # timed out, with what it printed so far
    assert seen["flood"][1] == CAPTURE_CAP  # type: ignore[index]
    assert "0 + sum" in str(seen["mine"]) and "0 + sum" not in str(seen["graded"])
    assert seen["graded_new"] is False
    assert "TEST_PATCH_CANARY" not in str(seen["look"])
    assert str(seen["look"]).count("No such file or directory") == 3
    assert seen["removed"]


@pytest.fixture
def weak_engine(
    sample: SampleBenchmark, settings: LocalSettings, host_env: dict[str, str]
) -> Iterator[Engine]:
    """An engine in the weaker ``process`` isolation."""
    config = sample_config(sample, isolation="process")
    eng = build_engine(settings, config, host_env, isolation=Isolation.probe("process"))
    yield eng
    eng.close()


def test_no_workbench_without_bubblewrap(weak_engine: Engine, sample: SampleBenchmark) -> None:
    workbenches = Workbenches(weak_engine.testbeds)
    assert not workbenches.available

    async def open_one() -> None:
        async with workbenches.open("workbench", instance(sample)):
            pass

    with pytest.raises(SandboxUnavailable, match="needs isolation = bwrap"):
        asyncio.run(open_one())


def test_a_participant_is_not_offered_the_mode_it_cannot_have(
    weak_engine: Engine, sample: SampleBenchmark
) -> None:
    import httpx

    from swegreen.a2a.participant_client import A2AParticipant

    participant = A2AParticipant(
        "p",
        "http://127.0.0.1:9/",
        timeout=5,
        url_template="{repo}",
        http=httpx.AsyncClient(),
        workbenches=Workbenches(weak_engine.testbeds),
        budget=sample_config(sample).budget(),
    )
    assert participant.workbenches is None


def test_prepared_workspace_is_untouched(sample_engine: Engine, sample: SampleBenchmark) -> None:
    inst = instance(sample)

    async def scenario() -> Path:
        async with Workbenches(sample_engine.testbeds).open("workbench", inst) as bench:
            assert (await bench.run("echo x >> calculator/stats.py", 30)).exit_code == 0
            assert bench.testbed.prepared is not None
            return bench.testbed.prepared

    prepared = asyncio.run(scenario())
    assert not (prepared / "repo" / "calculator" / "stats.py").read_text().endswith("x\n")
