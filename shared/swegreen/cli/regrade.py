"""`swegreen regrade`: a finished run graded again from its saved logs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from swegreen.cli.common import print_outcome
from swegreen.core.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console

    from swegreen.core.scrub import Scrubber
    from swegreen.evaluation.engine import LocalSettings


async def regrade(
    run_id: str, settings: LocalSettings, env: dict[str, str], console: Console, scrubber: Scrubber
) -> int:
    from swegreen.core.config import EvalConfig
    from swegreen.core.dataset import load_dataset
    from swegreen.evaluation.engine import build_engine

    engine = build_engine(settings, EvalConfig(), env, scrubber=scrubber)
    try:
        record = engine.store.get_run(run_id)
        if record is None:
            raise ConfigError(f"no run {run_id!r} in {settings.store_path}")
        dataset = load_dataset(
            record.dataset,
            record.split,
            record.dataset_revision,
            parsed_cache=settings.parsed_datasets,
            snapshots=settings.dataset_snapshots,
        )
        if dataset.digest != record.dataset_digest:
            raise ConfigError(
                f"the dataset {record.dataset} changed since run {run_id} (digest differs)"
            )
        by_id = dataset.by_id()
        changed = 0
        results = engine.store.get_results(run_id)
        for iid, stored in results.items():
            fresh = engine.evaluator.regrade(
                run_id, by_id[iid], stored, settings.cache_dir / "work"
            )
            if (fresh.status, fresh.reason, fresh.counts) != (
                stored.status,
                stored.reason,
                stored.counts,
            ):
                changed += 1
                console.print(f"  {iid}: {stored.status.value} -> {fresh.status.value}")
            engine.store.save_result(run_id, fresh)
        instances = [by_id[i] for i in record.instance_ids if i in by_id]
        outcome = await engine.runner.publish(record, instances, {"agent": record.patch_source})
        missing = len(instances) - len(results)
        unfinished = (
            f" ({missing} of its {len(instances)} rows have no result yet)" if missing else ""
        )
        console.print(
            f"re-graded {len(results)} row(s) of {run_id} from saved logs; {changed} changed"
            + unfinished
        )
        print_outcome(console, outcome, settings)
        return 0
    finally:
        engine.close()
