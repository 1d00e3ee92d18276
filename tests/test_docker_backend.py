"""The Docker backend on a real Docker engine, through a stand-in of AgentBeats' Docker
gateway: the sample's rows, in instance images laid out like the official ones, get the
verdicts the engine's own backend gives, with no call the platform would refuse.

Needs a Docker daemon (``../shared/tools/docker-here.sh`` sets one up as root) and the
``debian:bookworm-slim`` image it makes; skipped with that message elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import docker
import pytest
from docker.errors import APIError
from swebench.harness.constants import APPLY_PATCH_FAIL

from swegreen.containers.daemon import answers
from swegreen.core.dataset import load_dataset
from swegreen.core.images import image_name
from swegreen.core.ports import PatchResult
from swegreen.core.results import InstanceResult
from swegreen.environments.catalog import builtin_recipes
from swegreen.evaluation.engine import Engine, build_engine
from swegreen.evaluation.settings import LocalSettings
from swegreen.sample import SampleBenchmark

from .conftest import RunSample, sample_config
from .docker_support.gateway import Gateway
from .docker_support.official_harness import eval_script_of, harness_rows, run_official
from .docker_support.sample_images import BASE, TEMPLATE

WHY_NOT = answers(os.environ)
pytestmark = pytest.mark.skipif(
    WHY_NOT is not None,
    reason=f"{WHY_NOT}: run ../shared/tools/docker-here.sh as root to set up a daemon",
)

FORCE_PASS = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


def new_file(path: str, text: str) -> str:
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    )


# Code the eval-time install runs (ledger's recipe installs the project): it writes a
# test configuration that makes every test pass, after the patch's files were checked.
INSTALL_TIME = new_file(
    "setup.py",
    "from pathlib import Path\n"
    "from setuptools import setup\n"
    f"Path('tests/conftest.py').write_text({FORCE_PASS!r})\n"
    "setup()\n",
)


def docker_engine(
    settings: LocalSettings, sample: SampleBenchmark, gateway: Gateway, **config: Any
) -> Engine:
    config = {"docker_images": TEMPLATE, **config}
    cfg = sample_config(sample, environments="docker", **config)
    env = {**os.environ, "DOCKER_HOST": f"unix://{gateway.listen}"}
    return build_engine(settings, cfg, env)


def test_the_stand_in_refuses_what_the_platform_refuses(gateway: Gateway) -> None:
    client = docker.DockerClient(base_url=f"unix://{gateway.listen}")
    direct = docker.from_env()
    try:
        refused = [
            lambda: client.images.list(),
            lambda: client.api.remove_image(BASE),
            lambda: client.api.prune_images(),
            lambda: client.api.import_image_from_url("http://127.0.0.1:9/x.tar"),
        ]
        for call in refused:
            with pytest.raises(APIError) as caught:
                call()
            assert caught.value.status_code == 403
        # A container the gateway did not make is another caller's.
        other = direct.api.create_container(BASE, command=["true"])["Id"]
        try:
            with pytest.raises(APIError) as caught:
                client.api.start(other)
            assert caught.value.status_code == 403
            assert other not in {c.id for c in client.containers.list(all=True)}
        finally:
            direct.api.remove_container(other, force=True)
    finally:
        client.close()
        direct.close()


def test_the_sample_gets_the_engine_and_the_official_harness_verdicts_through_the_gateway(
    run_sample: RunSample,
    sample: SampleBenchmark,
    settings: LocalSettings,
    gateway: Gateway,
    tmp_path: Path,
) -> None:
    """The crafted predictions (every verdict) in the sample's images: the backend, through
    the gateway, gives the engine's verdicts; swebench 5.0.2's own ``run_evaluation`` on
    the same images resolves the same rows and fails the same tests."""
    before = len(gateway.refused)
    engine = docker_engine(settings, sample, gateway)
    try:
        described = engine.describe()
        outcome = run_sample(str(sample.crafted), run_id="docker-crafted", engine=engine)
    finally:
        engine.close()
    assert described["backend"] == "docker" and described["docker_engine"]
    assert described["container"]["cap_drop"] == "ALL"
    got = {r.instance_id: (r.status.value, r.reason) for r in outcome.results}
    want = {iid: (e["status"], e["reason"]) for iid, e in sample.expected.items()}
    assert got == want
    for row in outcome.results:
        if row.reason in ("patch_does_not_apply", "test_timeout"):
            continue  # never in a container / an error row, which keeps no provenance
        assert row.isolation == "docker"
        assert row.environment["backend"] == "docker"
        assert str(row.environment["image_id"]).startswith("sha256:")
        assert row.environment["image"] == TEMPLATE.format(
            arch="x86_64", official_id=row.instance_id.replace("__", "_1776_")
        )
    # the ledger's image holds its editable install: a patch of its sources alone (the
    # crafted docstring) leaves the reinstall out, as the engine does
    ledger = next(r for r in outcome.results if r.instance_id == "sample__ledger-1")
    assert ledger.environment["eval_install"] == "skipped (no build input changed)"
    assert gateway.refused[before:] == []  # every call the backend made is one the platform allows
    client = docker.DockerClient(base_url=f"unix://{gateway.listen}")
    try:
        assert client.containers.list(all=True) == []  # every row's container removed
    finally:
        client.close()
    assert_the_harness_agrees(sample, outcome.results, tmp_path)


def assert_the_harness_agrees(
    sample: SampleBenchmark, results: list[InstanceResult], work: Path
) -> None:
    rows = load_dataset(str(sample.dataset)).instances
    book = builtin_recipes()
    scripts = {
        i.instance_id: {"eval_script": eval_script_of(i, book.for_instance(i))} for i in rows
    }
    raw = [json.loads(line) for line in sample.dataset.read_text().splitlines()]
    names = {i.instance_id: image_name(i.instance_id, TEMPLATE) for i in rows}
    parsers = {i.repo: book.for_instance(i).log_parser for i in rows}
    dataset = work / "dataset.jsonl"
    made = harness_rows(raw, scripts, names, parsers)
    dataset.write_text("".join(json.dumps(r) + "\n" for r in made))
    crafted = {
        p["instance_id"]: p["model_patch"]
        for p in map(json.loads, sample.crafted.read_text().splitlines())
    }
    # One limit for every row, as the harness has: the ledger's (the shortest), so its
    # hanging prediction times out there as here.
    timeout = min(book.for_instance(i).eval_timeout or 1800 for i in rows)
    # 4 workers: most of a harness row is the wait for its container's stop (10 s)
    official = run_official(work, dataset, "crafted", list(crafted), crafted, int(timeout), 4)
    for row in results:
        found = official[row.instance_id]
        report, logs = found["report"], Path(str(found["logs"]))
        if report is None:  # the harness's errors: no report, its log says why
            log = (logs / "run_instance.log").read_text()
            if row.reason == "patch_does_not_apply":
                assert APPLY_PATCH_FAIL in log, row.instance_id
            else:
                assert row.reason == "test_timeout", row.instance_id
                output = (logs / "test_output.txt").read_text()
                assert f"Timeout error: {int(timeout)} seconds exceeded" in output
            continue
        status = report["tests_status"]
        assert report["resolved"] == (row.status.value == "resolved"), row.instance_id
        assert set(status["FAIL_TO_PASS"]["failure"]) == set(row.f2p_failing), row.instance_id
        assert set(status["PASS_TO_PASS"]["failure"]) == set(row.p2p_failing), row.instance_id


def test_what_the_patch_and_its_install_change_of_the_tests_is_put_back(
    sample: SampleBenchmark, settings: LocalSettings, gateway: Gateway
) -> None:
    """A test configuration that passes every test: from the patch, and written by the
    patch's code during the eval-time install. Both are put back; the fix is absent, so
    the rows end no_op, not resolved."""
    dataset = load_dataset(str(sample.dataset))
    rows = {i.instance_id: i for i in dataset.instances}
    engine = docker_engine(settings, sample, gateway)
    try:
        by_patch = asyncio.run(
            engine.evaluator.evaluate(
                "docker-tamper",
                rows["sample__calculator-1"],
                PatchResult(new_file("tests/conftest.py", FORCE_PASS), "tamper"),
            )
        )
        by_install = asyncio.run(
            engine.evaluator.evaluate(
                "docker-tamper", rows["sample__ledger-1"], PatchResult(INSTALL_TIME, "tamper")
            )
        )
    finally:
        engine.close()
    assert (by_patch.status.value, by_patch.reason) == ("no_op", "no_f2p_pass")
    assert by_patch.tampered_files == ["tests/conftest.py"]
    assert (by_install.status.value, by_install.reason) == ("no_op", "no_f2p_pass")
    assert by_install.tampered_files == ["tests/conftest.py"]
    # setup.py declares dependencies: its install keeps the network, as upstream's does
    assert by_install.environment["network"].startswith("network on: the patch changes setup.py")
    assert by_install.environment["eval_install"] == "ran"  # setup.py is a build input
    assert "network" not in by_patch.environment


def reversed_patch(patch: str) -> str:
    """``patch`` undone: its ``+`` and ``-`` lines swapped, without blob ids (one hunk)."""
    lines = []
    for line in patch.splitlines(keepends=True):
        if line.startswith(("index ", "diff --git")):
            continue
        if line.startswith("@@"):
            old, new = line.split()[1:3]
            line = f"@@ -{new[1:]} +{old[1:]} @@\n"
        elif line.startswith(("---", "+++")):
            pass
        elif line[:1] in "+-":
            line = {"+": "-", "-": "+"}[line[0]] + line[1:]
        lines.append(line)
    return "".join(lines)


def test_the_official_chain_s_fallbacks_apply_in_the_container(
    sample: SampleBenchmark, settings: LocalSettings, gateway: Gateway
) -> None:
    """The whole chain runs in one exec: a patch only GNU patch's fuzz applies is applied
    by it (and graded), and a patch already in the tree counts as applied, by the
    reverse check, as upstream's chain says."""
    dataset = load_dataset(str(sample.dataset))
    row = next(i for i in dataset.instances if i.instance_id == "sample__calculator-1")
    gold = "".join(ln for ln in row.patch.splitlines(keepends=True) if not ln.startswith("index"))
    assert " def mean(values):\n" in gold
    fuzzy = gold.replace(" def mean(values):\n", " def mean(numbers):\n", 1)
    engine = docker_engine(settings, sample, gateway)
    try:
        by_fuzz, undone = (
            asyncio.run(engine.evaluator.evaluate("docker-chain", row, PatchResult(p, "x")))
            for p in (fuzzy, reversed_patch(gold))
        )
    finally:
        engine.close()
    assert by_fuzz.apply_method.startswith("patch --batch --forward --fuzz=5"), by_fuzz.detail
    assert by_fuzz.status.value == "resolved", by_fuzz.detail
    # already there: the tree is left as it is, so the fix is absent
    assert undone.apply_method == "already applied", undone.detail
    assert (undone.status.value, undone.reason) == ("no_op", "no_f2p_pass")


