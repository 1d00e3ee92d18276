"""The interactive mode's workbench: a sandboxed copy of the sample's prepared workspace
(real bubblewrap or Landlock, real git, the sample's real environment)."""

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
from swegreen.sandbox import confine
from swegreen.sandbox.isolation import Isolation
from tests.conftest import sample_config, sample_instance

INSTANCE = "sample__calculator-1"
UNSEEN = ("No such file or directory", "Permission denied")  # bubblewrap, Landlock


@pytest.fixture(params=["bwrap", "landlock"])
def bench_engine(
    request: pytest.FixtureRequest,
    sample: SampleBenchmark,
    settings: LocalSettings,
    isolation: Isolation,
    host_env: dict[str, str],
) -> Iterator[Engine]:
    """The sample's engine under each isolation that offers workbenches."""
    if request.param == "landlock":
        if confine.abi() < 1:
            pytest.skip("no Landlock on this kernel")
        isolation = Isolation.probe("landlock")
    config = sample_config(sample, isolation=request.param)
    eng = build_engine(settings, config, host_env, isolation=isolation)
    yield eng
    eng.close()


def instance(sample: SampleBenchmark) -> Instance:
    return sample_instance(sample, INSTANCE)


def test_commands_work_in_a_private_copy_that_the_grader_never_sees(
    bench_engine: Engine, sample: SampleBenchmark
) -> None:
    inst = instance(sample)
    testbeds = bench_engine.testbeds

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
            seen["daemon"] = (await run("sleep 6017 & echo started", 30)).output
            # (no PID namespace under Landlock: the host's processes are listed too)
            seen["after"] = (await run("ps -e -o args= | grep -c '^sleep 6017$'", 30)).output
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
    assert any(why in str(seen["repos"]) for why in UNSEEN)
    assert seen["clean"] == ""  # byproducts and install leftovers are excluded
    assert "calculator/stats.py" in str(seen["diff"]) and "NEW.txt" in str(seen["diff"])
    assert "2 files changed" in str(seen["diff"])
    assert "started" in str(seen["daemon"]) and str(seen["after"]).strip() == "0"  # it died
    assert seen["slow"] == (None, "partial\n")  # timed out, with what it printed so far
    assert seen["flood"][1] == CAPTURE_CAP  # type: ignore[index]
    assert "0 + sum" in str(seen["mine"]) and "0 + sum" not in str(seen["graded"])
    assert seen["graded_new"] is False
    assert "TEST_PATCH_CANARY" not in str(seen["look"])
    assert sum(str(seen["look"]).count(why) for why in UNSEEN) == 3, seen["look"]
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

    with pytest.raises(SandboxUnavailable, match="needs isolation = bwrap or landlock"):
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
