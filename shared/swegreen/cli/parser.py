"""The command line's flags: `swegreen --help` and a bad flag answer without importing
anything heavier than argparse (swebench pulls datasets and docker)."""

from __future__ import annotations

import argparse
from pathlib import Path

from swegreen import __version__

# dataset.DEFAULT_DATASET, here so that --help imports nothing more
DEFAULT_DATASET_NAME = "SWE-bench/SWE-bench_Verified"


def config_flags(p: argparse.ArgumentParser) -> None:
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
        "--regression-check",
        action="store_true",
        default=None,
        help="for each resolved row, also run the touched modules' whole test files with "
        "the patch and with gold (cached), and flag tests gold passes but the patch fails",
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
        choices=["auto", "bwrap", "landlock", "process"],
        help="sandbox for participant code: auto (default: bwrap where it runs, else "
        "landlock); bwrap; landlock where no namespaces are allowed (a container without "
        "capabilities); or the weakest, process, an explicit opt-in (docs/security-sandbox.md)",
    )
    g.add_argument(
        "--environments",
        choices=["engine", "docker", "auto"],
        help="where rows are evaluated: engine (environments built here, default), docker "
        "(each row in a container of its instance image, on DOCKER_HOST's engine), or "
        "auto (docker when a daemon answers)",
    )
    g.add_argument(
        "--docker-images",
        help="with docker: official (Docker Hub, default), epoch (ghcr.io) or a template "
        "with {instance_id}, {official_id}, {arch}",
    )


def local_flags(p: argparse.ArgumentParser, evaluates: bool = True) -> None:
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
        "--no-python-downloads",
        action="store_true",
        help="fail rows whose Python this machine lacks, instead of installing it once from "
        "conda packages (also SWEGREEN_PYTHON_DOWNLOADS=0)",
    )
    # before conda packages, the opt-in to uv's installs; downloads are the default now
    g.add_argument("--allow-python-install", action="store_true", help=argparse.SUPPRESS)
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
        "--disk-reserve-gb",
        type=nonnegative_float,
        metavar="GIB",
        help="free disk a new environment or prepared workspace must leave; below it the "
        "row ends error/disk_full (default 5; 0: no check; also SWEGREEN_DISK_RESERVE_GB)",
    )
    g.add_argument(
        "--no-progress", action="store_true", help="plain lines instead of a progress bar"
    )