def test_an_image_that_cannot_be_had_is_an_error_row_that_says_why(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, gateway: Gateway
) -> None:
    one = {"instance_ids": ["sample__calculator-1"], "max_attempts": 1}
    nowhere = "127.0.0.1:9/nope/{official_id}:latest"  # a pull, refused by the registry
    # no disk reserve: the pull itself must fail, on a machine with any free disk
    engine = docker_engine(
        settings, sample, gateway, docker_images=nowhere, docker_disk_reserve_gb=0, **one
    )
    try:
        missing = run_sample("gold", run_id="docker-missing", engine=engine, **one).results[0]
    finally:
        engine.close()
    assert (missing.status.value, missing.reason) == ("error", "image_unavailable")
    assert "127.0.0.1:9/nope" in missing.detail

    engine = docker_engine(
        settings, sample, gateway, docker_images=nowhere, docker_disk_reserve_gb=1e9, **one
    )
    try:
        full = run_sample("gold", run_id="docker-full", engine=engine, **one).results[0]
    finally:
        engine.close()
    assert (full.status.value, full.reason) == ("error", "disk_full")
    assert "GiB of disk is free" in full.detail


def test_auto_falls_back_to_the_engine_where_no_daemon_answers(
    sample: SampleBenchmark, settings: LocalSettings, tmp_path: Path
) -> None:
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/none.sock"}
    engine = build_engine(settings, sample_config(sample, environments="auto"), env)
    try:
        assert engine.describe()["backend"] == "engine"
    finally:
        engine.close()
    from swegreen.core.errors import ConfigError

    with pytest.raises(ConfigError, match="DOCKER_HOST"):
        build_engine(settings, sample_config(sample, environments="docker"), env)


