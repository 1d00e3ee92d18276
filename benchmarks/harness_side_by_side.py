"""Real Verified rows graded three ways on the same instance images: the engine, the
Docker backend through the stand-in of AgentBeats' Docker gateway, and the official
harness (swebench 5.0.2's own ``run_evaluation``), with gold and with empty patches.

Phases (each resumes: run ids are fixed, images are rebuilt only when their inputs change,
the harness skips a row whose report exists):

  engine   ``swegreen run`` on the engine, gold then empty: the environments the images
           are made from;
  images   each row's image in the official layout (tests/docker_support/real_images.py);
  harness  the official harness on those images: gold through ``run_evaluation``, empty in
           its negative-test mode (it skips an empty prediction otherwise);
  docker   ``swegreen run --environments docker`` on the same images, through the gateway;
  interactive  the green agent (``swegreen serve``, Docker backend, through the gateway) and
           two scripted participants in the interactive mode: ``explore`` (looks around,
           applies the gold patch in its workbench, submits what git shows) and ``snoop``
           (counts the commits its workbench's history holds);
  speed    ``--rounds`` rounds of gold, one row at a time, the Docker backend and the
           harness on the same image one right after the other;
  touched  gold with a comment added to the row's build file (setup.py, setup.cfg or
           pyproject.toml), three ways: the eval-time install runs, and is judged in
           the Docker backend, on an honest patch;
  predictions  ``--predictions FILE`` (SWE-bench predictions: an attack, say) three
           ways, the engine, the Docker backend and the harness, and their verdicts;
  table    verdicts and failing tests side by side, the speed rounds' medians, and
           the touched rows (markdown).

    python benchmarks/harness_side_by_side.py --rows ROWS.txt \\
        --repo-url-template '/mirrors/{owner}+{name}/repo' [--phases engine,images,...]

Needs a Docker daemon (../shared/tools/docker-here.sh), the repositories' mirrors, and
PyPI for swebench 4.1.0 (the official setup and eval scripts). docs/fidelity.md keeps
the latest tables.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "shared"))

from swegreen.core.dataset import Instance, load_dataset  # noqa: E402
from swegreen.core.images import image_name  # noqa: E402
from swegreen.core.recipes import verified_recipes  # noqa: E402
from tests.docker_support.gateway import running  # noqa: E402
from tests.docker_support.official_harness import (  # noqa: E402
    as_repaired,
    harness_rows,
    run_official,
    upstream_scripts,
)
from tests.docker_support.real_images import TEMPLATE, build_instance, env_of  # noqa: E402

DATASET = ROOT.parent / "shared" / "data" / "swebench_verified.jsonl"
PATCHES = ("gold", "empty")
PHASES = (
    "engine",
    "images",
    "harness",
    "docker",
    "interactive",
    "speed",
    "touched",
    "predictions",
    "table",
)
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - ")


def swegreen_run(
    args: argparse.Namespace,
    patches: str,
    backend: str,
    env: dict,
    run_id: str | None = None,
    ids: list[str] | None = None,
) -> None:
    command = [
        sys.executable, "-m", "swegreen", "run", "--dataset", str(args.dataset),
        "--instance-ids", ",".join(ids or args.ids), "--max-rows", "-1", "--patches", patches,
        "--run-id", run_id or f"{args.prefix}-{backend}-{patches}",
        "--output-dir", str(args.work / "results"),
        "--repo-url-template", args.repo_url_template, "--no-progress",
        "--environments", backend,
    ]  # fmt: skip
    if args.env_files_at_base:
        command.append("--env-files-at-base")
    if backend == "docker":
        command += ["--docker-images", TEMPLATE]
    done = subprocess.run(command, env=env)
    if done.returncode not in (0, 3):  # 3: the run finished with error rows
        raise SystemExit(f"{' '.join(command[:4])} ... exited {done.returncode}")


def result(
    args: argparse.Namespace, backend: str, patches: str, iid: str, run_id: str | None = None
) -> dict | None:
    path = args.work / "results" / (run_id or f"{args.prefix}-{backend}-{patches}")
    path = path / "instances" / iid / "result.json"
    return json.loads(path.read_text()) if path.is_file() else None


def built_images(args: argparse.Namespace) -> dict[str, dict]:
    """The rows' images built so far (phase images), by instance id; a row without one
    is left out of the phases that need it."""
    path = args.work / "images.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def phase_images(args: argparse.Namespace, rows: dict[str, Instance], scripts: dict) -> None:
    client = docker.from_env()
    book = verified_recipes()
    built = built_images(args)
    for iid in args.ids:
        log = args.work / "results" / f"{args.prefix}-engine-gold" / "instances" / iid
        if not (log / "run_instance.log").is_file() or result(args, "engine", "gold", iid) is None:
            print(f"{iid}: no engine run yet (phase engine)", file=sys.stderr)
            continue
        try:
            key = env_of(log / "run_instance.log")
        except ValueError as exc:
            print(f"{iid}: {exc}", file=sys.stderr)
            continue
        inst = rows[iid]
        owner, name = inst.repo.split("/", 1)
        mirror = Path(args.repo_url_template.format(owner=owner, name=name, repo=inst.repo))
        t0 = time.monotonic()
        tag = build_instance(
            client, inst, book.for_instance(inst), mirror, args.cache / "envs" / key,
            scripts[iid]["setup_repo"],
        )  # fmt: skip
        size = client.api.inspect_image(tag)["Size"]
        seconds = built.get(iid, {}).get("seconds") or time.monotonic() - t0
        built[iid] = {"image": tag, "env": key, "bytes": size, "seconds": seconds}
        (args.work / "images.json").write_text(json.dumps(built, indent=1))
        print(f"{iid}: {tag} ({size / 1e9:.2f} GB)")


def harness_dataset(args: argparse.Namespace, rows: dict[str, Instance], scripts: dict) -> Path:
    book = verified_recipes()
    raw = [json.loads(line) for line in args.rows_jsonl.read_text().splitlines()]
    parsers = {i.repo: book.for_instance(i).log_parser for i in rows.values()}
    images = {r["instance_id"]: image_name(r["instance_id"], TEMPLATE) for r in raw}
    path = args.work / "harness" / "dataset.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    # the eval scripts as the hub's v5 rows carry them (upstream's repair of three rows)
    scripts = {i: {**v, "eval_script": as_repaired(rows[i], v["eval_script"])}
               for i, v in scripts.items() if i in rows}  # fmt: skip
    made = harness_rows(raw, scripts, images, parsers)
    path.write_text("".join(json.dumps(r) + "\n" for r in made))
    return path


def phase_harness(args: argparse.Namespace, rows: dict[str, Instance], scripts: dict) -> None:
    dataset = harness_dataset(args, rows, scripts)
    built = built_images(args)
    gold = {i.instance_id: i.patch for i in rows.values()}
    for patches in PATCHES:
        for iid in args.ids:
            if iid not in built:
                continue
            found = run_official(
                args.work / "harness", dataset, f"{args.prefix}-{patches}", [iid],
                gold if patches == "gold" else None,
            )  # fmt: skip
            report = found[iid]["report"]
            print(f"{iid} {patches}: harness resolved={report and report['resolved']}")


@contextlib.contextmanager
def gateway_env() -> Iterator[dict[str, str]]:
    """The environment of a ``swegreen`` command that reaches the daemon through the
    gateway stand-in; a call it refused fails the phase."""
    upstream = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    folder = tempfile.mkdtemp(prefix="swg-gw-", dir="/tmp")
    with running(upstream, f"{folder}/docker.sock") as gw:
        yield {**os.environ, "DOCKER_HOST": f"unix://{gw.listen}"}
        if gw.refused:
            raise SystemExit(f"refused by the gateway: {sorted(set(gw.refused))}")


def phase_docker(args: argparse.Namespace) -> None:
    with gateway_env() as env:
        for patches in PATCHES:
            swegreen_run(args, patches, "docker", env)


def phase_predictions(args: argparse.Namespace, rows: dict[str, Instance], scripts: dict) -> None:
    """``--predictions`` graded by the engine, the Docker backend (through the gateway)
    and the harness, on the rows that have an image; one line per row and grader."""
    if args.predictions is None:
        raise SystemExit("the predictions phase needs --predictions FILE")
    given = {
        p["instance_id"]: p["model_patch"]
        for p in map(json.loads, args.predictions.read_text().splitlines())
        if p["instance_id"] in rows
    }
    ids = [i for i in args.ids if i in given and i in built_images(args)]
    name = f"{args.prefix}-{args.predictions.stem}"
    swegreen_run(args, str(args.predictions), "engine", dict(os.environ), f"{name}-engine", ids)
    with gateway_env() as env:
        swegreen_run(args, str(args.predictions), "docker", env, f"{name}-docker", ids)
    found = run_official(
        args.work / "harness", harness_dataset(args, rows, scripts), name, ids, given,
        model=args.predictions.stem,
    )  # fmt: skip
    for iid in ids:
        for backend in ("engine", "docker"):
            r = result(args, backend, "", iid, f"{name}-{backend}")
            print(f"{iid} {backend}: {r and (r['status'], r['reason'])}")
        report = found[iid]["report"]
        print(f"{iid} harness: resolved={report and report['resolved']}")


def phase_speed(args: argparse.Namespace, rows: dict[str, Instance], scripts: dict) -> None:
    """``--rounds`` rounds of gold, one row at a time: the Docker backend (through the
    gateway) and the harness on the same image one right after the other, which goes
    first alternating by round (the first warms the image's files for the second)."""
    dataset = harness_dataset(args, rows, scripts)
    built = built_images(args)
    gold = {i.instance_id: i.patch for i in rows.values()}
    with gateway_env() as env:
        for r in range(1, args.rounds + 1):
            run_id = f"{args.prefix}-speed{r}"
            for iid in (i for i in args.ids if i in built):

                def backend(iid: str = iid, run_id: str = run_id) -> None:
                    mine = f"{run_id}-docker-{iid}"  # a run never shrinks: one a row
                    if result(args, "docker", "gold", iid, mine) is None:
                        swegreen_run(args, "gold", "docker", env, mine, [iid])

                def harness(iid: str = iid, run_id: str = run_id) -> None:
                    run_official(args.work / "harness", dataset, run_id, [iid], gold)

                for step in (backend, harness) if r % 2 else (harness, backend):
                    step()
                print(f"round {r}: {iid}", file=sys.stderr)


BUILD_FILES = ("setup.py", "setup.cfg", "pyproject.toml")


def touched_patches(args: argparse.Namespace, rows: dict[str, Instance]) -> dict[str, str]:
    """Each row's gold patch and a comment added at the end of its first build file at
    the base commit (setup.py, setup.cfg, pyproject.toml): an honest patch that makes the
    eval-time install run (for editable installs too) and changes nothing it builds."""
    made = {}
    for iid in args.ids:
        inst = rows[iid]
        owner, name = inst.repo.split("/", 1)
        mirror = args.repo_url_template.format(owner=owner, name=name, repo=inst.repo)
        for build in BUILD_FILES:
            shown = subprocess.run(
                ["git", "-C", mirror, "show", f"{inst.base_commit}:{build}"],
                capture_output=True, text=True,
            )  # fmt: skip
            if shown.returncode == 0 and f"b/{build}\n" not in inst.patch:
                old = shown.stdout.splitlines(keepends=True)
                comment = "# an honest change to a build input\n"
                new = [*old[:-1], old[-1] if old[-1].endswith("\n") else old[-1] + "\n", comment]
                diff = "".join(difflib.unified_diff(old, new, f"a/{build}", f"b/{build}"))
                made[iid] = inst.patch + f"diff --git a/{build} b/{build}\n" + diff
                break
    return made


def phase_touched(args: argparse.Namespace, rows: dict[str, Instance], scripts: dict) -> None:
    """The touched patches (``touched_patches``) graded three ways: the same verdict as
    gold, with the eval-time install run and judged in the Docker backend."""
    built = built_images(args)
    patches = {i: p for i, p in touched_patches(args, rows).items() if i in built}
    ids = list(patches)
    path = args.work / "touched.jsonl"
    path.write_text("".join(
        json.dumps({"instance_id": i, "model_patch": p, "model_name_or_path": "touched"}) + "\n"
        for i, p in patches.items()
    ))  # fmt: skip
    swegreen_run(args, str(path), "engine", dict(os.environ), f"{args.prefix}-engine-touched", ids)
    with gateway_env() as env:
        swegreen_run(args, str(path), "docker", env, f"{args.prefix}-docker-touched", ids)
    dataset = harness_dataset(args, rows, scripts)
    run_official(args.work / "harness", dataset, f"{args.prefix}-touched", ids, patches,
                 model="touched")  # fmt: skip


def touched_table(args: argparse.Namespace) -> int:
    path = args.work / "touched.jsonl"
    if not path.is_file():
        return 0
    print("\n| row | build file touched | engine | Docker backend | its eval-time install "
          "| official harness | all three agree |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    disagreements = 0
    for line in path.read_text().splitlines():
        iid = json.loads(line)["instance_id"]
        touched = re.findall(r"^diff --git a/(\S+)", json.loads(line)["model_patch"], re.M)[-1]
        engine = result(args, "engine", "", iid, f"{args.prefix}-engine-touched")
        dock = result(args, "docker", "", iid, f"{args.prefix}-docker-touched")
        logs = args.work / "harness" / "logs" / "run_evaluation" / f"{args.prefix}-touched"
        report_path = logs / "touched" / iid / "report.json"
        report = json.loads(report_path.read_text())[iid] if report_path.is_file() else None
        if engine is None or dock is None:
            continue
        same = agrees(engine, report) and agrees(dock, report)
        disagreements += not same
        install = (dock.get("environment") or {}).get("eval_install")
        print(f"| {iid} | {touched} | {engine['status']} ({engine['reason']}) | "
              f"{dock['status']} ({dock['reason']}) | {install} | {official_verdict(report)} | "
              f"{'yes' if same else '**no**'} |")  # fmt: skip
    return disagreements


def speed_table(args: argparse.Namespace) -> None:
    """Per row, the median over the rounds run so far (and the rounds counted)."""
    print("\n| row | rounds | Docker backend: row (s) | its eval script (s) | its own cost (s) "
          "| harness: row (s) | to its report (s) | its eval script (s) | backend's row "
          "against the harness's report |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for iid in args.ids:
        mine, theirs = [], []
        for r in range(1, args.rounds + 1):
            run_id = f"{args.prefix}-speed{r}"
            dock = result(args, "docker", "gold", iid, f"{run_id}-docker-{iid}")
            logs = args.work / "harness" / "logs" / "run_evaluation" / run_id / "gold" / iid
            h = harness_times(logs)
            if dock is None or h is None or not dock["tests_ran"]:
                continue
            d = dock["durations"]
            own = d["total"] - d["tests"] - d["env_build"] - d["participant"]
            mine.append((d["total"], d["tests"], own))
            theirs.append(h)
        if not mine:
            continue
        m = [statistics.median(col) for col in zip(*mine, strict=True)]
        h = [statistics.median(col) for col in zip(*theirs, strict=True)]
        than = "faster" if m[0] <= h[1] else "**slower**"
        print(f"| {iid} | {len(mine)} | {m[0]:.1f} | {m[1]:.1f} | {m[2]:.2f} | {h[0]:.1f} | "
              f"{h[1]:.1f} | {h[2]:.1f} | {than} |")  # fmt: skip


def phase_interactive(args: argparse.Namespace) -> None:
    """One assessment over A2A on 127.0.0.1, the rows' workbenches containers of their
    images; each row's verdict, steps and what the snoop saw of the history."""
    import asyncio

    from tests.helpers import start, stop
    from tests.test_agent import assess

    built = built_images(args)
    ids = [i for i in args.ids if i in built]
    out = args.work / "interactive"
    upstream = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    folder = tempfile.mkdtemp(prefix="swg-gw-", dir="/tmp")
    servers = {}
    with running(upstream, f"{folder}/docker.sock") as gw:
        green_env = {
            "DOCKER_HOST": f"unix://{gw.listen}",
            "SWEGREEN_ENVIRONMENTS": "docker",
            "SWEGREEN_DOCKER_IMAGES": TEMPLATE,
            "SWEGREEN_REPO_URL_TEMPLATE": args.repo_url_template,
        }
        data = ["--dataset", str(args.rows_jsonl)]
        specs = {
            "green": (["serve", "--llm-mock-response", "MOCK DIAGNOSIS"], green_env),
            "explore": (["participant", "scripted", "--mode", "explore", *data], {}),
            "snoop": (["participant", "scripted", "--mode", "snoop"], {}),
        }
        try:
            for name, (argv, env) in specs.items():
                servers[name] = start(argv, args.cache, out, name, env)
            request = {
                "participants": {r: servers[r].url for r in ("explore", "snoop")},
                "config": {"dataset": str(args.rows_jsonl), "instance_ids": ids,
                           "max_steps": 20, "participant_timeout": 900},
            }  # fmt: skip
            outcome = asyncio.run(assess(servers["green"].url, request))
        finally:
            stop(servers.values())
        if gw.refused:
            raise SystemExit(f"refused by the gateway: {sorted(set(gw.refused))}")
    print(f"assessment: {outcome.state}")
    print("\n| row | explore: verdict | graded in | steps | its workbench made in (s) "
          "| snoop: commits its workbench's history holds |")  # fmt: skip
    print("|---|---|---|---:|---:|---|")
    for iid in ids:
        row: dict = {}
        for path in out.glob(f"green/*-explore/instances/{iid}/result.json"):
            row = json.loads(path.read_text())
        seen = "?"
        for path in out.glob(f"green/*-snoop/instances/{iid}/interaction.json"):
            for step in json.loads(path.read_text()):
                if step.get("command", "").startswith("git log --all --oneline"):
                    seen = step.get("output", "").strip()
        inter = row.get("interaction") or {}
        where = f"{row.get('isolation')}: {(row.get('environment') or {}).get('image')}"
        print(f"| {iid} | {row.get('status')} | {where} | {inter.get('steps')} | "
              f"{inter.get('setup_seconds')} | {seen} |")  # fmt: skip


def harness_times(logs: Path) -> tuple[float, float, float] | None:
    """The harness's own row, from its instance log: container made to container removed,
    container made to report written, and the eval script's exec ("Test runtime")."""
    log = logs / "run_instance.log"
    if not log.is_file():
        return None
    stamps, report, runtime = [], None, 0.0
    for line in log.read_text().splitlines():
        if m := _STAMP.match(line):
            stamps.append(datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f"))
            if "Test runtime:" in line:
                runtime = float(line.rsplit(":", 1)[1].split()[0].replace("_", ""))
            if " - report: " in line:
                report = stamps[-1]
    if report is None:
        return None
    first = stamps[0]
    return (stamps[-1] - first).total_seconds(), (report - first).total_seconds(), runtime


def official_verdict(report: dict | None) -> str:
    if report is None:
        return "no report"
    if report.get("infra_failure"):
        return f"infrastructure failure ({report.get('infra_failure_reason')})"
    if "tests_status" not in report:
        return "log rejected"
    status = report["tests_status"]
    f2p, p2p = len(status["FAIL_TO_PASS"]["failure"]), len(status["PASS_TO_PASS"]["failure"])
    verdict = "resolved" if report["resolved"] else "not resolved"
    return f"{verdict} (F2P failing {f2p}, P2P failing {p2p})"


def agrees(row: dict, report: dict | None) -> bool:
    """The same verdict: an infrastructure failure where ours is an error; an empty patch
    not resolved (neither grader runs its tests: the harness's negative-test mode does,
    for the table); else the same resolved or not, and the same failing F2P and P2P tests."""
    if row["reason"] == "empty_patch":
        return report is None or not report["resolved"]
    if report is None or report.get("infra_failure"):
        return row["status"] == "error"
    if "tests_status" not in report:
        return False
    status = report["tests_status"]
    return (
        (row["status"] == "resolved") == report["resolved"]
        and set(row["f2p_failing"]) == set(status["FAIL_TO_PASS"]["failure"])
        and set(row["p2p_failing"]) == set(status["PASS_TO_PASS"]["failure"])
    )


def phase_table(args: argparse.Namespace) -> int:
    built = built_images(args)
    print("| row | patches | engine | Docker backend | official harness | all three agree |")
    print("|---|---|---|---|---|---|")
    disagreements = 0
    for iid in args.ids:
        for patches in PATCHES:
            engine = result(args, "engine", patches, iid)
            dock = result(args, "docker", patches, iid)
            logs = args.work / "harness" / "logs" / "run_evaluation" / f"{args.prefix}-{patches}"
            logs = logs / ("gold" if patches == "gold" else "empty") / iid
            report_path = logs / "report.json"
            report = json.loads(report_path.read_text())[iid] if report_path.is_file() else None
            statuses = [
                f"{r['status']} ({r['reason']})" if r else "not run" for r in (engine, dock)
            ]
            if iid not in built or engine is None or dock is None:
                print(f"| {iid} | {patches} | {statuses[0]} | {statuses[1]} | "
                      f"{official_verdict(report)} | not run |")  # fmt: skip
                continue
            same = agrees(engine, report) and agrees(dock, report)
            disagreements += not same
            print(f"| {iid} | {patches} | {statuses[0]} | {statuses[1]} | "
                  f"{official_verdict(report)} | {'yes' if same else '**no**'} |")  # fmt: skip
    print(f"\n{disagreements} disagreement(s)")
    return 1 if disagreements else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=Path, required=True, help="instance ids, one a line")
    parser.add_argument("--dataset", type=Path, default=DATASET)
    parser.add_argument("--repo-url-template", required=True)
    parser.add_argument("--env-files-at-base", action="store_true")
    parser.add_argument("--work", type=Path, default=Path("results/side-by-side"))
    parser.add_argument("--prefix", default="sbs", help="run ids' prefix")
    parser.add_argument("--cache", type=Path, help="the engine's cache (default: its own)")
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument("--rounds", type=int, default=3, help="the speed phase's rounds")
    parser.add_argument("--predictions", type=Path, help="the predictions phase's file")
    args = parser.parse_args()
    args.ids = [ln.strip() for ln in args.rows.read_text().splitlines() if ln.strip()]
    args.work = args.work.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.cache is None:
        from swegreen.evaluation.settings import default_cache_dir

        args.cache = default_cache_dir(os.environ)
    wanted = set(args.ids)
    args.rows_jsonl = args.work / "rows.jsonl"
    with args.dataset.open() as src:
        kept = {}
        for line in src:
            iid = json.loads(line)["instance_id"]
            if iid in wanted:
                kept[iid] = line if line.endswith("\n") else line + "\n"
    if missing := wanted - set(kept):
        raise SystemExit(f"not in {args.dataset}: {', '.join(sorted(missing))}")
    args.rows_jsonl.write_text("".join(kept[i] for i in args.ids))
    rows = {i.instance_id: i for i in load_dataset(str(args.rows_jsonl)).instances}
    phases = args.phases.split(",")
    if unknown := set(phases) - set(PHASES):
        raise SystemExit(f"unknown phase(s) {sorted(unknown)}: choose from {', '.join(PHASES)}")
    scripts = upstream_scripts(args.rows_jsonl, args.work / "upstream") if (
        {"images", "harness", "speed", "touched", "predictions"} & set(phases)) else {}  # fmt: skip
    if "engine" in phases:
        for patches in PATCHES:
            swegreen_run(args, patches, "engine", dict(os.environ))
    if "images" in phases:
        phase_images(args, rows, scripts)
    if "harness" in phases:
        phase_harness(args, rows, scripts)
    if "docker" in phases:
        phase_docker(args)
    if "interactive" in phases:
        phase_interactive(args)
    if "speed" in phases:
        phase_speed(args, rows, scripts)
    if "touched" in phases:
        phase_touched(args, rows, scripts)
    if "predictions" in phases:
        phase_predictions(args, rows, scripts)
    if "table" not in phases:
        return 0
    verdicts = phase_table(args)
    speed_table(args)
    return 1 if touched_table(args) or verdicts else 0


if __name__ == "__main__":
    raise SystemExit(main())
