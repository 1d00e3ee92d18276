"""The host's secrets never reach a stored artifact, a stored row or the green agent's model."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from swegreen.core.classify import Status
from swegreen.core.dataset import Instance, load_dataset, select_instances
from swegreen.core.diagnosis import Diagnoser
from swegreen.core.ports import PatchResult
from swegreen.core.results import InstanceResult
from swegreen.core.scrub import Scrubber, is_secret_name
from swegreen.evaluation.engine import LocalSettings, build_engine
from swegreen.sample import SampleBenchmark
from swegreen.sandbox.isolation import Isolation
from swegreen.stores import artifacts as art
from swegreen.stores.artifacts import LocalArtifacts, ScrubbedArtifacts

from .conftest import RunSample, sample_config

CANARY = "canary-7f3e9b2c41d8a6e5"
CANARY_ENV = {"SWEGREEN_TEST_CANARY_TOKEN": CANARY}
# Makes test_mean (a P2P test of sample__calculator-1) print the canary; pytest -rA shows
# the captured output of passing tests, so it lands in the test log.
LEAKY_PATCH = f'''diff --git a/calculator/stats.py b/calculator/stats.py
--- a/calculator/stats.py
+++ b/calculator/stats.py
@@ -6,4 +6,5 @@ from collections import Counter
 def mean(values):
     """Arithmetic mean of ``values``."""
     values = list(values)
+    print("leaking {CANARY} here")
     return sum(values) / len(values)
'''


@dataclass
class Fixed:
    """A patch source that gives the same patch for every instance."""

    patch: str
    name: str = "fixed"
    deterministic: bool = True

    async def get_patch(self, instance: Instance) -> PatchResult:
        return PatchResult(self.patch, "fixed")


def test_secret_looking_variables_are_picked_and_their_values_redacted() -> None:
    env = {
        "OPENAI_API_KEY": "sk-abcdefghijklmnop",
        "HF_TOKEN": "hf_0123456789abcdef",
        "AWS_ACCESS_KEY_ID": "AKIAABCDEFGHIJKLMNOP",
        "DB_PASSWORD": 'p"ss/w rd+1',
        "SHORT_TOKEN": "1234567",  # too short to be told from ordinary text
        "GIT_AUTHOR_NAME": "Jane Developer",  # AUTHOR is not AUTH
        "XAUTHORITY": "/home/jane/.Xauthority",
        "PATH": "/usr/local/bin:/usr/bin",
    }
    scrub = Scrubber.from_env(env)
    assert scrub.names == ["AWS_ACCESS_KEY_ID", "DB_PASSWORD", "HF_TOKEN", "OPENAI_API_KEY"]
    assert is_secret_name("my_session_id") and not is_secret_name("GIT_AUTHOR_EMAIL")
    text = (
        "key sk-abcdefghijklmnop, clone https://x:hf_0123456789abcdef@hub/ "
        '{"pw": "p\\"ss/w rd+1"} url p%22ss%2Fw%20rd%2B1 short 1234567 by Jane Developer'
    )
    assert scrub(text) == (
        "key [redacted:OPENAI_API_KEY], clone https://x:[redacted:HF_TOKEN]@hub/ "
        '{"pw": "[redacted:DB_PASSWORD]"} url [redacted:DB_PASSWORD] short 1234567 '
        "by Jane Developer"
    )
    assert Scrubber()("nothing to hide") == "nothing to hide"


def test_a_secret_containing_another_is_redacted_whole() -> None:
    scrub = Scrubber({"A_KEY": "abcdefgh", "B_KEY": "abcdefgh-ijkl"})
    assert scrub("abcdefgh-ijkl abcdefgh") == "[redacted:B_KEY] [redacted:A_KEY]"


def test_scrubbed_artifacts_redact_every_text_they_write(tmp_path: Path) -> None:
    store = ScrubbedArtifacts(LocalArtifacts(tmp_path), Scrubber.from_env(CANARY_ENV))
    store.write_text("r/instances/i/test_output.txt", f"token={CANARY}\n")
    assert store.read_text("r/instances/i/test_output.txt") == (
        "token=[redacted:SWEGREEN_TEST_CANARY_TOKEN]\n"
    )


def all_stored_bytes(root: Path) -> list[tuple[Path, bytes]]:
    """Every file under ``root``: artifacts, the SQLite database and its WAL."""
    return [(p, p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()]


def test_a_canary_a_test_prints_is_in_no_stored_artifact_or_row(
    sample: SampleBenchmark,
    settings: LocalSettings,
    isolation: Isolation,
    host_env: dict[str, str],
    run_sample: RunSample,
) -> None:
    env = {**host_env, **CANARY_ENV}
    ids = ["sample__calculator-1"]
    engine = build_engine(
        settings, sample_config(sample, instance_ids=ids), env, isolation=isolation
    )
    try:
        outcome = run_sample(Fixed(LEAKY_PATCH), run_id="canary", engine=engine, instance_ids=ids)
        [row] = outcome.results
        assert row.tests_ran and row.status is Status.NO_OP, row  # graded: nothing fixed
        stored_rows = engine.store.get_results("canary")
    finally:
        engine.close()
    log = (
        settings.output_dir / "canary/instances/sample__calculator-1/test_output.txt"
    ).read_text()
    assert "leaking [redacted:SWEGREEN_TEST_CANARY_TOKEN] here" in log  # it was printed
    patch = (settings.output_dir / "canary/instances/sample__calculator-1/patch.diff").read_text()
    assert "[redacted:SWEGREEN_TEST_CANARY_TOKEN]" in patch
    files = all_stored_bytes(settings.output_dir)
    assert any(p.name == "swegreen.sqlite" for p, _ in files)
    assert [p for p, data in files if CANARY.encode() in data] == []
    assert CANARY not in json.dumps([r.model_dump(mode="json") for r in stored_rows.values()])


def test_a_secret_in_a_failure_is_redacted_from_the_error_row(
    sample: SampleBenchmark, tmp_path: Path, isolation: Isolation, host_env: dict[str, str]
) -> None:
    """Error details (the failure and its log's tail) are stored rows, not artifacts."""
    fresh = LocalSettings(output_dir=tmp_path / "results", cache_dir=tmp_path / "cache")
    nowhere = str(tmp_path / CANARY / "{owner}__{name}")  # the clone fails, naming it
    config = sample_config(
        sample, instance_ids=["sample__calculator-1"], repo_url_template=nowhere, max_attempts=1
    )
    engine = build_engine(fresh, config, {**host_env, **CANARY_ENV}, isolation=isolation)
    try:
        dataset = load_dataset(config.dataset)
        outcome = asyncio.run(
            engine.runner.run(
                run_id="failing",
                dataset=dataset,
                instances=select_instances(dataset, config.selection()),
                source=Fixed(LEAKY_PATCH),
                config=config,
            )
        )
        [row] = outcome.results
        stored = engine.store.get_results("failing")["sample__calculator-1"]
    finally:
        engine.close()
    assert row.status is Status.ERROR and row.reason == "repo_unavailable", row
    assert "[redacted:SWEGREEN_TEST_CANARY_TOKEN]" in stored.detail
    assert CANARY not in stored.model_dump_json()
    assert [p for p, data in all_stored_bytes(fresh.output_dir) if CANARY.encode() in data] == []


class PromptSpy:
    """A litellm callback that keeps every prompt litellm is about to send."""

    def __init__(self) -> None:
        from litellm.integrations.custom_logger import CustomLogger

        spy = self

        class Logger(CustomLogger):
            def log_pre_api_call(self, model: str, messages: Any, kwargs: Any) -> None:
                spy.sent.append(json.dumps(messages))

        self.sent: list[str] = []
        self.logger = Logger()


def test_what_the_diagnoser_sends_to_the_model_holds_no_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    spy = PromptSpy()
    monkeypatch.setattr(litellm, "callbacks", [spy.logger])
    diagnoser = Diagnoser(
        "openai/gpt-4o-mini", mock_response="MOCK", scrub=Scrubber.from_env(CANARY_ENV)
    )
    row = InstanceResult(
        instance_id="o__r-1",
        repo="o/r",
        status=Status.ERROR,
        reason="env_setup_failed",
        detail=f"pip could not reach https://user:{CANARY}@index/simple",
    )

    async def ask() -> tuple[str | None, str | None]:
        diagnosis = await diagnoser.diagnose(row, f"Traceback ...\nTOKEN={CANARY}\n")
        summary = await diagnoser.summarize({"note": CANARY})
        return diagnosis, summary

    assert asyncio.run(ask()) == ("MOCK", "MOCK")
    assert len(spy.sent) == 2, diagnoser.unavailable
    assert all(CANARY not in sent for sent in spy.sent)
    assert all("[redacted:SWEGREEN_TEST_CANARY_TOKEN]" in sent for sent in spy.sent)


def test_scrubbed_artifacts_are_what_the_engine_writes_through(
    settings: LocalSettings, sample: SampleBenchmark, isolation: Isolation
) -> None:
    engine = build_engine(settings, sample_config(sample), CANARY_ENV, isolation=isolation)
    try:
        assert engine.scrubber.names == ["SWEGREEN_TEST_CANARY_TOKEN"]
        assert engine.evaluator.artifacts is engine.artifacts
        engine.artifacts.write_text(art.run_key("r", "x.txt"), CANARY)
        assert engine.artifacts.read_text(art.run_key("r", "x.txt")) == (
            "[redacted:SWEGREEN_TEST_CANARY_TOKEN]"
        )
    finally:
        engine.close()


def test_a_run_started_with_a_secret_resumes_only_with_it_given_again(
    tmp_path: Path, session_cache: Path, sample: SampleBenchmark
) -> None:
    """The store keeps a run's config without the host's secrets: `swegreen run --run-id X`
    alone then says which flag to give again, and resumes with it."""
    import os
    import subprocess
    import sys

    secret_source = str(tmp_path / CANARY / "{name}.git")  # a clone URL holding a token

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "swegreen", *args, "--no-progress",
             "--cache-dir", str(tmp_path / "cache"), "--output-dir", str(tmp_path / "results")],
            env={**os.environ, **CANARY_ENV},
            capture_output=True,
            text=True,
            timeout=600,
        )  # fmt: skip

    first = cli("run", "--sample", "--patches", "gold", "--max-rows", "1", "--max-attempts",
                "1", "--repo-url-template", secret_source, "--run-id", "tokened")  # fmt: skip
    assert first.returncode == 3, first.stdout + first.stderr
    stored = (tmp_path / "results" / "swegreen.sqlite").read_bytes()
    assert CANARY.encode() not in stored
    alone = cli("run", "--run-id", "tokened")
    said = " ".join(alone.stdout.split())
    assert alone.returncode == 2 and "a secret in repo_url_template" in said, said
    assert "--run-id tokened and --repo-url-template again" in said
    again = cli("run", "--run-id", "tokened", "--retry-errors",
                "--repo-url-template", sample.url_template)  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