def nonnegative_float(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a size in GiB (a number, 0 or more)")
    return value


RUN_EPILOG = """\
predictions files (--patches FILE), the official harness's format:
  .jsonl  one JSON object per line
  .json   a list of objects, or an object keyed by instance id (SWE-agent's)
  each object: {"instance_id": "...", "model_patch": "<a git diff>",
                "model_name_or_path": "..."}  (the last one optional)
  a null or empty model_patch is evaluated as no patch (no_op); an id the
  dataset does not have is an error

exit codes:
  0    the run finished, every row has a verdict
  2    nothing ran: bad flags, config, dataset or predictions; no sandbox
  3    the run finished, but some rows are `error` (reasons above; resume
       with the same --run-id and --retry-errors)
  130  interrupted (Ctrl-C): resume with the same --run-id
results: <output-dir>/<run-id>/results.json, report.html, instances.jsonl
"""


def html_flag(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--html",
        nargs="?",
        const="",
        metavar="PATH",
        help=f"{what} (default: report.html in its directory) and print where",
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="swegreen", description="SWE-bench Verified evaluator with the official grader."
    )
    p.add_argument("--version", action="version", version=f"swegreen {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run",
        help="evaluate patches on a dataset",
        epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "--patches",
        help="gold, empty, or a SWE-bench predictions file (.jsonl/.json); needed to start a "
        "run, not to resume one (--run-id alone)",
    )
    run.add_argument(
        "--sample", action="store_true", help="use the bundled sample benchmark as the dataset"
    )
    run.add_argument("--run-id", help="name of the run; the same id resumes it (default: new)")
    run.add_argument(
        "--retry-errors", action="store_true", help="on resume, evaluate error rows again"
    )
    config_flags(run)
    local_flags(run)

    demo = sub.add_parser("demo", help="the sample benchmark with gold, empty and crafted patches")
    local_flags(demo)
    demo.add_argument(
        "--isolation",
        choices=["auto", "bwrap", "landlock", "process"],
        help="sandbox for participant code (default: $SWEGREEN_ISOLATION, else auto: "
        "bwrap where it runs, else landlock)",
    )
    demo.add_argument(
        "--max-concurrent-rows", type=int, default=2, help="rows evaluated at once (default 2)"
    )

    regrade = sub.add_parser("regrade", help="grade a finished run again from its saved logs")
    regrade.add_argument("--run-id", required=True, help="the stored run to grade again")
    local_flags(regrade, evaluates=False)

    report = sub.add_parser("report", help="print a stored run's leaderboard, or list runs")
    report.add_argument("--run-id", help="omit to list runs")
    html_flag(report, "with --run-id: write the run's HTML report")
    local_flags(report, evaluates=False)

    compare = sub.add_parser(
        "compare",
        help="compare stored runs on the rows they share (paired difference, McNemar; "
        "several runs of one participant: mean, spread, pass@k)",
    )
    compare.add_argument("runs", nargs="+", metavar="RUN_ID", help="two run ids, or more")
    html_flag(compare, "also write the second run's HTML report, with a section against the first")
    local_flags(compare, evaluates=False)

    cache = sub.add_parser(
        "cache",
        help="what the cache holds; `cache prune --keep-gb N` removes least recently used "
        "environments and prepared workspaces",
    )
    cache.add_argument("action", nargs="?", choices=["prune"], help="omit to show sizes")
    cache.add_argument(
        "--keep-gb",
        type=nonnegative_float,
        metavar="GIB",
        help="prune: remove builds until the cache holds this much at most",
    )
    cache.add_argument(
        "--dry-run", action="store_true", help="prune: list what would go, remove nothing"
    )
    local_flags(cache, evaluates=False)

    pythons = sub.add_parser(
        "pythons",
        help="the interpreters recipes ask for: where each comes from; `pythons install "
        "[X.Y ...]` gets them from conda packages ahead of a run",
    )
    pythons.add_argument("action", nargs="?", choices=["install"], help="omit to list")
    pythons.add_argument(
        "versions", nargs="*", metavar="X.Y", help="install: default every version Verified needs"
    )
    local_flags(pythons, evaluates=False)

    sample = sub.add_parser("sample", help="build the sample benchmark and print where it is")
    local_flags(sample, evaluates=False)

    plan = sub.add_parser(
        "plan",
        help="a shard's worst case under an assessment_config, against the platform's step",
    )
    plan.add_argument(
        "--config",
        default="{}",
        help='the assessment_config, as JSON (e.g. \'{"num_shards": 20, '
        '"max_concurrent_rows": 5}\'); default: the config defaults',
    )
    plan.add_argument(
        "--rows", type=int, default=500, help="rows of the whole selection (default: 500)"
    )
    plan.add_argument("--participants", type=int, default=1, help="participants per request")
    plan.add_argument(
        "--backend",
        choices=["docker", "engine", "aws"],
        default="docker",
        help="where rows are graded (its setup figure: core/plan.py); default: docker, as "
        "the shipped manifest grades",
    )
    plan.add_argument(
        "--budget",
        type=float,
        default=300.0,
        help="minutes a shard may take (default: 300, the AgentBeats run step; the config's "
        "time_budget_minutes wins)",
    )

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

    sent = sub.add_parser(
        "upload-predictions",
        help="AWS: send a predictions file to the stack's API (checked first), and start "
        "the run that grades it",
    )
    sent.add_argument("file", help="a predictions JSONL (instance_id, model_patch, ...)")
    api_flags(sent)
    sent.add_argument(
        "--start",
        action="store_true",
        help="start a run grading it (its config: --config, else <file>.config.json beside "
        "a file the green agent kept, else the stack's defaults)",
    )
    sent.add_argument("--config", help="the run's config as JSON (with --start)")

    serve = sub.add_parser("serve", help="run the AgentBeats green agent (A2A server)")
    server_flags(serve, 9009)
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
        help="where rows are evaluated: here, or by the AWS pipeline (docs/aws.md); "
        "default: $SWEGREEN_BACKEND, else local",
    )
    api_flags(serve)
    serve.add_argument(
        "--exchange",
        choices=["green_agent", "pipeline"],
        help="aws: who asks the participants for patches: this green agent, where they are "
        "(default; only patches go to AWS), or the pipeline (they must be reachable from "
        "AWS); or $SWEGREEN_EXCHANGE",
    )
    serve.add_argument(
        "--api-poll", type=float, default=15.0, help="aws: seconds between progress checks"
    )
    local_flags(serve)

    part = sub.add_parser("participant", help="run a reference participant (A2A server)")
    part.add_argument(
        "kind",
        choices=["gold", "empty", "llm", "agent", "scripted", "predictions"],
        help="gold/empty: fixed answers; llm: one model call; agent: a bash + submit loop in "
        "the green agent's interactive mode; scripted: test doubles (--mode); predictions: "
        "replay a predictions file",
    )
    server_flags(part, 9019)
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
    local_flags(part, evaluates=False)
    return p


def server_flags(p: argparse.ArgumentParser, port: int) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=port, help=f"port to listen on (default {port})")
    p.add_argument(
        "--card-url", help="URL to advertise in the agent card (default http://HOST:PORT/)"
    )


def api_flags(p: argparse.ArgumentParser) -> None:
    """Where the AWS stack's API is and how to sign for it (serve's aws backend,
    upload-predictions)."""
    p.add_argument(
        "--api-url", help="aws: the front door's URL (the stack's ApiUrl); or $SWEGREEN_API_URL"
    )
    p.add_argument(
        "--api-auth",
        choices=["iam", "api_key"],
        help="aws: SigV4 with the AWS credential chain, or the key in $SWEGREEN_API_KEY; "
        "default: $SWEGREEN_API_AUTH, else api_key when $SWEGREEN_API_KEY is set, else iam",
    )
    p.add_argument(
        "--api-region", help="aws: the API's region (default: $SWEGREEN_API_REGION, its URL's)"
    )