def test_a_workbench_is_a_container_of_its_own_with_the_history_cut(
    sample: SampleBenchmark, settings: LocalSettings, gateway: Gateway
) -> None:
    from swegreen.evaluation.workbench import CAPTURE_CAP

    inst = next(
        i for i in load_dataset(str(sample.dataset)).instances
        if i.instance_id == "sample__calculator-1"
    )  # fmt: skip
    engine = docker_engine(settings, sample, gateway)

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        workbenches = engine.workbenches()
        assert workbenches.available
        async with workbenches.open("workbench", inst) as bench:
            run = bench.run
            seen["python"] = bench.python_version
            seen["history"] = (await run("git log --all --oneline | wc -l", 30)).output
            seen["head"] = (await run("git rev-parse HEAD", 30)).output.strip()
            await run("python -c 'import calculator'", 30)  # leaves __pycache__ behind
            seen["clean"] = (await run("git status --short", 30)).output
            edit = "sed -i 's/return sum/return 0 + sum/' calculator/stats.py && echo new > NEW.txt"
            assert (await run(edit, 30)).exit_code == 0
            seen["diff"] = (await run("git add -A && git diff --cached --stat", 30)).output
            gone = await bench.run_discarded("echo lost > LOST.txt && ls LOST.txt", 30)
            seen["discarded"] = (gone.output, (await run("ls LOST.txt", 30)).exit_code)
            seen["net"] = (await run("ls /sys/class/net", 30)).output.split()
            seen["who"] = (await run("id -u; grep CapEff /proc/self/status", 30)).output.split()
            seen["env"] = (await run("touch /opt/miniconda3/envs/testbed/x", 30)).exit_code
            seen["daemon"] = (await run("sleep 6017 & echo started", 30)).output
            alive = (
                "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done 2>/dev/null"
                " | grep -c '^sleep 6017 $'"
            )
            seen["after"] = (await run(alive, 30)).output
            slow = await run("echo partial; sleep 30", 1)
            seen["slow"] = (slow.exit_code, slow.output)
            flood = await run("yes", 30)
            seen["flood"] = len(flood.output)
        return seen

    try:
        seen = asyncio.run(scenario())
    finally:
        engine.close()
    assert seen["python"] == "3.11"  # Debian bookworm's, in the sample images
    assert seen["history"].strip() == "1"  # the image's later commits are not there
    assert seen["head"] == inst.base_commit
    assert seen["clean"] == ""
    assert "2 files changed" in seen["diff"]
    assert seen["discarded"] == ("LOST.txt\n", 2)
    assert seen["net"] == ["lo"]
    assert seen["who"] == ["1000", "CapEff:", "0000000000000000"]  # nonroot, no capability
    assert seen["env"] != 0  # the image's environment is not the participant's to change
    assert "started" in seen["daemon"] and seen["after"].strip() == "0"  # it died
    assert seen["slow"] == (None, "partial\n")
    assert seen["flood"] == CAPTURE_CAP
    client = docker.DockerClient(base_url=f"unix://{gateway.listen}")
    try:
        assert client.containers.list(all=True) == []  # the workbench's container removed
    finally:
        client.close()


