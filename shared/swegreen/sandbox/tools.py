"""The system tools the engine starts around participant code, by absolute path.

A sandbox's environment puts the row's environment ``bin`` first on ``PATH``, and that
directory is the participant's to fill (a console script its patch declares, a file one
workbench command writes). Any tool the engine, or the privileged wrapper of the test
command, found through that ``PATH`` would run the participant's file outside the sandbox
or before the privilege drop. So every such tool is looked up once in the system's own
directories, which no sandbox can write, and called by that path.
"""

from __future__ import annotations

import functools
import shutil

from swegreen.core.errors import SandboxUnavailable

SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


@functools.cache
def tool(name: str) -> str:
    """The absolute path of ``name`` in the system's directories."""
    found = shutil.which(name, path=SYSTEM_PATH)
    if found is None:
        raise SandboxUnavailable(
            f"{name} is not in {SYSTEM_PATH}: the sandbox calls it there (never through a "
            "PATH a participant can write); install it (scripts/install-system-deps.sh)"
        )
    return found


def optional_tool(name: str) -> str | None:
    """``tool`` for what a step can do without (iproute2 on a minimal host)."""
    return shutil.which(name, path=SYSTEM_PATH)


# What an engine cannot evaluate without, and the Debian package that has it: a run
# refuses to start without them rather than end rows in errors (a bare container has
# neither: scripts/install-system-deps.sh --demo installs both).
REQUIRED = {
    "git": ("git", "the repositories and the apply chain's first steps"),
    "patch": ("patch", "the official apply chain's last step, patch --fuzz"),
}


def require_tools(search_path: str = SYSTEM_PATH) -> None:
    """SandboxUnavailable naming every required tool missing from ``search_path``."""
    missing = [
        (name, package, why)
        for name, (package, why) in REQUIRED.items()
        if shutil.which(name, path=search_path) is None
    ]
    if missing:
        named = "; ".join(f"{name} ({why})" for name, _, why in missing)
        packages = " ".join(package for _, package, _ in missing)
        raise SandboxUnavailable(
            f"not installed: {named}. Install them (apt-get install {packages}; "
            "scripts/install-system-deps.sh --demo does it), then run again"
        )
