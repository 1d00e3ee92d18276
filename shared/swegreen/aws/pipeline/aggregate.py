"""Aggregate: the run's leaderboard, rows and reports published, lost rows written as
errors."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from swegreen.aws.pipeline.base import PipelineBase
from swegreen.aws.pipeline.models import (
    RESOLVE_WRITERS,
)
from swegreen.core.errors import EvaluationFailure
from swegreen.core.metrics import RunMetrics
from swegreen.core.results import InstanceResult, utcnow
from swegreen.core.rows import error_row
from swegreen.reports.html import render_html
from swegreen.reports.publish import pages, result_row, run_report
from swegreen.stores import artifacts as art


class AggregateStep(PipelineBase):
    """Aggregate."""

    def aggregate(self, run_id: str) -> dict[str, Any]:
        """The leaderboard of the run: always written, whatever rows failed."""
        record = self.store.get_run(run_id)
        if record is None:
            raise ValueError(f"no run {run_id}")
        stored = self.store.get_results(run_id)
        results = [stored[i] for i in record.instance_ids if i in stored]
        missing = [i for i in record.instance_ids if i not in stored]

        def lost(iid: str) -> InstanceResult:
            """A row the Map lost: an error row, never a silent gap."""
            inst = self.instance(run_id, iid)
            failure = EvaluationFailure("the row's step function iteration ended without a row")
            row = error_row(inst, None, failure, 1, utcnow(), time.monotonic())
            self.store.save_result(run_id, row)
            return row

        with ThreadPoolExecutor(RESOLVE_WRITERS) as pool:  # the stores are thread-safe
            results += pool.map(lost, missing)
        metrics = RunMetrics.from_results(results)
        model = record.config.get("green_agent_model", "")
        role = (
            record.patch_source.removeprefix("a2a:")
            if record.patch_source.startswith("a2a:")
            else "agent"
        )
        row = result_row(record, metrics, results, model, {role: record.patch_source})
        prefix = f"{self.settings.runs_prefix}{run_id}/"
        document = {"participants": {role: record.patch_source}, "results": [row]}
        self._put(prefix + art.RESULTS, json.dumps(document, indent=2))
        # What the API serves (GET /runs/{id}/results[/{page}]): pages, as its responses
        # stop at 10 MB and a 10,000-row run's results.json is larger.
        for page in pages(document):
            self._put(f"{prefix}{art.RESULT_PAGES}{page['page']}.json", json.dumps(page))
        self._put(prefix + art.INSTANCES, "".join(r.model_dump_json() + "\n" for r in results))
        self._put(
            prefix + art.RUN_REPORT, json.dumps(run_report(record.instance_ids, results), indent=4)
        )
        finished = record.model_copy(
            update={"state": "finished", "summary": metrics.result_row(model)}
        )
        finished.provenance["finished_at"] = utcnow()
        self.store.update_run(finished)
        self.s3.put_object(
            Bucket=self.settings.bucket,
            Key=prefix + art.REPORT_HTML,
            Body=render_html(finished, results, metrics).encode(),
            ContentType="text/html; charset=utf-8",
        )
        return {
            "run_id": run_id,
            "results": f"s3://{self.settings.bucket}/{prefix}{art.RESULTS}",
            "summary": metrics.result_row(model),
        }
