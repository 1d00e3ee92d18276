"""Shared fixtures: the sample benchmark and a warm cache, built once per test session.

Everything runs for real: git repositories built by the sample builder, a virtualenv
made with an interpreter found on this machine, real subprocesses and SQLite files.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from swegreen.core.config import EvalConfig
from swegreen.core.dataset import Instance, load_dataset, select_instances
from swegreen.core.ports import PatchSource
from swegreen.evaluation.engine import Engine, LocalSettings, build_engine
from swegreen.evaluation.runner import RunOutcome
from swegreen.evaluation.settings import host_environment
from swegreen.sample import SampleBenchmark, build_sample
from swegreen.sandbox import overlay
from swegreen.sandbox.isolation import Isolation
from tests.a2a import venv03

# the Docker tests' images of the sample and the gateway stand-in (skipped without a daemon)
pytest_plugins = ["tests.docker_support.fixtures"]


def pytest_configure(config: pytest.Config) -> None:
    """A temp root of this session's own, outside pytest-of-<user>: pytest keeps that one
    at mode 0700 (and every concurrent session resets it), while the sandbox's uid must
    pass through to the caches and workspaces the tests make (Isolation.check_reachable)."""
    # No test reaches conda's channels (only PyPI and Debian's mirror are reachable here):
    # the commands tests start install no interpreter unless the test serves a channel.
    os.environ.setdefault("SWEGREEN_PYTHON_DOWNLOADS", "0")
    if not config.option.basetemp:
        root = Path(tempfile.mkdtemp(prefix="swegreen-tests-", dir=_temp_parent()))
        config.option.basetemp = str(root / "t")
        config.stash[_TEMP_ROOT] = root


# The files that take longest (deployments and a 10,000-row store): first in any order,
# so that two workers (make test) start them at once rather than end on them.
SLOWEST_FILES = (
    "tests/aws/test_pipeline_e2e.py",
    "tests/aws/test_front_door.py",
    "tests/aws/test_dynamo_store.py",
)


@pytest.hookimpl(trylast=True)  # after pytest-randomly's shuffle, which it keeps otherwise
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: n for n, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def pytest_unconfigure(config: pytest.Config) -> None:
    root = config.stash.get(_TEMP_ROOT, None)
    if root is not None:
        # workspaces an engine killed by a test left mounted (overlay.py) would pin the tree
        from swegreen.sandbox import overlay

        overlay.sweep(root)
        shutil.rmtree(root, ignore_errors=True)


_TEMP_ROOT = pytest.StashKey[Path]()
# What the whole suite keeps in its temp root at most (measured: see _temp_parent), with
# room to spare; the memory it takes in a tmpfs must leave the tests their own.
TMPFS_NEEDS = 8 << 30
MEMORY_NEEDS = 16 << 30


def wait_until(condition: Callable[[], bool], seconds: float = 60.0) -> bool:
    """Whether ``condition`` came true within ``seconds`` (polled): readiness, not a sleep."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def nothing_mounted_under(root: Path) -> bool:
    return not overlay.mounts_under(root)


def _temp_parent() -> str | None:
    """Where the session's temp root goes: ``SWEGREEN_TEST_TMP`` (a directory, or ``disk``
    for the system's temp dir), else a RAM-backed ``/dev/shm`` where this machine can
    spare the memory, else the system's temp dir. The suite makes dozens of environments
    (a relocated interpreter of about 300 MB each): on this machine's disk their files
    cost seconds of system time each (test_environments + test_prepared: 156 s on disk,
    99 s in memory). Evaluations outside the suite run where their cache is (README)."""
    chosen = os.environ.get("SWEGREEN_TEST_TMP", "")
    if chosen:
        return None if chosen == "disk" else chosen
    try:
        shm = os.statvfs("/dev/shm")
    except OSError:
        return None
    free = shm.f_bavail * shm.f_frsize
    return "/dev/shm" if free >= TMPFS_NEEDS and _available_memory() >= MEMORY_NEEDS else None


def _available_memory() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@pytest.fixture(autouse=True)
def _sandbox_can_reach_tmp_path(request: pytest.FixtureRequest) -> None:
    """Test-made caches live under tmp_path (mode 0700): open the way for the sandbox."""
    if "tmp_path" in request.fixturenames:
        open_to_sandbox(request.getfixturevalue("tmp_path"))


