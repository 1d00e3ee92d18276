"""The sample benchmark that ships with the project.

Three small repositories (calculator, textkit, ledger) are rebuilt from the diffs in
``repos/`` with fixed authors and dates, so every machine gets the same commit ids; the
tasks in ``tasks.json`` become SWE-bench-format rows on those commits. Gold patches
resolve every task, empty patches none, and the crafted predictions produce every
status of the decision tree (and an error) once.

Participants are pointed at repositories of their own (``participant-repos/<instance
id>.git``) whose history ends at the task's base commit: the full repositories hold the
commits that fixed each task, and a participant must not be able to replay them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from swegreen.core.config import EvalConfig
from swegreen.core.recipes import Recipe, RecipeBook

SAMPLE_OWNER = "sample"
SAMPLE_DATASET = "swegreen:sample"  # the dataset name that means "the bundled sample"
BASE_DATE = 1704103200  # 2024-01-01T10:00:00Z; step n is committed n days later


@dataclass(frozen=True)
class SampleBenchmark:
    root: Path
    dataset: Path
    repos_dir: Path
    crafted: Path
    expected: dict[str, dict[str, str]]

    @property
    def url_template(self) -> str:
        return str(self.repos_dir / "{owner}__{name}")

    @property
    def participant_url_template(self) -> str:
        return str(self.root / "participant-repos" / "{instance_id}.git")


def resolve_sample(config: EvalConfig, cache_dir: Path) -> EvalConfig:
    """``dataset = "swegreen:sample"`` means the bundled sample: build it and point the
    config at its dataset file and repositories (unless a template was given)."""
    if config.dataset != SAMPLE_DATASET:
        return config
    sample = build_sample(cache_dir / "sample")
    update: dict[str, str] = {"dataset": str(sample.dataset)}
    if "repo_url_template" not in config.model_fields_set:
        update["repo_url_template"] = sample.url_template
    if "participant_repo_url_template" not in config.model_fields_set:
        update["participant_repo_url_template"] = sample.participant_url_template
    return config.model_copy(update=update)


def _files() -> Traversable:
    return resources.files("swegreen") / "sample"


def _spec() -> dict[str, Any]:
    return json.loads((_files() / "tasks.json").read_text())


def sample_recipes() -> RecipeBook:
    spec = _spec()
    overrides = spec.get("recipe_overrides", {})
    recipes: dict[str, dict[str, Recipe]] = {}
    for task in spec["tasks"]:
        fields = {**spec["recipe"], **overrides.get(task["repo"], {})}
        recipes.setdefault(task["repo"], {})[task["version"]] = Recipe.model_validate(fields)
    return RecipeBook(recipes, "swegreen/sample/tasks.json")


def _content_hash() -> str:
    h = hashlib.sha256()
    stack = [_files()]
    while stack:
        node = stack.pop()
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            if child.is_dir():
                stack.append(child)
            elif child.name.endswith((".diff", ".json")):
                h.update(child.name.encode())
                h.update(child.read_bytes())
    return h.hexdigest()[:16]


def build_sample(dest: Path) -> SampleBenchmark:
    """Build (or reuse) the sample under ``dest``: repositories, dataset, predictions."""
    stamp = dest / ".stamp"
    digest = _content_hash()
    if not (stamp.exists() and stamp.read_text() == digest):
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".sample.", dir=dest.parent))
        try:
            _build(tmp)
            (tmp / ".stamp").write_text(digest)
            old = dest.with_name(dest.name + f".old-{os.getpid()}")
            if dest.exists():
                os.replace(dest, old)
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    expected = {t["instance_id"]: t["crafted"] for t in _spec()["tasks"]}
    return SampleBenchmark(
        root=dest,
        dataset=dest / "dataset.jsonl",
        repos_dir=dest / "repos",
        crafted=dest / "crafted.jsonl",
        expected=expected,
    )


def _git(repo: Path, *args: str, date: int | None = None, stdin: bytes | None = None) -> str:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(repo),
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_AUTHOR_NAME": "Sample Maintainer",
        "GIT_AUTHOR_EMAIL": "maintainer@sample.invalid",
        "GIT_COMMITTER_NAME": "Sample Maintainer",
        "GIT_COMMITTER_EMAIL": "maintainer@sample.invalid",
    }
    if date is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"@{date} +0000"
    proc = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, input=stdin, capture_output=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"git {' '.join(args)} failed in {repo}: {proc.stderr.decode(errors='replace')}"
        )
    return proc.stdout.decode().strip()


def _build(root: Path) -> None:
    spec = _spec()
    shas: dict[str, list[str]] = {}
    repos_dir = root / "repos"
    for repo_dir in sorted((_files() / "repos").iterdir(), key=lambda p: p.name):
        name = repo_dir.name
        path = repos_dir / f"{SAMPLE_OWNER}__{name}"
        path.mkdir(parents=True)
        _git(path, "init", "--quiet", "--initial-branch=main")
        shas[name] = []
        steps = sorted(
            (s for s in repo_dir.iterdir() if s.name.endswith(".diff")), key=lambda s: s.name
        )
        for n, step in enumerate(steps, 1):
            _git(path, "apply", "--index", "-", stdin=step.read_bytes())
            title = step.name.removesuffix(".diff").split("-", 1)[1].replace("-", " ")
            _git(path, "commit", "--quiet", "-m", title.capitalize(), date=BASE_DATE + n * 86400)
            shas[name].append(_git(path, "rev-parse", "HEAD"))
    rows, crafted = [], []
    for task in spec["tasks"]:
        name = task["repo"].split("/", 1)[1]
        files = _files() / "tasks" / task["instance_id"]
        repo_path = repos_dir / f"{SAMPLE_OWNER}__{name}"
        setup_sha = shas[name][task["setup_step"] - 1]
        tag = f"v{task['version']}"
        if not _git(repo_path, "tag", "--list", tag):
            _git(repo_path, "tag", tag, setup_sha)
        rows.append(
            {
                "repo": task["repo"],
                "instance_id": task["instance_id"],
                "base_commit": shas[name][task["base_step"] - 1],
                "patch": (files / "gold.diff").read_text(),
                "test_patch": (files / "test.diff").read_text(),
                "problem_statement": task["problem_statement"],
                "hints_text": task["hints_text"],
                "created_at": task["created_at"],
                "version": task["version"],
                "FAIL_TO_PASS": json.dumps(task["FAIL_TO_PASS"]),
                "PASS_TO_PASS": json.dumps(task["PASS_TO_PASS"]),
                "environment_setup_commit": setup_sha,
                "difficulty": "<15 min fix",
            }
        )
        crafted.append(
            {
                "instance_id": task["instance_id"],
                "model_name_or_path": "crafted",
                "model_patch": (files / "crafted.diff").read_text(),
            }
        )
    for row in rows:  # what participants clone: nothing after the base commit
        full = repos_dir / row["repo"].replace("/", "__")
        mirror = root / "participant-repos" / f"{row['instance_id']}.git"
        mirror.mkdir(parents=True)
        _git(mirror, "init", "--quiet", "--bare", "--initial-branch=main")
        _git(full, "push", "--quiet", str(mirror), f"{row['base_commit']}:refs/heads/main")
    (root / "dataset.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "crafted.jsonl").write_text("".join(json.dumps(c) + "\n" for c in crafted))
