"""Building one environment: interpreter copy, locked installs (the recipe's date, the
project's own dependencies), source-only pins, system packages, and what a build's
failure says about retrying it."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from swegreen.core.errors import (
    EnvSetupFailed,
    EvaluationFailure,
)
from swegreen.core.recipes import Recipe
from swegreen.environments.dated_index import DatedIndex
from swegreen.environments.environment import (
    BUILD_LOG,
    BUILD_TIMEOUT,
    COMPLETE,
    ENV_INFO,
    LOCK_LIST,
    Checkout,
    ReadFile,
    transient_failure,
)
from swegreen.environments.interpreters import (
    Interpreter,
    InterpreterSearch,
    describe_interpreter,
    find_interpreter,
)
from swegreen.environments.lock import _LockedInstalls, creation_stage
from swegreen.environments.requirements import (
    source_build_system_packages,
)
from swegreen.environments.source_builds import (
    TARGET_SCRIPT,
    Target,
    build_wheels,
    find_source_only,
    pins,
)
from swegreen.environments.system_deps import (
    build_locales,
    build_sysroot,
    host_locales,
    merge_path_vars,
    sysroot_bin_dirs,
)
from swegreen.environments.views import (
    INTERPRETER_EXECUTABLES,
)
from swegreen.processes.procs import ProcResult, run_process
from swegreen.sandbox import seal

# Upstream's images carry these; older interpreters get the last releases that support them.
BASE_TOOLING = {
    "3.5": ("pip==20.3.4", "setuptools==50.3.2", "wheel==0.37.1"),
    "3.6": ("pip==21.3.1", "setuptools==59.6.0", "wheel==0.37.1"),
    "3.7": ("pip==24.0", "setuptools==68.0.0", "wheel==0.42.0"),
}


DEFAULT_TOOLING = ("pip==24.2", "setuptools==75.1.0", "wheel==0.44.0")


class BuildHost(Protocol):
    """What a build needs of the manager that started it (manager.EnvManager)."""

    root: Path
    search: InterpreterSearch
    dated_index: DatedIndex | None

    def build_env(self, home: Path) -> dict[str, str]: ...

    async def index_url(self, recipe: Recipe) -> str | None: ...

    async def same_lock(self, lock_key: str) -> str | None: ...

    def record_lock(self, lock_key: str, key: str) -> None: ...


LOCK_KEY_SCHEMA = 1


def lock_key(recipe: Recipe, python: str, requirements: list[str], locked: str) -> str:
    """What an environment is made of: its recipe, its Python, its requirements and the
    lock they resolved to (the commit they were read at left out)."""
    data = [LOCK_KEY_SCHEMA, recipe.model_dump(mode="json"), python, requirements, locked]
    blob = json.dumps(data, sort_keys=True, default=list)
    return "lock-" + hashlib.sha256(blob.encode()).hexdigest()[:16]


class SameAsBuilt(Exception):
    """The build found a complete environment made of the same: ``key`` is used instead."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class _Build(_LockedInstalls):
    """One environment build, step by step, with everything it ran kept in its log."""

    def __init__(
        self,
        mgr: BuildHost,
        recipe: Recipe,
        label: str,
        setup_commit: str,
        key: str,
        path: Path,
        read_file: ReadFile,
    ) -> None:
        self.mgr, self.recipe, self.key, self.path = mgr, recipe, key, path
        self.label, self.setup_commit, self.read_file = label, setup_commit, read_file
        self.checkout: Checkout | None = None
        self.conda_system: list[str] = []
        self.lock_key: str | None = None
        self.source_build_system: list[str] = []  # for pins built from source here
        self.dated_index_url: str | None = None
        self.log: list[str] = [
            f"# environment {key} for {label}",
            f"# recipe {recipe.model_dump_json()}",
        ]
        home = mgr.root / ".home"
        home.mkdir(parents=True, exist_ok=True)
        self.env = mgr.build_env(home)

    async def step(
        self,
        argv: list[str],
        what: str,
        *,
        cwd: Path | None = None,
        extra_env: Mapping[str, str] | None = None,
        timeout: float = BUILD_TIMEOUT,
    ) -> ProcResult:
        self.log.append(f"$ {' '.join(argv)}")
        env = {**self.env, **(extra_env or {})}
        result = await run_process(argv, cwd=cwd or self.path, env=env, timeout=timeout)
        self.log.append(result.output)
        if not result.ok:
            why = "timed out" if result.timed_out else f"exited {result.returncode}"
            raise EnvSetupFailed(
                f"environment build for {self.label}: {what} {why}",
                log_tail=result.tail(),
                permanent=not result.timed_out and not transient_failure(result.output),
            )
        return result

    async def run(self) -> None:
        failed_log = self.mgr.root / f"{self.key}.failed.log"
        await asyncio.to_thread(shutil.rmtree, self.path, True)  # an interrupted earlier build
        self.path.mkdir(parents=True)
        failed_log.unlink(missing_ok=True)
        try:
            await self._build()
        except SameAsBuilt as same:
            self.log.append(f"# the same lock as environment {same.key}: that one is used")
            shutil.rmtree(self.path, ignore_errors=True)
            raise
        except BaseException as exc:
            self.log.append(f"# FAILED: {exc}")
            failed_log.write_text("\n".join(self.log))
            shutil.rmtree(self.path, ignore_errors=True)
            # a repository that cannot be checked out keeps its own reason and permanence
            if isinstance(exc, Exception) and not isinstance(exc, EvaluationFailure):
                raise EnvSetupFailed(
                    f"environment build for {self.label} failed: {exc}",
                    log_tail="\n".join(self.log)[-4000:],
                    permanent=not isinstance(exc, OSError),
                ) from exc
            raise
        (self.path / BUILD_LOG).write_text("\n".join(self.log))
        seal.seal_env(self.path)  # checked before use where tests share the engine's uid
        (self.path / COMPLETE).write_text(str(time.time()))
        if self.lock_key is not None:
            self.mgr.record_lock(self.lock_key, self.key)

    async def _build(self) -> None:
        recipe, prefix = self.recipe, self.path / "py"
        self.dated_index_url = await self.mgr.index_url(recipe)
        found = await asyncio.to_thread(
            find_interpreter, recipe.python, self.mgr.search, self.label
        )
        interp = await asyncio.to_thread(describe_interpreter, found)
        source = self.mgr.search.source_of(found, recipe.python)
        self.log.append(
            f"# interpreter {interp.path} (Python {interp.version}, {interp.prefix}; "
            + ", ".join(f"{k} {v}" for k, v in source.items() if k != "python")
            + ")"
        )
        await self._make_prefix(interp, prefix)
        python = str(prefix / "bin" / "python")
        pip = [python, "-m", "pip", "install", "--no-input"]
        await self.step(
            [*pip, *BASE_TOOLING.get(interp.version, DEFAULT_TOOLING)], "installing base tooling"
        )
        # Upstream's images carry these versions whatever the recipe's date (setuptools
        # 75.1.0 is newer than 2024-08-01); every pip after them sees the dated index.
        if (url := self.dated_index_url) is not None:
            self.env["PIP_INDEX_URL"] = url  # build isolation included (dated_index.py)
            self.log.append(f"# pip sees the index as of {recipe.exclude_newer}: {url}")
        requirements = await asyncio.to_thread(self._requirements)
        runtime: dict[str, str] = {}
        extra_bin: list[str] = []
        system = self._system_packages(requirements)
        if system:
            runtime, extra_bin = await self._add_system_packages(system)
        if recipe.locales:
            have = await host_locales(self.step)
            runtime.update(
                await build_locales(list(recipe.locales), self.path / "locale", have, self.step)
            )
        project = await self._project()
        frozen = False
        source_builds: list[dict[str, object]] = []
        if requirements or project:
            req_in = self.path / "requirements.in"
            req_in.write_text("\n".join(requirements) + "\n")
            locked = await self._freeze(requirements, project, interp)
            if locked is not None:
                # what the environment is made of is now known: an environment made of the
                # same (another commit's, whose requirement files read the same) is used
                self.lock_key = lock_key(recipe, interp.version, requirements, locked.read_text())
                if (same := await self.mgr.same_lock(self.lock_key)) is not None:
                    raise SameAsBuilt(same)
            source_builds, more = await self._build_source_only(locked, requirements)
            if more is not None:
                runtime = merge_path_vars(runtime, more[0])
                extra_bin = list(dict.fromkeys([*extra_bin, *more[1]]))
            await self._install_creation_packages(pip, locked)
            if locked is not None:
                frozen = True
                await self.step([*pip, "-r", str(locked)], "installing the locked packages")
            elif requirements:
                await self.step([*pip, "-r", str(req_in)], "installing the recipe's packages")
            if project:
                shutil.rmtree(project[0], ignore_errors=True)
        dated = self.dated_index_url is not None
        freeze = await self.step([python, "-m", "pip", "freeze", "--all"], "listing packages")
        (self.path / LOCK_LIST).write_text(freeze.output)
        (self.path / ENV_INFO).write_text(
            json.dumps(
                {
                    "key": self.key,
                    "for": self.label,
                    "setup_commit": self.setup_commit,
                    "interpreter": str(interp.path),
                    "interpreter_source": source,
                    "python": interp.version,
                    "layout": "interpreter copy" if interp.relocatable else "virtualenv",
                    "frozen_as_of": recipe.exclude_newer if frozen or dated else None,
                    "frozen_by": "lock" if frozen else ("dated index" if dated else None),
                    "system_packages": system + self.source_build_system,
                    "source_builds": source_builds,
                    "runtime_env": runtime,
                    "extra_bin": extra_bin,
                    "recipe": recipe.model_dump(mode="json"),
                },
                indent=2,
            )
        )

    async def _add_system_packages(self, packages: list[str]) -> tuple[dict[str, str], list[str]]:
        """Unpack ``packages`` into the environment's sysroot; the builds after this (pip's
        isolated ones too) find its tools, headers and libraries. Returns the variables
        and PATH entries the environment's programs need at run time."""
        sysroot = self.path / "sysroot"
        runtime = await build_sysroot(packages, sysroot, self.step)
        extra_bin = [str(d) for d in sysroot_bin_dirs(sysroot)]
        path = [d for d in extra_bin if d not in self.env["PATH"].split(":")]
        self.env = merge_path_vars(self.env, runtime, {"PATH": ":".join([*path, self.env["PATH"]])})
        return runtime, extra_bin

    async def _build_source_only(
        self, locked: Path | None, requirements: list[str]
    ) -> tuple[list[dict[str, object]], tuple[dict[str, str], list[str]] | None]:
        """Wheels for the pins PyPI has only as source for this interpreter, built with
        the build requirements of their own release (source_builds.py); every later pip
        of this build finds them (PIP_FIND_LINKS). Returns what was built, and the
        run-time variables of the system packages those builds needed (a Fortran
        compiler and BLAS for scipy), if any."""
        index = self.mgr.dated_index
        if self.dated_index_url is None or index is None:
            return [], None
        lines = locked.read_text().splitlines() if locked is not None else requirements
        wanted = pins([*lines, *self.recipe.packages])
        if not wanted:
            return [], None
        python = self.path / "py" / "bin" / "python"
        probe = await run_process([str(python), "-c", TARGET_SCRIPT], cwd=self.path, env=self.env)
        if not probe.ok:
            self.log.append(
                f"# wheel tags unknown, source-only pins not looked for\n{probe.output}"
            )
            return [], None
        target = Target.from_probe(python, probe.output, dict(wanted), self.dated_index_url)
        todo = await find_source_only(wanted, self.dated_index_url, set(target.tags))
        if not todo:
            return [], None
        self.log.append(
            "# only as source for this interpreter: "
            + ", ".join(f"{p.name}=={p.version} ({p.released})" for p in todo)
        )
        more = None
        self.source_build_system = source_build_system_packages(p.name for p in todo)
        if self.source_build_system:
            more = await self._add_system_packages(self.source_build_system)
        wheelhouse = self.path / "wheelhouse"
        built = await build_wheels(target, todo, wheelhouse, index.url, self.step)
        self.env["PIP_FIND_LINKS"] = str(wheelhouse)
        return built, more

    async def _install_creation_packages(self, pip: list[str], locked: Path | None) -> None:
        """Upstream creates the environment with its ``packages`` (``conda create python=X
        setuptools==38.2.4``) and pip-installs the rest afterwards: a pinned setuptools
        or numpy is in place before anything is built against it (MarkupSafe 1.0 builds
        only with an old setuptools). Unpinned ones take the lock's version."""
        if not self.recipe.packages:
            return
        lock_lines = locked.read_text().splitlines() if locked is not None else []
        specs, constraints = creation_stage(list(self.recipe.packages), lock_lines)
        argv = [*pip, *specs]
        if constraints:
            path = self.path / "creation-constraints.txt"
            path.write_text("\n".join(constraints) + "\n")
            argv += ["-c", str(path)]
        await self.step(argv, "installing the recipe's packages present at creation")

    async def _make_prefix(self, interp: Interpreter, prefix: Path) -> None:
        if interp.relocatable:
            await asyncio.to_thread(_copy_interpreter, interp, prefix)
            self.log.append(f"# copied {interp.prefix} -> {prefix} (site-packages left out)")
            await self.step(
                [str(prefix / "bin" / "python"), "-m", "ensurepip", "--default-pip"],
                "bootstrapping pip",
            )
        else:
            await self.step(
                [str(interp.path), "-m", "venv", "--copies", str(prefix)], "creating the virtualenv"
            )


