"""Builds the local adapters (SQLite store, disk artifacts, git cache, environment cache,
sandbox) into an ``Evaluator`` and a ``Runner``. Composition roots call ``build_engine``
with settings they parsed; nothing here reads the process environment by itself."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from swegreen.core.config import EvalConfig
from swegreen.core.errors import ConfigError
from swegreen.core.ports import ArtifactStore, ProgressCallback, RowEvaluator
from swegreen.core.recipes import RecipeBook, known_network_instances
from swegreen.core.scrub import Scrubber
from swegreen.environments.build_sources import OfflineSources
from swegreen.environments.catalog import builtin_recipes
from swegreen.environments.compile_cache import CompileCache
from swegreen.environments.conda_pythons import CondaPythons
from swegreen.environments.dated_index import DEFAULT_UPSTREAM, DatedIndex, index_env
from swegreen.environments.interpreters import InterpreterSearch
from swegreen.environments.manager import EnvManager
from swegreen.evaluation.base_validation import BaseValidator
from swegreen.evaluation.evaluate import Evaluator
from swegreen.evaluation.regression_check import RegressionCheck
from swegreen.evaluation.runner import Runner
from swegreen.evaluation.settings import LocalSettings
from swegreen.evaluation.testbed import TestbedOptions
from swegreen.evaluation.testbeds import Testbeds
from swegreen.evaluation.workbench import Workbenches
from swegreen.processes.cache_room import GIB, CacheLease, DiskReserve
from swegreen.repositories.repo_cache import RepoCache
from swegreen.sandbox.isolation import Isolation
from swegreen.sandbox.local import LocalSandbox
from swegreen.sandbox.tools import require_tools
from swegreen.stores.artifacts import LocalArtifacts, ScrubbedArtifacts
from swegreen.stores.sqlite import SqliteStore

if TYPE_CHECKING:  # the Docker backend (and the docker SDK) load only when it is used
    from swegreen.evaluation.docker_backend import DockerEvaluator
    from swegreen.evaluation.docker_workbench import DockerWorkbenches


@dataclass
class Engine:
    runner: Runner
    evaluator: RowEvaluator
    testbeds: Testbeds | None  # None on the Docker backend: no environment is built here
    store: SqliteStore
    artifacts: ScrubbedArtifacts
    isolation: Isolation | None
    scrubber: Scrubber
    remarks: list[str] = field(default_factory=list)  # what the user should know of this engine

    def close(self) -> None:
        self.store.close()
        if self.testbeds is not None:
            self.testbeds.close()
        if self.on_docker:
            self.evaluator.close()  # type: ignore[attr-defined]

    def describe(self) -> dict[str, object]:
        """Where participant code runs, for a run's provenance."""
        if self.on_docker:
            return {"backend": "docker", **self.evaluator.describe()}  # type: ignore[attr-defined]
        assert self.isolation is not None
        return {"backend": "engine", **self.isolation.describe()}

    def workbenches(self) -> Workbenches | DockerWorkbenches:
        """Where interactive participants' commands run: a container of the row's image
        on the Docker backend, else a copy of the prepared workspace in the sandbox."""
        if self.on_docker:
            from swegreen.evaluation.docker_workbench import DockerWorkbenches

            return DockerWorkbenches(self.evaluator)  # type: ignore[arg-type]
        assert self.testbeds is not None
        return Workbenches(self.testbeds)

    @property
    def on_docker(self) -> bool:
        return getattr(self.evaluator, "backend", "") == "docker"

    @property
    def notes(self) -> list[str]:
        return [*(self.isolation.notes if self.isolation is not None else []), *self.remarks]


def choose_backend(config: EvalConfig, host_env: Mapping[str, str]) -> str:
    """``engine`` or ``docker``; ``auto`` asks the Docker engine. A ``docker`` backend
    whose daemon does not answer is refused here, before any row."""
    if config.environments == "engine":
        return "engine"
    from swegreen.containers.daemon import answers

    why_not = answers(host_env)
    if why_not is None:
        return "docker"
    if config.environments == "auto":
        return "engine"
    raise ConfigError(
        f"environments = 'docker' but {why_not}; set DOCKER_HOST to the engine's socket (on "
        "AgentBeats: the manifest mounts framework.docker at /run/swegreen/docker.sock and names "
        "it in DOCKER_HOST) or use environments = 'engine'"
    )


def build_docker_evaluator(
    config: EvalConfig,
    host_env: Mapping[str, str],
    artifacts: ScrubbedArtifacts,
    recipes: RecipeBook | None = None,
) -> DockerEvaluator:
    from swegreen.containers.container import Limits
    from swegreen.containers.daemon import connect
    from swegreen.containers.images import GIB, Images
    from swegreen.evaluation.docker_backend import DockerEvaluator

    client = connect(host_env)
    return DockerEvaluator(
        client=client,
        images=Images(
            client,
            pull=config.docker_pull,
            reserve_bytes=int(config.docker_disk_reserve_gb * GIB),
        ),
        recipes=recipes or builtin_recipes(),
        artifacts=artifacts,
        image_source=config.docker_images,
        limits=Limits(memory_bytes=config.docker_memory_mb * 1024 * 1024, pids=config.docker_pids),
        eval_timeout=config.eval_timeout,
        network_instances=frozenset(config.network_instances),
        max_patch_bytes=config.max_patch_bytes,
        scrub=artifacts.scrub,
    )


