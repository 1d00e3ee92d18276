"""The environment cache: one virtualenv per recipe key, built once and reused.

An environment is built under a lock, in place, and marked complete only at the end; a
failed build leaves its log (``<key>.failed.log``) and nothing that looks usable. Each
environment keeps its build log and the resolved package versions (``lock.txt``).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from swegreen.dataset import Instance
from swegreen.errors import EnvSetupFailed
from swegreen.interpreters import InterpreterSearch, find_interpreter
from swegreen.locks import file_lock
from swegreen.procs import run_process
from swegreen.recipes import Recipe

COMPLETE = ".complete"
BUILD_LOG = "build.log"
LOCK_LIST = "lock.txt"
BUILD_TIMEOUT = 3600.0
# Passed from the host to environment builds (never to test runs): reaching the index.
BUILD_PASSTHROUGH = (
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
    "UV_INDEX_URL",
)


@dataclass(frozen=True)
class Environment:
    key: str
    path: Path
    python: Path
    build_seconds: float = 0.0
    reused: bool = True

    @property
    def bin_dir(self) -> Path:
        return self.python.parent


class EnvManager:
    def __init__(self, root: Path, search: InterpreterSearch, host_env: Mapping[str, str]) -> None:
        self.root = root
        self.search = search
        self.host_env = dict(host_env)

    def build_env(self, home: Path) -> dict[str, str]:
        """The clean environment every build step runs with (no host pip config leaks in)."""
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TZ": "Etc/UTC",
            "PIP_CONFIG_FILE": "/dev/null",
            "PIP_CACHE_DIR": str(self.root / ".pip-cache"),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_INPUT": "1",
            "PIP_PROGRESS_BAR": "off",
        }
        env.update({k: self.host_env[k] for k in BUILD_PASSTHROUGH if k in self.host_env})
        return env

    async def ensure(self, recipe: Recipe, instance: Instance) -> Environment:
        """The environment for ``instance``, building it if no complete one exists."""
        key = recipe.env_key(instance.environment_setup_commit)
        path = self.root / key
        if (path / COMPLETE).exists():
            return Environment(key, path, path / "venv" / "bin" / "python")
        async with file_lock(self.root / ".locks" / f"{key}.lock"):
            if (path / COMPLETE).exists():  # built by whoever held the lock before us
                return Environment(key, path, path / "venv" / "bin" / "python")
            start = time.monotonic()
            await self._build(recipe, instance, key, path)
            return Environment(
                key,
                path,
                path / "venv" / "bin" / "python",
                build_seconds=time.monotonic() - start,
                reused=False,
            )

    async def _build(self, recipe: Recipe, instance: Instance, key: str, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)  # an interrupted earlier build
        path.mkdir(parents=True)
        log_path = path / BUILD_LOG
        failed_log = self.root / f"{key}.failed.log"
        failed_log.unlink(missing_ok=True)
        home = self.root / ".home"
        home.mkdir(parents=True, exist_ok=True)
        env = self.build_env(home)
        log: list[str] = [
            f"# environment {key} for {instance.repo} {instance.version}",
            f"# recipe {recipe.model_dump_json()}",
        ]

        async def step(argv: list[str], what: str, timeout: float = BUILD_TIMEOUT) -> str:
            log.append(f"$ {' '.join(argv)}")
            result = await run_process(argv, cwd=path, env=env, timeout=timeout)
            log.append(result.output)
            if not result.ok:
                why = "timed out" if result.timed_out else f"exited {result.returncode}"
                raise EnvSetupFailed(
                    f"environment build for {instance.repo} {instance.version}: {what} {why}",
                    log_tail=result.tail(),
                )
            return result.output

        try:
            interpreter = await asyncio.to_thread(
                find_interpreter, recipe.python, self.search, f"{instance.repo} {instance.version}"
            )
            venv = path / "venv"
            await step([str(interpreter), "-m", "venv", str(venv)], "creating the virtualenv")
            python = str(venv / "bin" / "python")
            pip = [python, "-m", "pip", "install", "--no-input"]
            if recipe.packages:
                await step([*pip, *recipe.packages], "installing packages")
            if recipe.pip_packages:
                await step([*pip, *recipe.pip_packages], "installing pip_packages")
            freeze = await step([python, "-m", "pip", "freeze", "--all"], "listing packages")
            (path / LOCK_LIST).write_text(freeze)
            (path / "env.json").write_text(
                json.dumps(
                    {
                        "key": key,
                        "repo": instance.repo,
                        "version": instance.version,
                        "python": str(interpreter),
                        "recipe": recipe.model_dump(mode="json"),
                    },
                    indent=2,
                )
            )
        except BaseException as exc:
            log.append(f"# FAILED: {exc}")
            failed_log.write_text("\n".join(log))
            shutil.rmtree(path, ignore_errors=True)
            if isinstance(exc, EnvSetupFailed | asyncio.CancelledError):
                raise
            if isinstance(exc, Exception):
                raise EnvSetupFailed(
                    f"environment build for {instance.repo} {instance.version} failed: {exc}",
                    log_tail="\n".join(log)[-4000:],
                ) from exc
            raise
        log_path.write_text("\n".join(log))
        (path / COMPLETE).write_text(str(time.time()))