def relocate_runpath(binary: bytes, libdir: bytes) -> bytes:
    """An interpreter built with a shared libpython (pyenv's) finds it through an absolute
    RUNPATH into its original tree, which a sandbox does not show: point it at
    ``$ORIGIN/../lib``, the copy's own, as conda does when it relocates binaries (the new
    string, NUL-padded, takes the old one's place in the string table)."""
    target = b"$ORIGIN/../lib"
    old = libdir + b"\0"
    if len(target) >= len(old) or old not in binary:
        return binary
    return binary.replace(old, target + b"\0" * (len(old) - len(target)))


# What conda-forge's python keeps of CPython's own regression suite (lib/pythonX.Y/test):
# the public test.support helpers some projects' tests import, nothing else (its feedstock
# deletes the rest; a pyenv build keeps all of it: 120 MB, 4,000 files per environment).
KEPT_OF_TEST = frozenset({"__init__.py", "support"})


def _copy_interpreter(interp: Interpreter, dest: Path) -> None:
    """Copy an interpreter tree like a fresh conda env: stdlib and binaries, no
    site-packages (whatever the host installed there stays out), of CPython's own test
    suite only what conda keeps, scripts re-pointed."""
    site = f"python{interp.version}/site-packages"
    regression = f"python{interp.version}/test"
    from_conda = (interp.prefix / "conda-meta").is_dir()

    def ignore(directory: str, names: list[str]) -> list[str]:
        if directory.endswith(site):
            return names
        if directory.endswith(regression) and Path(directory).parent.parent == (
            interp.prefix / "lib"
        ):
            return [n for n in names if n not in KEPT_OF_TEST]
        if Path(directory) == interp.prefix / "bin" and not from_conda:
            # scripts of host-installed packages; a conda install's bin holds only its
            # packages' programs (openssl, sqlite3, xz...), on PATH in an official env too
            return [n for n in names if not n.startswith(INTERPRETER_EXECUTABLES)]
        return []

    shutil.copytree(interp.prefix, dest, symlinks=True, ignore=ignore)
    old, new = str(interp.prefix).encode(), str(dest).encode()
    for path in (dest / "bin").iterdir():
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if old in data[:65536] and b"\0" not in data[:1024]:  # text scripts only
                path.write_bytes(data.replace(old, new))
            elif data.startswith(b"\x7fELF"):
                relocated = relocate_runpath(data, old + b"/lib")
                if relocated != data:
                    path.write_bytes(relocated)
    # Build configuration names the original tree (LIBDIR, -L and -rpath for extensions,
    # which Python <= 3.7 links against libpython): point it at the copy, which the
    # sandbox shows, as conda rewrites prefixes when it relocates an environment.
    for pattern in (
        "lib/python*/_sysconfigdata*.py",
        "lib/python*/config-*/Makefile",
        "lib/pkgconfig/*.pc",
    ):
        for path in dest.glob(pattern):
            data = path.read_bytes()
            if old in data:
                path.write_bytes(data.replace(old, new))
    for stale in dest.glob("lib/python*/__pycache__/_sysconfigdata*.pyc"):
        stale.unlink()
    python = dest / "bin" / "python"
    if not python.exists():
        python.symlink_to(f"python{interp.version}")
