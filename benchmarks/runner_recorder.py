"""What the runner recorder costs a django or sympy row's test command (docs/security.md
keeps the figures).

For each row, a copy of its prepared checkout (the test patch applied) runs the row's
test command with its environment's Python, outside any sandbox so that only the
recorder differs, in three ways, in turn, ``--rounds`` times; the medians are printed:

  * ``upstream``: the command as upstream runs it (sympy starts a child with a hash seed);
  * ``seed``: with the ``PYTHONHASHSEED`` the engine sets (sympy: the tests in bin/test's
    own process); the same as ``upstream`` for django;
  * ``recorder``: the seed and the runner recorder, recording into a file.

Needs the rows' prepared workspaces in the cache (a run of those rows made them):

    python benchmarks/runner_recorder.py --instance-ids django__django-11099,sympy__sympy-20590
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from swegreen.core.dataset import load_dataset
from swegreen.core.eval_script import get_test_directives
from swegreen.environments.catalog import builtin_recipes
from swegreen.sandbox.recorder import hash_seed, new_key, runner_kind, runner_recorder

DEFAULT_CACHE = Path("/var/cache/swegreen")


def prepared_of(cache: Path, iid: str) -> Path:
    found = sorted((cache / "prepared").glob(f"{iid}.*"))
    found = [p for p in found if (p / "prepared.json").is_file()]
    if not found:
        raise SystemExit(f"no prepared workspace of {iid} in {cache}: run the row once first")
    return found[-1]


def copy_checkout(prepared: Path, test_patch: str, dest: Path) -> Path:
    repo = dest / "repo"
    shutil.copytree(prepared / "repo", repo, symlinks=True)
    subprocess.run(["git", "-C", str(repo), "apply", "-"], input=test_patch, text=True, check=True)
    return repo


def run(argv: list[str], repo: Path, env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(
        ["/bin/bash", "-c", " ".join(argv)],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    return time.perf_counter() - start, done.stdout


def recorded_tests(record: Path) -> int:
    """How many test events the record holds (a check that the recorder ran)."""
    events = [json.loads(json.loads(line)["e"]) for line in record.read_text().splitlines()]
    return sum(1 for e in events if e.get("event") == "test")


def arms(kind: str, repo: Path, base: dict[str, str], work: Path) -> dict[str, dict[str, str]]:
    plugins = work / "plugins"
    recorder = runner_recorder(kind, str(repo))
    plugins.mkdir(exist_ok=True)
    for name, text in recorder.files.items():
        (plugins / name).write_text(text)
    seed = {**base, "PYTHONHASHSEED": hash_seed()}
    return {
        "upstream": base,
        "seed": seed,
        "recorder": {
            **seed,
            **recorder.environ(str(plugins)),
            "PYTHONPATH": ":".join(filter(None, [base.get("PYTHONPATH"), str(plugins)])),
            "SWEGREEN_RECORD": str(work / "record.jsonl"),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instance-ids", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument(
        "--dataset", default=str(Path(__file__).parents[2] / "shared/data/swebench_verified.jsonl")
    )
    args = parser.parse_args()
    rows = {i.instance_id: i for i in load_dataset(args.dataset).instances}
    book = builtin_recipes()
    results = {}
    for iid in args.instance_ids.split(","):
        inst = rows[iid]
        recipe = book.for_instance(inst)
        kind = runner_kind(recipe.log_parser)
        if kind is None:
            raise SystemExit(f"{iid}: its runner is pytest, not one the runner recorder covers")
        prepared = prepared_of(args.cache, iid)
        with tempfile.TemporaryDirectory(prefix="swegreen-bench-") as tmp:
            work = Path(tmp)
            repo = copy_checkout(prepared, inst.test_patch, work)
            env_bin = (prepared / "env" / "bin").resolve()
            base = {
                "PATH": f"{env_bin}:/usr/bin:/bin",
                "HOME": str(work),
                "LANG": "C.UTF-8",
                **dict(recipe.env_vars),
            }
            argv = [recipe.test_cmd, *get_test_directives(inst, recipe.directive_style)]
            times: dict[str, list[float]] = {}
            for _ in range(args.rounds):
                for name, env in arms(kind, repo, base, work).items():
                    key = work / "key"
                    key.write_text(new_key())
                    env = {**env, "SWEGREEN_RECORD_KEY_FILE": str(key)}
                    record = work / "record.jsonl"
                    record.write_text("")  # the channel opens it, never makes it
                    seconds, output = run(argv, repo, env)
                    times.setdefault(name, []).append(seconds)
                    if name == "recorder" and not recorded_tests(record):
                        raise SystemExit(f"{iid}: the recorder recorded no test:\n{output}")
            results[iid] = {name: round(statistics.median(t), 3) for name, t in times.items()}
            print(iid, json.dumps(results[iid]), flush=True)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