def test_a2a_participants_are_told_the_image_the_rows_are_graded_in(
    gateway: Gateway,
    sample: SampleBenchmark,
    session_cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The green agent as the platform runs it (environments docker, through the gateway)
    with two public participants' contracts that pull what the task names: each is told
    the image its row is graded in, not Docker Hub's (a runner keeps every pull), and
    resolves. Without the expected source, the same contracts complain."""
    from .helpers import start, stop
    from .test_dialects import CONTRACTS, assess_doubles, gold_patches

    env = {"SWEGREEN_ENVIRONMENTS": "docker", "DOCKER_HOST": f"unix://{gateway.listen}"}
    green = start(["serve"], session_cache, tmp_path / "green", "green", env=env)
    try:
        monkeypatch.setenv("CONTRACT_IMAGE_TEMPLATE", TEMPLATE)
        contracts = {n: CONTRACTS[n](gold_patches(sample), tmp_path) for n in ("mini", "pro")}
        outcome = asyncio.run(assess_doubles(green, contracts, {"docker_images": TEMPLATE}, {}))
        assert not any(c.complaints for c in contracts.values())
        assert set(outcome.rows) == {"mini", "pro"}
        for role, row in outcome.rows.items():
            [one] = row["instances"]
            assert (one["status"], one["reason"]) == ("resolved", "all_tests_pass"), (role, one)
            assert row["provenance"]["sandbox"]["backend"] == "docker"
        monkeypatch.delenv("CONTRACT_IMAGE_TEMPLATE")  # they expect Docker Hub's name now
        contracts = {n: CONTRACTS[n](gold_patches(sample), tmp_path) for n in ("mini", "pro")}
        asyncio.run(assess_doubles(green, contracts, {"docker_images": TEMPLATE}, {}))
        assert all(c.complaints for c in contracts.values())
    finally:
        stop([green])


def setup_py(body: str, setup_args: str = "") -> str:
    """A ``setup.py`` for ledger whose build runs ``body`` first (the eval-time install)."""
    return new_file(
        "setup.py",
        f"import os, subprocess, sys, sysconfig\nfrom setuptools import setup\n{body}\n"
        f"setup({setup_args})\n",
    )


SITE = "sysconfig.get_paths()['purelib']"
REWRITE_TESTS_IN_THE_BACKGROUND = (
    "loop = 'import time\\nfor _ in range(12000):\\n'"
    " \"    open('tests/conftest.py', 'w').write(%r)\\n    time.sleep(0.005)\\n\" % FORCE\n"
    "subprocess.Popen([sys.executable, '-c', loop], start_new_session=True,"
    " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
)
INSTALL_ATTACKS = {
    # a tool the backend runs afterwards, replaced (git, here)
    "system tool": (
        setup_py(
            "open('/usr/local/bin/git', 'w').write('#!/bin/sh\\nexit 0\\n')\n"
            "os.chmod('/usr/local/bin/git', 0o755)"
        ),
        "/usr/local/bin/git",
    ),
    "sitecustomize": (
        setup_py(f"open(os.path.join({SITE}, 'sitecustomize.py'), 'w').write('import os\\n')"),
        "sitecustomize.py (a module that runs at every interpreter start)",
    ),
    "pth": (
        setup_py(f"open(os.path.join({SITE}, 'zz.pth'), 'w').write('import os\\n')"),
        "zz.pth (a .pth line that runs code)",
    ),
    "another distribution's file": (
        setup_py(f"open(os.path.join({SITE}, '_pytest', 'python.py'), 'a').write('\\n')"),
        "_pytest/python.py (another distribution's file changed)",
    ),
    "pytest plugin": (
        setup_py("", "entry_points={'pytest11': ['force = ledger.money']}"),
        "entry_points.txt (a new pytest plugin entry point)",
    ),
    "global git configuration": (
        setup_py("subprocess.run(['git', 'config', '--global', 'core.fsmonitor', 'true'])"),
        "/root/.gitconfig (core.fsmonitor",
    ),
    "git configuration": (
        setup_py("subprocess.run(['git', 'config', 'core.fsmonitor', 'true'])"),
        "/testbed/.git/config",
    ),
}


@pytest.mark.parametrize("attack", sorted(INSTALL_ATTACKS))
def test_an_install_that_changes_what_no_install_of_the_project_does_ends_the_row(
    attack: str,
    run_sample: RunSample,
    sample: SampleBenchmark,
    settings: LocalSettings,
    gateway: Gateway,
) -> None:
    """The daemon's record of the container's changes, not a tool of the container's,
    says what the install changed: each of these ends ``workspace_tampering``, naming it."""
    patch, named = INSTALL_ATTACKS[attack]
    row = evaluate_one(run_sample, settings, sample, gateway, "sample__ledger-1", patch)
    assert (row.status.value, row.reason) == ("error", "workspace_tampering"), row.detail
    assert named in row.detail, row.detail


def test_a_process_the_install_leaves_running_is_stopped_before_the_tests(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, gateway: Gateway
) -> None:
    """The install starts a process that keeps writing a force-pass conftest.py, to win
    against the put-back; it is stopped first, so the tests run as their files say."""
    body = f"FORCE = {FORCE_PASS!r}\n" + REWRITE_TESTS_IN_THE_BACKGROUND
    row = evaluate_one(run_sample, settings, sample, gateway, "sample__ledger-1", setup_py(body))
    assert (row.status.value, row.reason) == ("no_op", "no_f2p_pass"), row.detail
    assert row.tampered_files == ["tests/conftest.py"]


def evaluate_one(
    run_sample: RunSample,
    settings: LocalSettings,
    sample: SampleBenchmark,
    gateway: Gateway,
    iid: str,
    patch: str,
) -> Any:
    """``patch`` on row ``iid``, through the runner (a failure is an error row)."""
    predictions = settings.output_dir.parent / f"{iid}-predictions.jsonl"
    predictions.write_text(
        json.dumps({"instance_id": iid, "model_name_or_path": "x", "model_patch": patch})
    )
    engine = docker_engine(settings, sample, gateway)
    try:
        outcome = run_sample(str(predictions), run_id="docker-install", engine=engine,
                             instance_ids=[iid], max_attempts=1)  # fmt: skip
    finally:
        engine.close()
    [row] = outcome.results
    return row


def in_process_cases() -> dict[str, tuple[Any, tuple[str, str]]]:
    from .test_integrity_round3 import (
        ITEMS_SWAPPED,
        RUNTEST_CODE_SWAPPED,
        in_process,
        xfail_on_the_buggy_path,
    )
    from .test_integrity_round4 import swapped_at_import

    tampered = ("error", "log_tampering")
    return {
        "runtest code replaced": (in_process(RUNTEST_CODE_SWAPPED), tampered),
        "items' functions swapped": (in_process(ITEMS_SWAPPED.format(how="function")), tampered),
        "test code swapped at import": (swapped_at_import("code"), tampered),
        "test function wrapped at import": (swapped_at_import("wrapper"), tampered),
        "xfail on the buggy path": (xfail_on_the_buggy_path, ("no_op", "no_f2p_pass")),
    }


@pytest.mark.parametrize(
    "case",
    [
        "runtest code replaced",
        "items' functions swapped",
        "test code swapped at import",
        "test function wrapped at import",
        "xfail on the buggy path",
    ],
)
def test_pytest_s_own_record_catches_in_process_forgeries_in_the_container(
    case: str,
    run_sample: RunSample,
    sample: SampleBenchmark,
    settings: LocalSettings,
    gateway: Gateway,
    tmp_path: Path,
) -> None:
    """The recorder runs in the row's container too (its key a file it removes when pytest
    imports it, its record on the test command's stderr after a marker of the run's
    own): the engine's in-process forgeries end there as they end in the engine."""
    from .test_integrity import crafted_patch

    plant, expected = in_process_cases()[case]
    inst = next(
        i for i in load_dataset(str(sample.dataset)).instances
        if i.instance_id == "sample__ledger-1"
    )  # fmt: skip
    repo = sample.repos_dir / inst.repo.replace("/", "__")
    patch = crafted_patch(repo, inst.base_commit, tmp_path / "work", plant)
    row = evaluate_one(run_sample, settings, sample, gateway, "sample__ledger-1", patch)
    assert (row.status.value, row.reason) == expected, row.detail


