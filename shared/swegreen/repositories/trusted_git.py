"""Git run by the engine over a workspace that participant code has written to.

Git executes programs named in its configuration: ``core.fsmonitor``, hooks (also through
``core.hooksPath``), ``diff.external``, filter drivers, ``core.pager``, and whatever an
``include.path`` or a ``commondir`` file pulls in. A workspace lent to the sandbox can
hold all of them: ``.git`` is a directory like any other there, and so is the HOME a
careless engine would give git. The engine's own git therefore never reads anything the
sandbox could write:

- ``reseat``: after a sandboxed phase, the workspace's ``.git`` is thrown away, unread,
  and replaced by a copy of the prepared workspace's (the engine's, never lent), before
  any git runs there again; the next sandboxed phase (the eval script's own ``git
  checkout`` and ``git apply`` of the test files) finds the same trusted configuration;
- ``argv``/``environment``: no system or global configuration (``GIT_CONFIG_GLOBAL`` is
  /dev/null, HOME an empty directory of the engine's), the executing keys forced off on
  the command line, which wins over every configuration file, and no replace ref read
  (``AS_COMMITTED``);
- ``real_dir``: a path the engine is about to read or write through is a directory, not a
  symlink the sandbox left to lead it somewhere else.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path

from swegreen.core.errors import WorkspaceTampering
from swegreen.core.eval_script import GIT_AS_COMMITTED

# `-c` wins over every file git reads. core.hooksPath=/dev/null: no hook can be found.
OVERRIDES = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "core.editor=false",
    "core.askPass=false",
    "core.sshCommand=false",
    "core.gitProxy=false",
    "core.attributesFile=/dev/null",
    "core.untrackedCache=false",
    "credential.helper=",
    "diff.external=",
    "gpg.program=false",
    "protocol.allow=never",
    "safe.directory=*",
)
_IDENTITY = frozenset(
    f"GIT_{who}_{what}" for who in ("AUTHOR", "COMMITTER") for what in ("NAME", "EMAIL", "DATE")
)
# Variables that name programs or configuration for git: never passed on.
_DROPPED = frozenset(
    {
        "GIT_EXTERNAL_DIFF",
        "GIT_PAGER",
        "GIT_EDITOR",
        "GIT_ASKPASS",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_PROXY_COMMAND",
        "GIT_CONFIG",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_COMMON_DIR",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_TRACE",
        "PAGER",
        "EDITOR",
        "VISUAL",
        "SSH_ASKPASS",
    }
)


# objects as the commits name them: no replace ref
AS_COMMITTED = GIT_AS_COMMITTED


def argv(repo: Path, *args: str) -> list[str]:
    """A git command over ``repo`` that runs no program named by any configuration and
    reads objects as committed (``environment`` sets the same for the rest)."""
    flags = [part for kv in OVERRIDES for part in ("-c", kv)]
    return ["git", "--no-pager", "--no-replace-objects", *flags, "-C", str(repo), *args]


def environment(base: Mapping[str, str], home: Path) -> dict[str, str]:
    """``base`` without what could point git at configuration or programs, plus: no
    system or global configuration files, and an engine-owned HOME (which git does not
    need to exist)."""
    # no GIT_* but the commit identity: the rest name programs, configuration, or where
    # git reads from
    env = {
        k: v
        for k, v in base.items()
        if k not in _DROPPED and (not k.startswith("GIT_") or k in _IDENTITY)
    }
    # the overrides for every git run with this environment too (`git apply`, the
    # workbench's), not only those built with ``argv``: command-line scope, as `-c`
    for i, item in enumerate(OVERRIDES):
        key, _, value = item.partition("=")
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    env["GIT_CONFIG_COUNT"] = str(len(OVERRIDES))
    env.update(
        {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_OPTIONAL_LOCKS": "0",
            **AS_COMMITTED,
        }
    )
    return env


def real_dir(path: Path, what: str) -> None:
    """Refuse to go on through ``path`` unless it is a real directory (not a symlink the
    sandbox left behind to send the engine elsewhere on the host)."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        raise WorkspaceTampering(
            f"{what} ({path.name}) was removed by the participant's code"
        ) from None
    if not stat.S_ISDIR(mode):
        raise WorkspaceTampering(
            f"{what} ({path.name}) was replaced by the participant's code"
            + (" with a symlink" if stat.S_ISLNK(mode) else "")
        )


