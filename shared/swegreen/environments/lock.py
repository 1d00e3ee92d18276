"""What a build installs, locked: the recipe's requirements and the project's own
dependencies resolved as of the recipe's date (uv), system packages they need, and the
split between what the interpreter gets first and the rest."""

from __future__ import annotations

import os
from pathlib import Path

from swegreen.core.errors import (
    EnvSetupFailed,
)
from swegreen.core.recipes import Recipe, project_extras
from swegreen.environments.constraints import (
    clashing_pins,
    compile_command,
    find_uv,
    merge_requirements,
    yield_pins,
)
from swegreen.environments.environment import BUILD_TIMEOUT, ReadFile
from swegreen.environments.interpreters import (
    Interpreter,
)
from swegreen.environments.requirements import (
    build_system_packages,
    environment_yml_requirements,
    requirement_name,
    requirements_txt,
)
from swegreen.processes.procs import run_process


def files_read(recipe: Recipe, read_file: ReadFile) -> dict[str, str | None]:
    """Every file of the repository the build reads for ``recipe``'s requirements (as
    ``_LockedInstalls._requirements`` does): absent candidates before the one found, as
    None, and the files it includes. Their text is the environment's identity."""
    seen: dict[str, str | None] = {}

    def read(path: str) -> str | None:
        if path not in seen:
            seen[path] = read_file(path)
        return seen[path]

    for candidate in recipe.requirements:
        text = read(candidate)
        if text is None:
            continue
        if recipe.requirements_kind != "conda_env":
            requirements_txt(text, read, os.path.dirname(candidate))
        break
    return seen


