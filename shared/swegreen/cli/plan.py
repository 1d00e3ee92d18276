"""``swegreen plan``: a shard's worst case under an assessment_config, before submitting it.

The green agent refuses a platform request whose worst case does not fit the run step
(core/plan.py); this says so on the maintainer's machine first, with what would fit.
"""

from __future__ import annotations

import argparse
import json
import math

from rich.console import Console

from swegreen.core.config import build_config
from swegreen.core.errors import ConfigError
from swegreen.core.plan import plan, what_fits


def plan_command(args: argparse.Namespace, console: Console) -> int:
    """Prints the plan; exit 0 when it fits, 1 when it does not."""
    try:
        raw = json.loads(args.config)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"--config is not JSON ({exc.msg}); give the assessment_config, e.g. "
            '{"num_shards": 20, "max_concurrent_rows": 5}'
        ) from None
    if not isinstance(raw, dict):
        raise ConfigError("--config must be a JSON object: the assessment_config")
    if args.rows < 1 or args.participants < 1:
        raise ConfigError("--rows and --participants must be at least 1")
    config = build_config(("--config", raw))
    budget = config.time_budget() if config.time_budget_minutes is not None else args.budget
    found = plan(
        rows=math.ceil(args.rows / config.num_shards),
        participants=args.participants,
        concurrent=config.max_concurrent_rows,
        participant_timeout=config.participant_timeout,
        eval_timeout=config.eval_timeout,
        backend=args.backend,
        budget_minutes=budget or None,
    )
    shards = f"{args.rows} rows in {config.num_shards} shard(s): "
    console.print(shards + found.describe())
    if found.fits:
        return 0
    console.print(what_fits(found))
    return 1
