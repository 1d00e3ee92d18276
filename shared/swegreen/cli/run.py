"""`swegreen run`: evaluate patches on a dataset, with progress, resumable."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from typing import TYPE_CHECKING, Any

from swegreen.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_ROWS_ERRORED,
    LOCAL_ENV_KEYS,
    checked_run_id,
    new_run_id,
    overrides,
    print_outcome,
    said,
    scenario_path,
)
from swegreen.core.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console

    from swegreen.core.config import EvalConfig
    from swegreen.core.results import InstanceResult
    from swegreen.core.scrub import Scrubber
    from swegreen.evaluation.engine import LocalSettings
    from swegreen.evaluation.runner import RunOutcome


def run_command(
    args: argparse.Namespace,
    settings: LocalSettings,
    env: dict[str, str],
    console: Console,
    scrubber: Scrubber,
) -> int:
    from swegreen.core.classify import Status
    from swegreen.core.config import load_config
    from swegreen.sample import build_sample

    given = overrides(args)
    if args.patches is None:  # --run-id alone: the run's own patches, dataset and selection
        if not args.run_id:
            raise ConfigError(
                "--patches is needed to start a run (gold, empty, or a predictions file); "
                "--run-id alone resumes a run"
            )
        run_id = checked_run_id(args.run_id)
        patches, config = resumed(run_id, settings, env, given)
    else:
        run_id = checked_run_id(args.run_id) if args.run_id else new_run_id(args.patches)
        if args.sample:
            sample = build_sample(settings.cache_dir / "sample")
            given.setdefault("dataset", str(sample.dataset))
            given.setdefault("repo_url_template", sample.url_template)
        config = load_config(scenario_path(args), env, given, env_extra=LOCAL_ENV_KEYS)
        patches = args.patches
    outcome = evaluate(
        config,
        patches,
        run_id,
        settings,
        env,
        console,
        args.retry_errors,
        live=not args.no_progress,
        scrubber=scrubber,
    )
    if outcome is None:
        return EXIT_INTERRUPTED
    errors = [r for r in outcome.results if r.status is Status.ERROR]
    if errors:
        advice = retry_advice(errors, run_id)
        console.print(
            f"{len(errors)} of {len(outcome.results)} row(s) ended in error "
            f"(exit code {EXIT_ROWS_ERRORED}); their logs are under "
            f"{settings.output_dir / run_id}. {advice}.",
            markup=False,
        )
        return EXIT_ROWS_ERRORED
    return EXIT_OK


def retry_advice(errors: list[InstanceResult], run_id: str) -> str:
    """Whether a retry may help: it does for a failure of the moment; the others fail the
    same way until what their "to fix" line says is done (rows from before this was
    recorded: it may)."""
    again = [r for r in errors if r.retry_may_help is not False]
    retry = f"swegreen run --run-id {run_id} --retry-errors"
    if not again:
        return f"each fails the same way until what its line above says is done, then `{retry}`"
    advice = (
        f"{len(again)} of them failed for a reason of the moment: `{retry}` evaluates them again"
    )
    if len(again) < len(errors):
        advice += (
            f"; the other {len(errors) - len(again)} fail the same way until what their "
            "line above says is done"
        )
    return advice


REDACTED = "[redacted:"  # how the store keeps a secret of the host (core/scrub.py)


def resumed(
    run_id: str, settings: LocalSettings, env: dict[str, str], given: dict[str, Any]
) -> tuple[str, EvalConfig]:
    """A stored run's patches and config, as it was started (flags given now on top)."""
    from swegreen.core.config import build_config, config_from_env
    from swegreen.stores.sqlite import SqliteStore

    store = SqliteStore(settings.store_path)
    try:
        record = store.get_run(run_id)
    finally:
        store.close()
    if record is None:
        raise ConfigError(
            f"no run {run_id!r} in {settings.store_path}: start it with --patches (gold, "
            "empty, or a predictions file)"
        )
    if record.patch_source.startswith("a2a:"):
        raise ConfigError(
            f"run {run_id!r} is an assessment of the green agent: send the same assessment "
            "to it again to resume it"
        )
    if record.local_config is None:
        raise ConfigError(
            f"run {run_id!r} was started before runs kept their config: resume it with "
            "--patches and the dataset and selection flags it was started with"
        )
    patches = record.patches_path or record.patch_source
    if held := sorted(
        k for k, v in record.local_config.items() if k not in given and REDACTED in json.dumps(v)
    ):
        flags = ", ".join(f"--{k.replace('_', '-')}" for k in held)
        raise ConfigError(
            f"run {run_id!r} was started with a secret in {', '.join(held)}, which the store "
            f"does not keep: resume it with --run-id {run_id} and {flags} again"
        )
    config = build_config(
        ("environment", config_from_env(env, LOCAL_ENV_KEYS)),
        (f"run {run_id}", record.local_config),
        ("command line", given),
    )
    return patches, config


