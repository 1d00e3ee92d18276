"""The engine's git: every run with its environment gets the overrides, whatever the
caller's environment says, and works on checkouts the sandbox owns."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from swegreen.repositories import trusted_git

from .helpers import make_repo


def test_the_environment_carries_the_overrides_and_drops_planted_ones(tmp_path: Path) -> None:
    planted = {
        "PATH": os.environ["PATH"],
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "core.hooksPath",
        "GIT_CONFIG_VALUE_0": str(tmp_path / "hooks"),
        "GIT_CONFIG_KEY_40": "core.fsmonitor",
        "GIT_CONFIG_VALUE_40": "touch /tmp/owned",
    }
    env = trusted_git.environment(planted, tmp_path / "home")
    assert "GIT_CONFIG_KEY_40" not in env
    repo = tmp_path / "repo"
    make_repo(repo, {"a.txt": "a\n"})
    for item in trusted_git.OVERRIDES:
        key, _, value = item.partition("=")
        shown = subprocess.run(
            ["git", "-C", str(repo), "config", "--get-all", key],
            env=env,
            capture_output=True,
            text=True,
        )
        assert value in shown.stdout.splitlines(), (key, shown.stdout)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a root engine to hand files to another uid")
def test_plain_git_commands_work_on_a_checkout_the_sandbox_owns(tmp_path: Path) -> None:
    """`git apply` and the workbench's git run with this environment, not through
    ``argv``: on a sandbox-owned checkout they must not fall back to working outside a
    repository (git refuses a repository another user owns unless told it is safe)."""
    repo = tmp_path / "repo"
    make_repo(repo, {"a.txt": "a\n"})
    for dirpath, dirnames, filenames in os.walk(repo):
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), 2_000_000, 2_000_000)
    os.lchown(repo, 2_000_000, 2_000_000)
    env = trusted_git.environment({"PATH": os.environ["PATH"]}, tmp_path / "home")
    top = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], cwd=repo, env=env, capture_output=True, text=True
    )
    assert top.returncode == 0 and top.stdout.strip() == str(repo), top.stderr
