"""Builds the local adapters (SQLite store, disk artifacts, git cache, environment cache,
sandbox) into an ``Evaluator`` and a ``Runner``. Composition roots call ``build_engine``
with settings they parsed; nothing here reads the process environment by itself."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from swegreen.core.config import EvalConfig
from swegreen.core.ports import ArtifactStore, ProgressCallback
from swegreen.core.recipes import RecipeBook, known_network_instances
from swegreen.core.scrub import Scrubber
from swegreen.environments.build_sources import OfflineSources
from swegreen.environments.catalog import builtin_recipes
from swegreen.environments.compile_cache import CompileCache
from swegreen.environments.dated_index import DEFAULT_UPSTREAM, DatedIndex, index_env
from swegreen.environments.interpreters import InterpreterSearch
from swegreen.environments.manager import EnvManager
from swegreen.evaluation.base_validation import BaseValidator
from swegreen.evaluation.evaluate import Evaluator
from swegreen.evaluation.runner import Runner
from swegreen.evaluation.settings import LocalSettings
from swegreen.evaluation.testbed import TestbedOptions
from swegreen.evaluation.testbeds import Testbeds
from swegreen.repositories.repo_cache import RepoCache
from swegreen.sandbox.isolation import Isolation
from swegreen.sandbox.local import LocalSandbox
from swegreen.stores.artifacts import LocalArtifacts, ScrubbedArtifacts
from swegreen.stores.sqlite import SqliteStore


@dataclass
class Engine:
    runner: Runner
    evaluator: Evaluator
    testbeds: Testbeds
    store: SqliteStore
    artifacts: ScrubbedArtifacts
    isolation: Isolation
    scrubber: Scrubber

    def close(self) -> None:
        self.store.close()
        self.testbeds.close()


def build_testbeds(
    settings: LocalSettings,
    config: EvalConfig,
    host_env: Mapping[str, str],
    recipes: RecipeBook | None = None,
    isolation: Isolation | None = None,
) -> Testbeds:
    """Git cache, environment cache and sandbox under ``settings.cache_dir``."""
    cache = settings.cache_dir
    isolation = isolation or Isolation.probe(config.isolation)
    cache.mkdir(parents=True, exist_ok=True)
    isolation.check_reachable(cache)
    return Testbeds(
        repos=RepoCache(cache / "repos", config.repo_url_template, host_env),
        recipes=recipes or builtin_recipes(),
        envs=EnvManager(
            cache / "envs",
            InterpreterSearch.from_environ(
                host_env, allow_install=settings.allow_python_install, given=settings.pythons
            ),
            host_env,
            rebuild_failed=settings.rebuild_envs,
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
    return Evaluator(
        testbeds=testbeds,
        artifacts=artifacts,
        base_validator=base,
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
    isolation = isolation or Isolation.probe(config.isolation)
    scrubber = Scrubber.from_env(host_env) if scrubber is None else scrubber
    artifacts = ScrubbedArtifacts(LocalArtifacts(settings.output_dir), scrubber)
    store = SqliteStore(settings.store_path)
    evaluator = build_evaluator(settings, config, host_env, artifacts, recipes, isolation, scrubber)
    runner = Runner(evaluator=evaluator, store=store, artifacts=artifacts, progress=progress)
    return Engine(runner, evaluator, evaluator.testbeds, store, artifacts, isolation, scrubber)