def test_the_install_cannot_rewrite_the_test_phase_s_script(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, gateway: Gateway
) -> None:
    """Code the eval-time install runs (setup.py) writes the test phase's script with one
    that prints every graded test as passed and exits 0. The test phase's script is put
    in place only after the install, so there is none to rewrite: what the install wrote
    is a change outside the checkout and the environment, and the row says so."""
    inst = next(
        i for i in load_dataset(str(sample.dataset)).instances
        if i.instance_id == "sample__ledger-1"
    )  # fmt: skip
    passed = "".join(f"echo 'PASSED {t}'\n" for t in [*inst.FAIL_TO_PASS, *inst.PASS_TO_PASS])
    forged = (
        "set -x\n: '>>>>> Start Test Output'\n" + passed
        + ": '>>>>> End Test Output'\necho '>>>>> Test Exit Code: 0'\nexit 0\n"
    )  # fmt: skip
    setup = new_file(
        "setup.py",
        "from pathlib import Path\nfrom setuptools import setup\n"
        f"Path('/eval.sh').write_text({forged!r})\nsetup()\n",
    )
    row = evaluate_one(run_sample, settings, sample, gateway, "sample__ledger-1", setup)
    assert (row.status.value, row.reason) == ("error", "workspace_tampering"), row.detail
    assert "/eval.sh" in row.detail