class _LockedInstalls:
    """The resolving half of a build (environments.build._Build, which runs the steps)."""

    def _system_packages(self, requirements: list[str]) -> list[str]:
        """The recipe's Debian packages, those standing in for conda's system libraries,
        and those the source builds of its requirements need."""
        wanted = [*self.recipe.system_packages, *self.conda_system]
        build = build_system_packages(requirements)
        if build:
            self.log.append(f"# for source builds of the requirements: {', '.join(build)}")
        return list(dict.fromkeys([*wanted, *build]))

    def _requirements(self) -> list[str]:
        recipe = self.recipe
        from_files: list[str] = []
        if recipe.requirements:
            for candidate in recipe.requirements:
                text = self.read_file(candidate)
                if text is None:
                    continue
                self.log.append(f"# requirements from {candidate} at {self.setup_commit}")
                if recipe.requirements_kind == "conda_env":
                    tr = environment_yml_requirements(text)
                    from_files = tr.requirements
                    self.conda_system = tr.system_packages
                    if tr.system_packages:
                        self.log.append(
                            "# conda system libraries, from Debian: "
                            + ", ".join(tr.system_packages)
                        )
                    if tr.dropped:
                        self.log.append(
                            f"# conda-only, not installed by pip: {', '.join(tr.dropped)}"
                        )
                else:
                    from_files = requirements_txt(text, self.read_file, os.path.dirname(candidate))
                break
            else:
                raise EnvSetupFailed(
                    f"environment build for {self.label}: none of {', '.join(recipe.requirements)} "
                    f"exists at {self.setup_commit}",
                    permanent=True,
                )
        return merge_requirements([*recipe.packages, *from_files], recipe.pip_packages)

    async def _project(self) -> tuple[Path, str] | None:
        """A checkout of the repository at the setup commit, when the recipe installs it
        with pip: its own dependencies then join the frozen resolve (else ``pip install -e
        .`` would fetch today's releases of them, e.g. a docutils sphinx 3.x cannot import)."""
        extras = project_extras(self.recipe.install)
        if extras is None or self.checkout is None or not self.recipe.exclude_newer:
            return None
        dest = self.path / "project-src"
        await self.checkout(dest)
        if self.recipe.pre_install:  # e.g. sphinx's pins in setup.py: resolve what install will ask
            script = "\n".join(["set -x", *self.recipe.pre_install])
            env = {**self.env, "SWEGREEN_REPO": str(dest)}
            result = await run_process(["bash", "-c", script], cwd=dest, env=env, timeout=600)
            self.log.append(
                f"# pre_install in the resolve checkout -> exit {result.returncode}\n"
                f"{result.output}"
            )
        return dest, extras

    async def _freeze(
        self, requirements: list[str], project: tuple[Path, str] | None, interp: Interpreter
    ) -> Path | None:
        """Everything the environment needs, resolved as of the recipe's date and locked; or
        None (logged) when that is not possible. The project itself is left out: the
        recipe's install step installs it, finding its dependencies already satisfied."""
        recipe = self.recipe
        if not recipe.exclude_newer:
            return None
        uv = find_uv(self.env["PATH"])
        if uv is None:
            self.log.append("# uv not found: installing without freezing dependencies by date")
            return None
        extra = None
        if recipe.constraints:
            extra = self.path / "recipe-constraints.txt"
            extra.write_text("\n".join(recipe.constraints) + "\n")
        resolve_in = self.path / "resolve.in"
        lines = list(requirements)
        if project:
            lines.append(f"-e {project[0]}{project[1]}")
        resolve_in.write_text("\n".join(lines) + "\n")
        out = self.path / "resolved.txt"

        async def resolve(requirements_in: Path) -> tuple[bool, str]:
            argv = compile_command(
                uv,
                requirements_in,
                out,
                interp.version,
                recipe.exclude_newer,
                recipe.exclude_newer_exempt,
                extra,
            )
            self.log.append(f"$ {' '.join(argv)}")
            result = await run_process(argv, cwd=self.path, env=self.env, timeout=BUILD_TIMEOUT)
            self.log.append(result.output)
            return result.ok, result.output

        ok, output = await resolve(resolve_in)
        yielded: set[str] = set()
        for _ in range(3):  # a project that disagrees with a recipe pin wins, as upstream
            clash = clashing_pins(recipe.pip_packages, output) - yielded if project else set()
            if ok or not clash:
                break
            yielded |= clash
            self.log.append(
                f"# the project's own requirements override the recipe's pins of "
                f"{', '.join(sorted(yielded))}, as its install step does upstream"
            )
            resolve_in.write_text("\n".join(yield_pins(lines, yielded)) + "\n")
            ok, output = await resolve(resolve_in)
        if not ok and project:
            self.log.append(
                "# the project's dependencies could not be resolved: "
                "freezing the recipe's requirements only"
            )
            ok, output = await resolve(self.path / "requirements.in")
        if not ok:
            self.log.append(
                "# uv could not resolve as of the freeze date: pip resolves instead, "
                + (
                    "through the dated index (still as of the date)"
                    if self.dated_index_url is not None
                    else "unfrozen"
                )
            )
            return None
        locked = self.path / "locked.txt"
        keep = [
            line
            for line in out.read_text().splitlines()
            if not line.startswith("-e ") and (not project or str(project[0]) not in line)
        ]
        locked.write_text("\n".join(keep) + "\n")
        return locked


def creation_stage(packages: list[str], lock_lines: list[str]) -> tuple[list[str], list[str]]:
    """What the first install stage asks for, and the constraints it runs under: each
    creation package as the recipe states it, or at the lock's version when the recipe
    leaves it open; everything else the lock pins constrains their dependencies."""
    locked: dict[str, str] = {}
    for line in lock_lines:
        text = line.split("#", 1)[0].strip()
        if text and not text.startswith("-") and not line[:1].isspace() and "==" in text:
            locked[requirement_name(text)] = text
    specs = []
    for package in packages:
        name = requirement_name(package)
        states_version = any(op in package for op in ("=", "<", ">", "~", "!", "@"))
        specs.append(package if states_version or name not in locked else locked[name])
    names = {requirement_name(p) for p in specs}
    return specs, [line for name, line in locked.items() if name not in names]