def open_to_sandbox(path: Path) -> Path:
    """Let the sandbox's uid pass through pytest's 0700 temp roots to reach ``path`` (as a
    user's cache dir must be reachable; Isolation.check_reachable)."""
    for parent in [path, *path.parents]:
        if parent.exists() and parent.stat().st_uid == os.geteuid():
            mode = parent.stat().st_mode
            if not mode & 0o001:
                parent.chmod((mode & 0o7777) | 0o011)
    return path


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return open_to_sandbox(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="session")
def sample(session_cache: Path) -> SampleBenchmark:
    return build_sample(session_cache / "sample")


@pytest.fixture(scope="session")
def isolation() -> Isolation:
    return Isolation.probe()


@pytest.fixture(scope="session")
def host_env() -> dict[str, str]:
    """What a composition root passes: the real environment. Scrubbing it is the engine's job."""
    return host_environment()


@pytest.fixture
def settings(session_cache: Path, tmp_path: Path) -> LocalSettings:
    # conda's channels are out of this machine's reach: tests that install interpreters
    # serve a channel of their own (tests/conda_channel.py)
    return LocalSettings(
        output_dir=tmp_path / "results", cache_dir=session_cache, python_downloads=False
    )


def sample_config(sample: SampleBenchmark, **overrides: Any) -> EvalConfig:
    values: dict[str, Any] = {
        "dataset": str(sample.dataset),
        "repo_url_template": sample.url_template,
        "max_rows": -1,
        "max_concurrent_rows": 2,
    }
    values.update(overrides)
    return EvalConfig(**values)


RunSample = Callable[..., RunOutcome]


def run_rows(engine: Engine, cfg: EvalConfig, run_id: str, patches: str = "gold") -> RunOutcome:
    """``engine`` over ``cfg``'s selection with ``patches``, as a command runs it (the
    engine's own retry pauses kept)."""
    import asyncio

    from swegreen.core.sources import source_for

    dataset = load_dataset(cfg.dataset)
    return asyncio.run(
        engine.runner.run(
            run_id=run_id,
            dataset=dataset,
            instances=select_instances(dataset, cfg.selection()),
            source=source_for(patches),
            config=cfg,
        )
    )


@pytest.fixture
def run_sample(
    sample: SampleBenchmark, settings: LocalSettings, isolation: Isolation, host_env: dict[str, str]
) -> RunSample:
    """Evaluate the sample (or a selection of it) with a patch source; returns the outcome."""
    import asyncio

    from swegreen.core.sources import source_for

    def run(
        patches: str | PatchSource,
        run_id: str = "test-run",
        engine: Engine | None = None,
        **config: Any,
    ) -> RunOutcome:
        cfg = sample_config(sample, **config)
        dataset = load_dataset(cfg.dataset)
        instances = select_instances(dataset, cfg.selection())
        source = source_for(patches) if isinstance(patches, str) else patches
        eng = engine or build_engine(settings, cfg, host_env, isolation=isolation)
        eng.runner.retry_backoff = (0.0,)
        try:
            return asyncio.run(
                eng.runner.run(
                    run_id=run_id, dataset=dataset, instances=instances, source=source, config=cfg
                )
            )
        finally:
            if engine is None:
                eng.close()

    return run


@pytest.fixture
def sample_engine(
    sample: SampleBenchmark, settings: LocalSettings, isolation: Isolation, host_env: dict[str, str]
) -> Iterator[Engine]:
    """An engine over the sample, in the default isolation, closed afterwards."""
    eng = build_engine(settings, sample_config(sample), host_env, isolation=isolation)
    yield eng
    eng.close()


def sample_instance(sample: SampleBenchmark, instance_id: str) -> Instance:
    dataset = load_dataset(str(sample.dataset))
    return next(i for i in dataset.instances if i.instance_id == instance_id)


@pytest.fixture(scope="session")
def a2a03_python() -> Path:
    """A separate interpreter with a2a-sdk 0.3 (client and server), the version AgentBeats'
    runners and many public participants speak (tests/a2a/venv03.py)."""
    return venv03.a2a03_python()