def evaluate(
    config: EvalConfig,
    patches: str,
    run_id: str,
    settings: LocalSettings,
    env: dict[str, str],
    console: Console,
    retry_errors: bool,
    live: bool,
    scrubber: Scrubber,
) -> RunOutcome | None:
    from swegreen.core.dataset import load_dataset, select_instances
    from swegreen.core.labels import check_labels
    from swegreen.core.sources import PredictionsSource, source_for
    from swegreen.evaluation.engine import build_engine
    from swegreen.reports.console import ProgressView
    from swegreen.sample import resolve_sample

    config = resolve_sample(config, settings.cache_dir)  # the request's name works here too
    dataset = load_dataset(
        config.dataset,
        config.split,
        config.dataset_revision,
        parsed_cache=settings.parsed_datasets,
        snapshots=settings.dataset_snapshots,
    )
    source = source_for(patches)
    if isinstance(source, PredictionsSource):
        source.check_against(i.instance_id for i in dataset.instances)
        if config.row_limit()[1] == "max_rows default":
            # a predictions file asks for its own rows, all of them (as the official
            # harness evaluates one), unless the run names a limit or other rows
            config = config.model_copy(update={"instance_ids": tuple(sorted(source.predictions))})
    instances = select_instances(dataset, config.selection())
    chosen_by = config.row_limit()[1]
    whole = len(select_instances(dataset, config.selection().model_copy(update={"max_rows": -1})))
    if not instances:
        raise ConfigError(
            "the selection is empty: check instance_ids, repos, max_rows and sharding"
        )
    if (labels := check_labels(instances)) is not None and (warning := labels.warning()):
        console.print(said("warning:", "yellow", warning))
    console.print(
        said(
            f"Run {run_id}:",
            "bold",
            f"{len(instances)} instance(s) of {dataset.name} with {source.name} patches, "
            f"{config.max_concurrent_rows} at a time"
            + (
                f" ({len(instances)} of {whole} rows: --max-rows -1 for all)"
                if chosen_by == "max_rows default" and len(instances) < whole
                else ""
            ),
        )
    )
    view = ProgressView(console, len(instances), run_id, live)
    engine = build_engine(settings, config, env, progress=view, scrubber=scrubber)
    for note in engine.notes:
        console.print(said("note:", "yellow", note))
    try:
        with view:
            outcome = run_until_done(
                engine.runner.run(
                    run_id=run_id,
                    dataset=dataset,
                    instances=instances,
                    source=source,
                    config=config,
                    provenance={"sandbox": engine.describe()},
                    retry_errors=retry_errors,
                )
            )
    finally:
        engine.close()
    if outcome is None:
        console.print()  # off the progress line the interrupt left
        console.print(
            said(
                "interrupted.",
                "yellow",
                f"Finished rows are stored; resume with: swegreen run --run-id {run_id}",
            )
        )
        return None
    print_outcome(console, outcome, settings)
    return outcome


def run_until_done(coro: Any) -> RunOutcome | None:
    """Run the evaluation; SIGINT/SIGTERM cancel it cleanly (sandboxes killed, rows kept)."""

    async def main() -> RunOutcome:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        assert task is not None
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        return await coro

    try:
        return asyncio.run(main())
    except (asyncio.CancelledError, KeyboardInterrupt):
        return None
