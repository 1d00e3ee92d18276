"""Command line: run evaluations, the demo, re-grading and reports.

``main(argv) -> int`` is the whole program; exceptions of the project's family become a
one-line message and exit code 2, an interrupted run exits 130 and says how to resume.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swegreen import __version__
from swegreen.core.errors import ConfigError, SweGreenError
from swegreen.core.ids import check_id, safe_id_suggestion

# dataset.DEFAULT_DATASET, here so that --help imports nothing more
DEFAULT_DATASET_NAME = "SWE-bench/SWE-bench_Verified"

# Everything heavier is imported by the command that needs it: `--help`, `--version` and a
# bad flag answer without loading the grader (swebench pulls datasets and docker).
if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from swegreen.core.config import EvalConfig
    from swegreen.core.ports import RunRecord
    from swegreen.core.scrub import Scrubber
    from swegreen.evaluation.engine import LocalSettings
    from swegreen.evaluation.runner import RunOutcome

LOCAL_ENV_KEYS = frozenset(
    {
        "output_dir",
        "cache_dir",
        "memory_mb",
        "disk_mb",
        "max_processes",
        "offline_sources",
        "pythons",
    }
)
# Exit codes (docs/usage.md): scripts tell a run that could not start from one that
# finished with error rows, and both from an interrupted one.
EXIT_OK = 0
EXIT_UNEXPECTED = 1  # demo: a verdict other than the expected one
EXIT_CANNOT_START = 2  # bad config, dataset or input; unavailable sandbox; nothing ran
EXIT_ROWS_ERRORED = 3  # the run finished, but some rows are `error` (see the reasons)
EXIT_INTERRUPTED = 130  # resumable with the same --run-id


def _config_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "evaluation config (overrides scenario.toml [config] and SWEGREEN_* variables)"
    )
    g.add_argument(
        "--scenario",
        type=Path,
        help="scenario.toml to read [config] from (default: ./scenario.toml if present)",
    )
    g.add_argument(
        "--dataset",
        help="hub id or local .jsonl/.json/.parquet (default: SWE-bench/SWE-bench_Verified)",
    )
    g.add_argument("--split", help="the dataset's split (default test)")
    g.add_argument("--dataset-revision", help="a hub dataset's revision (commit or tag)")
    g.add_argument("--max-rows", type=int, help="rows to evaluate, -1 for all (default 3)")
    g.add_argument("--instance-ids", help="comma-separated instance ids")
    g.add_argument("--repos", help="comma-separated repos, e.g. psf/requests")
    g.add_argument("--shard-index", type=int, help="this shard's index, from 0 (with --num-shards)")
    g.add_argument("--num-shards", type=int, help="split the selection into this many shards")
    g.add_argument("--max-concurrent-rows", type=int, help="rows evaluated at once (default 1)")
    g.add_argument("--eval-timeout", type=float, help="seconds per eval script (default 1800)")
    g.add_argument(
        "--max-attempts", type=int, help="tries when the infrastructure fails (default 3)"
    )
    g.add_argument(
        "--repo-url-template", help="where to clone from, e.g. /mirrors/{owner}__{name}.git"
    )
    g.add_argument(
        "--green-agent-model", help="litellm model for diagnoses (default ollama/qwen2.5-coder:7b)"
    )
    g.add_argument(
        "--base-validation",
        action="store_true",
        default=None,
        help="also run the tests on the base commit, to flag environment limits",
    )
    g.add_argument(
        "--env-files-at-base",
        action="store_true",
        default=None,
        help="read the recipe's requirements files at the base commit where the "
        "environment_setup_commit is missing from the source (recorded per row)",
    )
    g.add_argument(
        "--network-instances",
        help="instance ids whose test command keeps the network (comma-separated)",
    )
    g.add_argument(
        "--isolation",
        choices=["bwrap", "process"],
        help="sandbox for participant code: bwrap (default) or the weaker process mode, "
        "an explicit opt-in where bubblewrap cannot run (docs/security.md)",
    )


def _local_flags(p: argparse.ArgumentParser, evaluates: bool = True) -> None:
    """Where things are kept; with ``evaluates``, how evaluations run here too (only the
    commands that evaluate take those flags)."""
    g = p.add_argument_group("this machine")
    g.add_argument(
        "--output-dir", type=Path, help="results, artifacts and store (default ./results)"
    )
    g.add_argument(
        "--cache-dir",
        type=Path,
        help="repo/env caches (default ~/.cache/swegreen; /var/cache/swegreen for root)",
    )
    if not evaluates:
        return
    g.add_argument("--keep-workspaces", action="store_true", help="keep each instance's checkout")
    g.add_argument(
        "--allow-python-install", action="store_true", help="install missing interpreters with uv"
    )
    g.add_argument(
        "--python",
        action="append",
        metavar="VERSION=PATH",
        dest="pythons",
        help="use this interpreter for recipes that ask for VERSION (repeatable; e.g. "
        "3.5=/opt/python3.5/bin/python3.5; also SWEGREEN_PYTHONS)",
    )
    g.add_argument(
        "--offline-sources",
        type=Path,
        help="source archives builds download while they run, served when their sha256 is "
        "upstream's (default <cache-dir>/sources; docs/environments.md)",
    )
    g.add_argument(
        "--rebuild-envs",
        action="store_true",
        help="build again the environments whose earlier build failed (failures are "
        "remembered per environment until the recipe changes)",
    )
    g.add_argument(
        "--no-progress", action="store_true", help="plain lines instead of a progress bar"
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="swegreen", description="SWE-bench Verified evaluator with the official grader."
    )
    p.add_argument("--version", action="version", version=f"swegreen {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="evaluate patches on a dataset")
    run.add_argument(
        "--patches",
        required=True,
        help="gold, empty, or a SWE-bench predictions file (.jsonl/.json)",
    )
    run.add_argument(
        "--sample", action="store_true", help="use the bundled sample benchmark as the dataset"
    )
    run.add_argument("--run-id", help="name of the run; the same id resumes it (default: new)")
    run.add_argument(
        "--retry-errors", action="store_true", help="on resume, evaluate error rows again"
    )
    _config_flags(run)
    _local_flags(run)

    demo = sub.add_parser("demo", help="the sample benchmark with gold, empty and crafted patches")
    _local_flags(demo)
    demo.add_argument(
        "--max-concurrent-rows", type=int, default=2, help="rows evaluated at once (default 2)"
    )

    regrade = sub.add_parser("regrade", help="grade a finished run again from its saved logs")
    regrade.add_argument("--run-id", required=True, help="the stored run to grade again")
    _local_flags(regrade, evaluates=False)

    report = sub.add_parser("report", help="print a stored run's leaderboard, or list runs")
    report.add_argument("--run-id", help="omit to list runs")
    report.add_argument(
        "--html",
        nargs="?",
        const="",
        metavar="PATH",
        help="with --run-id: write the run's HTML report (default: report.html in its "
        "directory) and print where",
    )
    _local_flags(report, evaluates=False)

    sample = sub.add_parser("sample", help="build the sample benchmark and print where it is")
    _local_flags(sample, evaluates=False)

    upload = sub.add_parser(
        "upload-dataset",
        help="AWS: put a dataset where the pipeline reads it (the stack's bucket)",
    )
    where = upload.add_mutually_exclusive_group(required=True)
    where.add_argument("--stack", help="the deployed stack's name (its BucketName output)")
    where.add_argument("--bucket", help="the stack's bucket")
    upload.add_argument(
        "--dataset",
        default=DEFAULT_DATASET_NAME,
        help="hub id or local .jsonl/.json/.parquet (default: %(default)s)",
    )
    upload.add_argument("--split", default="test", help="hub split (default: test)")
    upload.add_argument(
        "--key", help="S3 key (default: where a request naming the dataset finds it)"
    )

    serve = sub.add_parser("serve", help="run the AgentBeats green agent (A2A server)")
    _server_flags(serve, 9009)
    serve.add_argument("--scenario", type=Path, help="scenario.toml whose [config] gives defaults")
    serve.add_argument(
        "--heartbeat", type=float, default=30.0, help="seconds between progress updates"
    )
    serve.add_argument(
        "--no-diagnoses", action="store_true", help="do not ask the model for diagnoses"
    )
    serve.add_argument(
        "--llm-mock-response", help="answer every model call with this text (offline)"
    )
    serve.add_argument(
        "--backend",
        choices=["local", "aws"],
        default="local",
        help="where rows are evaluated: here, or by the AWS pipeline (docs/aws.md)",
    )
    serve.add_argument("--api-url", help="aws: the front door's URL (the stack's ApiUrl)")
    serve.add_argument(
        "--api-auth",
        choices=["iam", "api_key"],
        default="iam",
        help="aws: SigV4 with the AWS credential chain, or the key in $SWEGREEN_API_KEY",
    )
    serve.add_argument("--api-region", help="aws: the API's region (default: from its URL)")
    serve.add_argument(
        "--api-poll", type=float, default=15.0, help="aws: seconds between progress checks"
    )
    _local_flags(serve)

    part = sub.add_parser("participant", help="run a reference participant (A2A server)")
    part.add_argument(
        "kind",
        choices=["gold", "empty", "llm", "agent", "scripted", "predictions"],
        help="gold/empty: fixed answers; llm: one model call; agent: a bash + submit loop in "
        "the green agent's interactive mode; scripted: test doubles (--mode); predictions: "
        "replay a predictions file",
    )
    _server_flags(part, 9019)
    part.add_argument(
        "--dataset",
        default="SWE-bench/SWE-bench_Verified",
        help="where gold patches come from (gold, scripted fenced/slow); swegreen:sample works",
    )
    part.add_argument(
        "--mode",
        default="prose",
        help="scripted: hang, prose, fenced, slow or http500; interactive ones: explore, "
        "greedy or snoop",
    )
    part.add_argument(
        "--snoop-path",
        action="append",
        default=[],
        help="scripted snoop: a host path it tries to read from the workspace (repeatable)",
    )
    part.add_argument(
        "--predictions", type=Path, help="predictions: a SWE-bench predictions file to replay"
    )
    part.add_argument(
        "--model", default="ollama/qwen2.5-coder:7b", help="llm, agent: a litellm model"
    )
    part.add_argument(
        "--llm-mock-responses",
        type=Path,
        help="agent: a JSON list of model answers, one per call, in order (offline)",
    )
    part.add_argument("--llm-mock-response", help="llm: answer every model call with this text")
    part.add_argument(
        "--repo-url-template", help="llm: clone from here instead of the task's repo_url"
    )
    _local_flags(part, evaluates=False)
    return p


def _server_flags(p: argparse.ArgumentParser, port: int) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=port, help=f"port to listen on (default {port})")
    p.add_argument(
        "--card-url", help="URL to advertise in the agent card (default http://HOST:PORT/)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from rich.console import Console

    from swegreen.core.scrub import Scrubber
    from swegreen.evaluation.engine import host_environment

    console = Console(stderr=False, highlight=False)
    env = host_environment()
    scrubber = Scrubber.from_env(env)  # the host's secrets, kept out of everything stored
    try:
        if args.command == "upload-dataset":
            return _upload_dataset(args, console)
        settings = _settings(args, env)
        if args.command == "run":
            return _run_command(args, settings, env, console, scrubber)
        if args.command == "demo":
            return _demo(args, settings, env, console, scrubber)
        if args.command == "regrade":
            return asyncio.run(_regrade(_run_id(args.run_id), settings, env, console, scrubber))
        if args.command == "report":
            run_id = _run_id(args.run_id) if args.run_id else None
            if args.html is not None and run_id is None:
                raise ConfigError("report --html needs --run-id (which run to render)")
            return _report(run_id, settings, env, console, args.html)
        if args.command == "serve":
            return _serve(args, settings, env, scrubber)
        if args.command == "participant":
            return _participant(args, settings)
        if args.command == "sample":
            from swegreen.sample import build_sample

            s = build_sample(settings.cache_dir / "sample")
            console.print(
                f"dataset: {s.dataset}\ncrafted predictions: {s.crafted}\n"
                f"repo_url_template: {s.url_template}\n"
                f"participant_repo_url_template: {s.participant_url_template}",
                markup=False,
            )
            return 0
    except SweGreenError as exc:
        console.print(_said("error:", "red", str(exc)))
        return EXIT_CANNOT_START
    raise AssertionError(args.command)


def _said(label: str, style: str, message: str) -> Text:
    """``label`` styled, then ``message`` as it is: a message is never read as markup (a
    ``[config]`` in it would vanish, a ``[/x]`` would raise)."""
    from rich.text import Text

    return Text.assemble((label, style), " ", message)


def _upload_dataset(args: argparse.Namespace, console: Console) -> int:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from swegreen.aws.dataset_upload import bucket_of_stack, upload_dataset

    try:
        bucket = args.bucket or bucket_of_stack(boto3.client("cloudformation"), args.stack)
        done = upload_dataset(boto3.client("s3"), bucket, args.dataset, args.split, args.key)
    except (BotoCoreError, ClientError) as exc:
        raise ConfigError(f"upload to the stack's bucket failed: {exc}") from exc
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    console.print(
        f"{done.rows} rows (digest {done.digest[:12]}) -> {done.uri}\n"
        f"a run's config reaches them with: {json.dumps(done.config)}",
        markup=False,
        soft_wrap=True,  # a line to copy, never broken
    )
    return 0


def _settings(args: argparse.Namespace, env: dict[str, str]) -> LocalSettings:
    from swegreen.evaluation.engine import LocalSettings, default_cache_dir

    output = args.output_dir or Path(env.get("SWEGREEN_OUTPUT_DIR", "results"))
    cache = args.cache_dir or Path(env.get("SWEGREEN_CACHE_DIR") or default_cache_dir(env))
    limits = {}
    for key in SANDBOX_LIMITS:
        raw = env.get(f"SWEGREEN_{key.upper()}")
        if raw is None or not raw.strip():
            continue
        if not raw.strip().isdigit() or int(raw) < 1:
            raise ConfigError(
                f"SWEGREEN_{key.upper()}={raw!r} is not a limit: give a whole number above 0 "
                f"({SANDBOX_LIMITS[key]})"
            )
        limits[key] = int(raw)
    return LocalSettings(
        output_dir=output,
        cache_dir=cache,
        keep_workspaces=getattr(args, "keep_workspaces", False),
        allow_python_install=getattr(args, "allow_python_install", False),
        rebuild_envs=getattr(args, "rebuild_envs", False),
        pythons=_pythons(getattr(args, "pythons", None), env),
        offline_sources=getattr(args, "offline_sources", None)
        or (Path(raw) if (raw := env.get("SWEGREEN_OFFLINE_SOURCES", "").strip()) else None),
        **limits,
    )


def _pythons(flags: list[str] | None, env: dict[str, str]) -> dict[str, Path]:
    from swegreen.environments.interpreters import parse_given

    try:
        given = parse_given(env.get("SWEGREEN_PYTHONS", ""))
        given.update(parse_given(",".join(flags or [])))
    except ValueError as exc:
        raise ConfigError(f"--python / SWEGREEN_PYTHONS: {exc}") from None
    return given


# The sandbox's limits, settings of the machine (an assessment request cannot change them).
SANDBOX_LIMITS = {
    "memory_mb": "MB of memory for one sandbox, and of address space for each process",
    "disk_mb": "MB one sandboxed run may add to its workspace and temp dirs",
    "max_processes": "processes in one sandbox",
}


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    keys = [
        "dataset",
        "split",
        "dataset_revision",
        "max_rows",
        "instance_ids",
        "repos",
        "shard_index",
        "num_shards",
        "max_concurrent_rows",
        "eval_timeout",
        "max_attempts",
        "repo_url_template",
        "green_agent_model",
        "base_validation",
        "env_files_at_base",
        "network_instances",
        "isolation",
    ]
    return {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}


def _scenario(args: argparse.Namespace) -> Path | None:
    if args.scenario is not None:
        return args.scenario
    default = Path("scenario.toml")
    return default if default.exists() else None


def _run_command(
    args: argparse.Namespace,
    settings: LocalSettings,
    env: dict[str, str],
    console: Console,
    scrubber: Scrubber,
) -> int:
    from swegreen.core.classify import Status
    from swegreen.core.config import load_config
    from swegreen.sample import build_sample

    run_id = _run_id(args.run_id) if args.run_id else _new_run_id(args.patches)
    overrides = _overrides(args)
    if args.sample:
        sample = build_sample(settings.cache_dir / "sample")
        overrides.setdefault("dataset", str(sample.dataset))
        overrides.setdefault("repo_url_template", sample.url_template)
    config = load_config(_scenario(args), env, overrides, env_extra=LOCAL_ENV_KEYS)
    outcome = _evaluate(
        config,
        args.patches,
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
    errored = sum(r.status is Status.ERROR for r in outcome.results)
    if errored:
        console.print(
            f"{errored} of {len(outcome.results)} row(s) ended in error "
            f"(exit code {EXIT_ROWS_ERRORED}); their reasons are above, their logs under "
            f"{settings.output_dir / run_id}. Re-run with --run-id {run_id} --retry-errors "
            "to evaluate them again.",
            markup=False,
        )
        return EXIT_ROWS_ERRORED
    return EXIT_OK


def _demo(
    args: argparse.Namespace,
    settings: LocalSettings,
    env: dict[str, str],
    console: Console,
    scrubber: Scrubber,
) -> int:
    from swegreen.core.config import EvalConfig
    from swegreen.sample import build_sample

    sample = build_sample(settings.cache_dir / "sample")
    console.print(_said("Sample benchmark", "bold", f"built in {sample.root}"))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    mismatches = 0
    for patches, expect in (("gold", "resolved"), ("empty", "no_op"), (str(sample.crafted), None)):
        config = EvalConfig(
            dataset=str(sample.dataset),
            repo_url_template=sample.url_template,
            max_rows=-1,
            max_concurrent_rows=args.max_concurrent_rows,
        )
        label = "crafted" if expect is None else patches
        outcome = _evaluate(
            config,
            patches,
            f"demo-{stamp}-{label}",
            settings,
            env,
            console,
            False,
            live=not args.no_progress,
            scrubber=scrubber,
        )
        if outcome is None:
            return EXIT_INTERRUPTED
        for r in outcome.results:
            want = expect or sample.expected[r.instance_id]["status"]
            if r.status.value != want:
                mismatches += 1
                console.print(
                    _said(
                        "unexpected:",
                        "red",
                        f"{label} {r.instance_id} is {r.status.value}, expected {want}",
                    )
                )
    if mismatches:
        console.print(f"[red]{mismatches} row(s) did not get the expected verdict[/]")
        return EXIT_UNEXPECTED
    console.print(
        "[green]All sample verdicts are as expected:[/] gold resolves every task, empty is "
        "no_op everywhere, crafted predictions cover every status."
    )
    return 0


def _evaluate(
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
    from swegreen.core.sources import PredictionsSource, source_for
    from swegreen.evaluation.engine import build_engine
    from swegreen.reports.console import ProgressView
    from swegreen.sample import resolve_sample

    config = resolve_sample(config, settings.cache_dir)  # the request's name works here too
    dataset = load_dataset(config.dataset, config.split, config.dataset_revision)
    instances = select_instances(dataset, config.selection())
    source = source_for(patches)
    if isinstance(source, PredictionsSource):
        source.check_against(i.instance_id for i in dataset.instances)
    if not instances:
        raise ConfigError(
            "the selection is empty: check instance_ids, repos, max_rows and sharding"
        )
    console.print(
        _said(
            f"Run {run_id}:",
            "bold",
            f"{len(instances)} instance(s) of {dataset.name} with {source.name} patches, "
            f"{config.max_concurrent_rows} at a time",
        )
    )
    view = ProgressView(console, len(instances), run_id, live)
    engine = build_engine(settings, config, env, progress=view, scrubber=scrubber)
    for note in engine.isolation.notes:
        console.print(_said("note:", "yellow", note))
    try:
        with view:
            outcome = _run_until_done(
                engine.runner.run(
                    run_id=run_id,
                    dataset=dataset,
                    instances=instances,
                    source=source,
                    config=config,
                    provenance={"sandbox": engine.isolation.describe()},
                    retry_errors=retry_errors,
                )
            )
    finally:
        engine.close()
    if outcome is None:
        console.print(
            _said(
                "interrupted.", "yellow", f"Finished rows are stored; resume with --run-id {run_id}"
            )
        )
        return None
    _print_outcome(console, outcome, settings)
    return outcome


def _run_until_done(coro: Any) -> RunOutcome | None:
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


def _print_outcome(console: Console, outcome: RunOutcome, settings: LocalSettings) -> None:
    from swegreen.reports.console import leaderboard_table, reasons_line

    run_id = outcome.record.run_id
    console.print(leaderboard_table(outcome.metrics, f"Leaderboard: {run_id}"))
    console.print(f"reasons: {reasons_line(outcome.metrics)}", markup=False)
    if outcome.resumed:
        console.print(
            f"resumed: {outcome.resumed} row(s) were already stored, "
            f"{outcome.evaluated} evaluated now"
        )
    console.print(
        f"results: {settings.output_dir / run_id / 'results.json'}  "
        f"rows: {settings.output_dir / run_id / 'instances.jsonl'}\n",
        markup=False,
    )


async def _regrade(
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
        dataset = load_dataset(record.dataset, record.split, record.dataset_revision)
        if dataset.digest != record.dataset_digest:
            raise ConfigError(
                f"the dataset {record.dataset} changed since run {run_id} (digest differs)"
            )
        by_id = dataset.by_id()
        changed = 0
        for iid, stored in engine.store.get_results(run_id).items():
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
        console.print(
            f"re-graded {len(instances)} row(s) of {run_id} from saved logs; {changed} changed"
        )
        _print_outcome(console, outcome, settings)
        return 0
    finally:
        engine.close()


def _report(
    run_id: str | None,
    settings: LocalSettings,
    env: dict[str, str],
    console: Console,
    html: str | None = None,
) -> int:
    from swegreen.core.metrics import RunMetrics
    from swegreen.reports.console import leaderboard_table, reasons_line
    from swegreen.stores.sqlite import SqliteStore

    store = SqliteStore(settings.store_path)
    try:
        if run_id is None:
            for rec in store.list_runs():
                if rec.state == "finished":
                    total = (rec.summary or {}).get("total_instances", "?")
                    resolved = (rec.summary or {}).get("resolved_pct")
                    share = f"{resolved:.1%}" if isinstance(resolved, float) else "-"
                    line = f"{rec.run_id}  finished  {rec.patch_source}  {total} rows  "
                    line += f"resolved {share}"
                else:  # killed, or still running in another process
                    done = len(set(store.get_results(rec.run_id)) & set(rec.instance_ids))
                    line = f"{rec.run_id}  not finished  {rec.patch_source}  {done} of "
                    line += f"{len(rec.instance_ids)} rows stored  {_resume_hint(rec)}"
                console.print(line, markup=False)
            return 0
        record = store.get_run(run_id)
        if record is None:
            raise ConfigError(f"no run {run_id!r} in {settings.store_path}")
        results = [r for i, r in store.get_results(run_id).items() if i in set(record.instance_ids)]
        metrics = RunMetrics.from_results(results)
        state = record.state if record.state == "finished" else "not finished"
        console.print(leaderboard_table(metrics, f"Leaderboard: {run_id} ({state})"))
        console.print(f"reasons: {reasons_line(metrics)}", markup=False)
        if record.state != "finished":
            console.print(
                f"{len(results)} of {len(record.instance_ids)} rows stored; "
                + _resume_hint(record),
                markup=False,
            )
        if html is not None:
            from swegreen.reports.html import render_html
            from swegreen.stores.artifacts import REPORT_HTML, atomic_write

            target = Path(html) if html else settings.output_dir / run_id / REPORT_HTML
            target.parent.mkdir(parents=True, exist_ok=True)
            run_dir = settings.output_dir / run_id
            page = render_html(
                record,
                results,
                metrics,
                lambda iid, name: (run_dir / "instances" / iid / name).exists(),
            )
            atomic_write(target, page.encode())
            console.print(f"HTML report: {target}", markup=False)
        return 0
    finally:
        store.close()


def _resume_hint(record: RunRecord) -> str:
    """How to finish a run that did not (a kill leaves it so; its rows are kept)."""
    if record.patch_source.startswith("a2a:"):
        return "resume: send the same assessment to the green agent again"
    return (
        f"resume: swegreen run --run-id {record.run_id} --patches {record.patch_source} "
        "(with the dataset and selection flags it was started with)"
    )


def _card_url(args: argparse.Namespace) -> str:
    return args.card_url or f"http://{args.host}:{args.port}/"


def _serve(
    args: argparse.Namespace, settings: LocalSettings, env: dict[str, str], scrubber: Scrubber
) -> int:
    from swegreen.agent.assessment import AgentSettings
    from swegreen.agent.executor import GreenAgentExecutor
    from swegreen.agent.server import build_app, green_card, serve
    from swegreen.core.config import config_from_env, load_config, read_scenario

    scenario = _scenario(args)
    defaults = {
        **(read_scenario(scenario) if scenario else {}),
        **config_from_env(env, allowed_extra=LOCAL_ENV_KEYS),
    }
    # fail at start-up, not per request: a bad config, or a sandbox that cannot run here
    server_config = load_config(scenario, env, env_extra=LOCAL_ENV_KEYS)
    front_door = None
    if args.backend == "local":
        from swegreen.sandbox.local import Isolation

        Isolation.probe(server_config.isolation)
    if args.backend == "aws":
        from swegreen.aws.front_door_client import FrontDoorSettings

        if not args.api_url:
            raise ConfigError("--backend aws needs --api-url (the stack's ApiUrl output)")
        try:
            front_door = FrontDoorSettings(
                url=args.api_url,
                auth=args.api_auth,
                region=args.api_region,
                api_key=env.get("SWEGREEN_API_KEY"),
                poll_seconds=args.api_poll,
            )
        except ValueError as exc:  # pydantic's ValidationError
            raise ConfigError(f"--api-*: {exc}") from None
        if front_door.auth == "api_key" and not front_door.api_key:
            raise ConfigError("--api-auth api_key needs the key in $SWEGREEN_API_KEY")
    agent = AgentSettings(
        local=settings,
        defaults=defaults,
        host_env=env,
        scrubber=scrubber,
        heartbeat=args.heartbeat,
        llm_mock_response=args.llm_mock_response,
        diagnose=not args.no_diagnoses,
        front_door=front_door,
    )
    serve(build_app(GreenAgentExecutor(agent), green_card(_card_url(args))), args.host, args.port)
    return 0


def _participant(args: argparse.Namespace, settings: LocalSettings) -> int:
    from swegreen.agent.server import serve
    from swegreen.participants.server import failing_app, participant_app

    url = _card_url(args)
    if args.kind == "scripted" and args.mode == "http500":
        serve(failing_app(url), args.host, args.port)
        return 0
    solver: Any
    if args.kind == "empty":
        from swegreen.participants.solvers import empty_solver

        solver = empty_solver
    elif args.kind == "predictions":
        from swegreen.participants.solvers import PredictionsSolver

        if args.predictions is None:
            raise ConfigError("participant predictions needs --predictions FILE")
        solver = PredictionsSolver(args.predictions)
    elif args.kind == "agent":
        from swegreen.participants.agent_loop import BashAgent

        solver = BashAgent(args.model, mock_responses=_mock_responses(args.llm_mock_responses))
    elif args.kind == "llm":
        from swegreen.participants.llm import LlmSolver

        solver = LlmSolver(
            args.model,
            settings.cache_dir / "llm-participant",
            mock_response=args.llm_mock_response,
            url_template=args.repo_url_template,
        )
    else:
        from swegreen.core.config import EvalConfig
        from swegreen.core.dataset import load_dataset
        from swegreen.participants.solvers import GoldSolver, ScriptedShellSolver, ScriptedSolver
        from swegreen.sample import resolve_sample

        dataset = None
        if args.kind == "gold" or args.mode in ("fenced", "slow", "explore"):  # others: none
            config = resolve_sample(EvalConfig(dataset=args.dataset), settings.cache_dir)
            dataset = load_dataset(config.dataset)
        if args.kind == "gold":
            solver = GoldSolver(dataset)
        elif args.mode in ScriptedShellSolver.MODES:
            solver = ScriptedShellSolver(args.mode, dataset, args.snoop_path)
        else:
            solver = ScriptedSolver(args.mode, dataset)
    serve(participant_app(f"{args.kind} participant", solver, url), args.host, args.port)
    return 0


def _mock_responses(path: Path | None) -> list[str]:
    if path is None:
        return []
    try:
        answers = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--llm-mock-responses {path}: {exc}") from None
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise ConfigError(f"--llm-mock-responses {path}: expected a JSON list of strings")
    return answers


def _new_run_id(patches: str) -> str:
    label = Path(patches).stem if patches not in ("gold", "empty") else patches
    label = safe_id_suggestion(label)[:100]  # a file's name may hold anything
    return f"{label}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}"


def _run_id(value: str) -> str:
    """``--run-id``, which names directories: checked before anything is written."""
    try:
        return check_id(value, "--run-id")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def entry() -> None:
    sys.exit(main())
