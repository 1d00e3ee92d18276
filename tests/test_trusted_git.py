"""The engine's git: every run with its environment gets the overrides, whatever the
caller's environment says, and works on checkouts the sandbox owns."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from pathlib import Path

import pytest

from swegreen.core.errors import WorkspaceTampering
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


# What makes a key of git's documentation one that runs a program or reads another file.
RUNS_PROGRAMS = re.compile(
    r"(command|cmd|program|driver|textconv|\.clean$|\.smudge$|\.process$|helper$|hookspath"
    r"|fsmonitor$|\.pager$|editor$|askpass$|external$|gitproxy$|^include|\.path$|\.update$"
    r"|uploadpack$|receivepack$|packobjectshook$)",
    re.IGNORECASE,
)
DOC_ONLY = {  # named like program keys in the documentation, but they run nothing
    "advice.waitingforeditor", "completion.commands", "core.fsmonitorhookversion",
    "color.pager", "fsck.gitmodulespath", "help.htmlpath", "instaweb.modulepath",
    "http.sslcapath", "mergetool.meld.hasoutput", "pack.writebitmaphashcache",
    "gitcvs.dbdriver", "merge.<driver>.name", "merge.<driver>.recursive",
    "diff.<driver>.binary", "diff.<driver>.cachetextconv", "core.sparsecheckoutcone",
    "sendemail.smtpserveroption", "submodule.<name>.path", "credential.usehttppath",
    "column.clean", "diff.<driver>.wordregex", "diff.<driver>.xfuncname",
    "notes.rewrite.<command>", "rebase.abbreviatecommands",
}  # fmt: skip


def documented_program_keys() -> list[str]:
    listed = subprocess.run(["git", "help", "--config"], capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("this git cannot list its configuration keys (git help --config)")
    keys = []
    for key in listed.stdout.split():
        if "." not in key or key.lower() in DOC_ONLY or not RUNS_PROGRAMS.search(key):
            continue
        keys.append(re.sub(r"<[^>]+>", "evil", key))
    return sorted(set(keys))


def test_a_prepared_git_naming_any_documented_program_key_is_refused(tmp_path: Path) -> None:
    """Every key git documents that names a program (or another configuration file),
    planted into a prepared repository's own configuration: the engine refuses to use it
    before any git of its runs there (reseat, and a testbed's first copy)."""
    keys = documented_program_keys()
    assert "filter.evil.smudge" in keys and "include.path" in keys and len(keys) > 25
    repo = tmp_path / "repo"
    make_repo(repo, {"a.txt": "a\n"})
    trusted_git.check_config(repo / ".git")  # the engine's own: nothing to refuse
    missed = []
    for key in keys:
        planted = tmp_path / f"planted-{len(missed)}-{key}"
        subprocess.run(["cp", "-a", str(repo / ".git"), str(planted)], check=True)
        subprocess.run(
            ["git", "config", "--file", str(planted / "config"), key, "touch /tmp/owned"],
            check=True,
        )
        try:
            trusted_git.check_config(planted)
        except WorkspaceTampering as exc:
            assert key.lower() in str(exc).lower()
        else:
            missed.append(key)
    assert missed == []


def test_a_reseat_from_a_tampered_prepared_git_is_refused(tmp_path: Path) -> None:
    repo, other = tmp_path / "repo", tmp_path / "other"
    make_repo(repo, {"a.txt": "a\n"})
    make_repo(other, {"a.txt": "a\n"})
    subprocess.run(
        ["git", "-C", str(repo), "config", "filter.evil.smudge", "touch /tmp/owned"], check=True
    )
    with pytest.raises(WorkspaceTampering, match=r"filter\.evil\.smudge"):
        asyncio.run(trusted_git.reseat(other, repo / ".git"))
    assert (other / ".git" / "config").read_text().count("evil") == 0  # left as it was