def build_testbeds(
    settings: LocalSettings,
    config: EvalConfig,
    host_env: Mapping[str, str],
    recipes: RecipeBook | None = None,
    isolation: Isolation | None = None,
) -> Testbeds:
    """Git cache, environment cache and sandbox under ``settings.cache_dir``."""
    cache = settings.cache_dir
    require_tools()
    isolation = isolation or Isolation.probe(config.isolation)
    cache.mkdir(parents=True, exist_ok=True)
    isolation.check_reachable(cache)
    return Testbeds(
        lease=CacheLease(cache, shared=True),
        repos=RepoCache(cache / "repos", config.repo_url_template, host_env),
        recipes=recipes or builtin_recipes(),
        envs=EnvManager(
            cache / "envs",
            InterpreterSearch.from_environ(
                host_env,
                given=settings.pythons,
                conda=CondaPythons(settings.conda_pythons_dir, settings.python_channels),
                downloads=settings.python_downloads,
            ),
            host_env,
            rebuild_failed=settings.rebuild_envs,
            content_keys=settings.content_keyed_envs,
            reserve=DiskReserve(cache, round(settings.disk_reserve_gb * GIB)),
            check_seals=isolation.mode == "landlock" and isolation.sandbox_uid is None,
            dated_index=DatedIndex(
                host_env.get("PIP_INDEX_URL") or DEFAULT_UPSTREAM, index_env(host_env)
            ),
        ),
        sandbox=LocalSandbox(isolation),
        options=TestbedOptions(
            work_root=cache / "work",
            eval_timeout=config.eval_timeout,
            memory_mb=settings.memory_mb,
            max_processes=settings.max_processes,
            disk_mb=settings.disk_mb,
            keep_workspaces=settings.keep_workspaces,
            network_instances=known_network_instances() | set(config.network_instances),
            env_files_at_base=config.env_files_at_base,
            copy_on_write=settings.copy_on_write,
            offline_installs=config.offline_installs,
        ),
        host_env=host_env,
        compile_cache=CompileCache.find(host_env) if settings.compile_cache else None,
        sources=OfflineSources(settings.offline_sources or cache / "sources"),
    )


def build_evaluator(
    settings: LocalSettings,
    config: EvalConfig,
    host_env: Mapping[str, str],
    artifacts: ArtifactStore,
    recipes: RecipeBook | None = None,
    isolation: Isolation | None = None,
    scrubber: Scrubber | None = None,
) -> Evaluator:
    """``artifacts`` is wrapped to redact ``scrubber``'s secrets (by default: those of
    ``host_env``), unless it already is a ``ScrubbedArtifacts``."""
    scrubber = Scrubber.from_env(host_env) if scrubber is None else scrubber
    if not isinstance(artifacts, ScrubbedArtifacts):
        artifacts = ScrubbedArtifacts(artifacts, scrubber)
    testbeds = build_testbeds(settings, config, host_env, recipes, isolation)
    base = (
        BaseValidator(testbeds, settings.cache_dir / "base-validation")
        if config.base_validation
        else None
    )
    check = (
        RegressionCheck(testbeds, settings.cache_dir / "regression-gold")
        if config.regression_check
        else None
    )
    return Evaluator(
        testbeds=testbeds,
        artifacts=artifacts,
        base_validator=base,
        regression_check=check,
        max_patch_bytes=config.max_patch_bytes,
        scrub=scrubber,
    )


def build_engine(
    settings: LocalSettings,
    config: EvalConfig,
    host_env: Mapping[str, str],
    progress: ProgressCallback | None = None,
    recipes: RecipeBook | None = None,
    isolation: Isolation | None = None,
    scrubber: Scrubber | None = None,
) -> Engine:
    """``scrubber`` (by default built from ``host_env``) redacts the host's secrets from
    every artifact and error detail the engine stores."""
    scrubber = Scrubber.from_env(host_env) if scrubber is None else scrubber
    artifacts = ScrubbedArtifacts(LocalArtifacts(settings.output_dir), scrubber)
    store = SqliteStore(settings.store_path)
    evaluator: RowEvaluator
    remarks: list[str] = []
    if choose_backend(config, host_env) == "docker":
        evaluator = build_docker_evaluator(config, host_env, artifacts, recipes)
        testbeds, isolation = None, None
        if config.base_validation:
            remarks.append(
                "base_validation runs on the engine's environments only: the Docker backend "
                "grades in the official images, where the base run is upstream's own"
            )
        if config.regression_check:
            remarks.append(
                "regression_check runs on the engine's environments only: this run's rows "
                "carry no regression flag"
            )
    else:
        isolation = isolation or Isolation.probe(config.isolation)
        evaluator = build_evaluator(
            settings, config, host_env, artifacts, recipes, isolation, scrubber
        )
        testbeds = evaluator.testbeds
    runner = Runner(
        evaluator=evaluator, store=store, artifacts=artifacts, progress=progress, scrub=scrubber
    )
    return Engine(runner, evaluator, testbeds, store, artifacts, isolation, scrubber, remarks)