def _entries(git_dir: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under ``git_dir`` (no link followed): its type, and for what is not a
    directory its size and mtime (a directory's mtime moves with any lock file made and
    removed in it)."""
    found: dict[str, tuple[int, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(git_dir):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath, name)
            st = path.lstat()
            kind = stat.S_IFMT(st.st_mode)
            rel = str(path.relative_to(git_dir))
            found[rel] = (
                (kind, 0, 0) if stat.S_ISDIR(st.st_mode) else (kind, st.st_size, st.st_mtime_ns)
            )
    return found


def written(
    git_dir: Path, trusted_git_dir: Path, allowed: frozenset[str] = frozenset({"index"})
) -> list[str]:
    """What differs in ``git_dir`` (a workspace's, after a sandboxed phase) from the
    trusted copy it was made from, ``allowed`` aside (the index, which git's own status
    refreshes): refs (``refs/replace/`` names another tree for a commit), configuration,
    hooks, objects. Read before ``reseat`` throws it away, so that the row can say it."""
    now, before = _entries(git_dir), _entries(trusted_git_dir)
    return sorted(
        rel
        for rel in now.keys() | before.keys()
        if rel not in allowed and now.get(rel) != before.get(rel)
    )


def _replace(trusted: Path, target: Path) -> None:
    real_dir(target.parent, "the repository")
    try:
        mode = target.lstat().st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None:
        if stat.S_ISDIR(mode):
            shutil.rmtree(target)
        else:
            target.unlink()
    subprocess.run(
        ["cp", "-a", "--reflink=auto", "--no-dereference", str(trusted), str(target)],
        check=True,
        capture_output=True,
    )


async def reseat(repo: Path, trusted_git_dir: Path) -> None:
    """Replace ``repo/.git`` (whatever the sandbox made of it) with a copy of
    ``trusted_git_dir``, reading nothing of the old one."""
    await asyncio.to_thread(check_config, trusted_git_dir)
    await asyncio.to_thread(_replace, trusted_git_dir, repo / ".git")


# Keys of git's configuration (git help --config) that name a program to run, or another
# file to read configuration from. The engine writes none into a prepared repository, so
# one there means that repository was written by someone else.
PROGRAM_KEYS = re.compile(
    r"""^(
        include\.path | includeif\..*\.path
      | filter\..+\.(clean|smudge|process)
      | diff\..+\.(command|textconv) | diff\.external
      | merge\..+\.driver
      | (difftool|mergetool|man|browser|guitool)\..+\.(cmd|path)
      | gpg(\..+)?\.program | gpg\.ssh\.defaultkeycommand
      | credential(\..+)?\.helper
      | core\.(fsmonitor|hookspath|pager|editor|askpass|sshcommand|gitproxy|alternaterefscommand)
      | sequence\.editor | pager\..+ | alias\..+
      | remote\..+\.(uploadpack|receivepack|proxy|vcs)
      | uploadpack\.packobjectshook | submodule\..+\.update | sendemail\..+
    )$""",
    re.VERBOSE,
)


def check_config(git_dir: Path) -> None:
    """Refuse a trusted ``.git`` whose own configuration names a program or includes
    another file (read without following includes; no program runs to read it)."""
    config = git_dir / "config"
    if not config.is_file() or config.is_symlink():
        raise WorkspaceTampering(f"the prepared repository's git configuration ({config}) is gone")
    files = [config, *git_dir.glob("config.worktree"), *git_dir.glob("modules/**/config")]
    keys = []
    for path in files:
        listed = subprocess.run(
            ["git", "config", "--file", str(path), "--no-includes", "--name-only", "--list"],
            capture_output=True,
            text=True,
            env={"PATH": os.defpath, "GIT_CONFIG_NOSYSTEM": "1", "HOME": os.devnull},
            check=False,
        )
        if listed.returncode != 0:
            raise WorkspaceTampering(
                f"the prepared repository's git configuration ({path.name}) does not read: "
                + listed.stderr[-300:]
            )
        keys += listed.stdout.splitlines()
    found = [key for key in keys if PROGRAM_KEYS.match(key.lower())]
    if found:
        raise WorkspaceTampering(
            "the prepared repository's git configuration names programs or other files "
            f"({', '.join(found[:5])}): it was written by something other than the engine; "
            "remove the cache's prepared workspace to have it made again"
        )
