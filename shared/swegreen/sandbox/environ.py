"""A sandboxed run's whole environment (nothing of the host's but the package index's
settings, without credentials), its HOME and TMPDIR, and a free loopback port."""

from __future__ import annotations

import hashlib
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path

_CREDENTIALS = re.compile(r"(://)[^/@\s]+@")


# Host variables a test run may need to reach a package index at eval-time install.
INDEX_PASSTHROUGH = (
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_CERT",
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "no_proxy",
)


SCRATCH_ROOTS = (Path("/tmp"), Path("/var/tmp"))


def scratch_dir(checkout: Path, name: str) -> Path:
    """A directory for a test run's HOME and TMPDIR under a different top-level directory
    than the checkout, as in the official images (/testbed beside /tmp). Tools that make
    paths relative only within a shared root (docutils' relative_path) then see the same
    absolute temp paths as upstream, not ``../tmp/...``. Its name carries a digest of the
    checkout's path: two caches (two engines, two users) preparing the same instance at
    once never share one."""
    where = checkout.resolve()
    name = f"{name}-{hashlib.sha256(str(where).encode()).hexdigest()[:10]}"
    for root in SCRATCH_ROOTS:
        if root.resolve().parts[:2] != where.parts[:2] and os.access(root, os.W_OK):
            return root / name
    return checkout.parent / name


def free_port() -> int:
    """A free port on the host's loopback (services outside a namespace need their own)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def without_credentials(value: str) -> str:
    return _CREDENTIALS.sub(r"\1", value)


def sandbox_env(
    *,
    bin_dirs: list[Path],
    virtual_env: Path | None,
    scratch: Path,
    host_env: Mapping[str, str],
    pip_cache: Path | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of a test run. Nothing of the host's is inherited except the
    package-index settings an eval-time install needs, stripped of embedded credentials.
    HOME and TMPDIR are ``scratch``/home and ``scratch``/tmp (see ``scratch_dir``)."""
    home, tmp = scratch / "home", scratch / "tmp"
    home.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    system_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    env = {
        "PATH": ":".join([*(str(b) for b in bin_dirs), system_path]),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "TEMP": str(tmp),
        "TMP": str(tmp),
        "TZ": "Etc/UTC",
        "PYTHONHASHSEED": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "PIP_CONFIG_FILE": "/dev/null",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
    }
    if virtual_env is not None:
        env["VIRTUAL_ENV"] = str(virtual_env)
    if pip_cache is not None:
        env["PIP_CACHE_DIR"] = str(pip_cache)
    env.update({k: without_credentials(host_env[k]) for k in INDEX_PASSTHROUGH if k in host_env})
    env.update(extra or {})
    return env
