"""Which rows a repository source can start, and exactly which object each lacks.

    python scripts/check_sources.py DATASET URL_TEMPLATE [--repos owner/name ...]

For every row: its base commit (and that commit's whole tree: the workspace is checked out
there), and, where its recipe reads the environment_setup_commit, what it reads there (the
requirements files, or the whole tree when the build locks the project), exactly as the
engine decides (``Testbeds.setup_source``). Prints a markdown table per repository and the
rows that still cannot start; reads the sources in place (nothing cloned or fetched).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from swegreen.core.dataset import load_dataset
from swegreen.core.recipes import verified_recipes
from swegreen.repositories.repo_cache import RepoCache, repo_url


def has_commit(git_dir: Path, commit: str) -> bool:
    return (
        subprocess.run(
            ["git", "-C", str(git_dir), "cat-file", "-e", f"{commit}^{{commit}}"],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("url_template", help="e.g. '/mirrors/{owner}+{name}/repo'")
    ap.add_argument("--repos", nargs="*", default=())
    args = ap.parse_args()
    rows = load_dataset(args.dataset).instances
    if args.repos:
        rows = tuple(r for r in rows if r.repo in args.repos)
    book = verified_recipes()
    with tempfile.TemporaryDirectory() as tmp:
        # the cache's layout, each mirror a link to the source itself (read in place)
        cache = RepoCache(Path(tmp) / "repos", args.url_template)
        cache.root.mkdir(parents=True, exist_ok=True)
        for repo in sorted({r.repo for r in rows}):
            cache.mirror_path(repo).symlink_to(Path(repo_url(args.url_template, repo)))
        outcome: dict[str, tuple[str, str]] = {}
        for row in rows:
            mirror = cache.mirror_path(row.repo)
            if not has_commit(mirror, row.base_commit):
                outcome[row.instance_id] = (BLOCKED, f"base commit {row.base_commit} missing")
                continue
            lacking = cache.missing_objects(row.repo, row.base_commit)
            if lacking:
                outcome[row.instance_id] = (BLOCKED, f"the base tree lacks {', '.join(lacking)}")
                continue
            recipe = book.for_instance(row)
            setup = row.environment_setup_commit
            if not recipe.reads_setup_commit or setup == row.base_commit:
                outcome[row.instance_id] = (OK, "")
                continue
            paths = () if recipe.locks_project else tuple(recipe.requirements)
            if not has_commit(mirror, setup):
                why = f"environment_setup_commit {setup} missing"
            elif lacking := cache.missing_objects(row.repo, setup, paths):
                why = f"environment_setup_commit's tree lacks {', '.join(lacking)}"
            else:
                outcome[row.instance_id] = (OK, "")
                continue
            if recipe.requirements:
                read = f"{', '.join(recipe.requirements)} read at the base commit; {why}"
                outcome[row.instance_id] = (AT_BASE_OPT_IN, read)
            else:
                outcome[row.instance_id] = (AT_BASE, why)
    by_repo: dict[str, Counter[str]] = {}
    for row in rows:
        kind = outcome[row.instance_id][0]
        by_repo.setdefault(row.repo, Counter())[kind] += 1
    print("| repository | rows | " + " | ".join(KINDS) + " |")
    print("|---|---:|" + "---:|" * len(KINDS))
    for repo, counts in sorted(by_repo.items()):
        cells = " | ".join(str(counts.get(k, 0)) for k in KINDS)
        print(f"| {repo} | {sum(counts.values())} | {cells} |")
    noted = {i: o for i, o in outcome.items() if o[0] != OK}
    print(f"\nRows that start with a recorded fallback, or cannot start ({len(noted)}):\n")
    print("| instance | what happens | why |\n|---|---|---|")
    for iid, (kind, why) in sorted(noted.items()):
        print(f"| {iid} | {kind} | {why} |")
    return 0


OK = "starts"
AT_BASE = "starts, its project read at the base commit (recorded)"
AT_BASE_OPT_IN = "starts with --env-files-at-base (recorded)"
BLOCKED = "cannot start"
KINDS = (OK, AT_BASE, AT_BASE_OPT_IN, BLOCKED)


if __name__ == "__main__":
    sys.exit(main())
