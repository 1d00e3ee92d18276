"""Environment recipes: how to build, install and test one (repo, version), as data.

A recipe is the virtualenv translation of an official SWE-bench spec (python version,
packages, pre-install and install steps, test command, log parser). Recipes live in JSON
files shipped with the package; a recipe book maps (repo, version) to a recipe.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from swegreen.core.dataset import Instance
from swegreen.core.errors import ConfigError, NoRecipe

# 2: environments also lock the project's own dependencies; 4: interpreter copies find
# their libpython relative to themselves (they run where the original tree is out of sight);
# 5: built in upstream's order (creation packages first), a satisfied conda pin kept;
# 6: interpreter copies' build configuration (sysconfig, Makefile) names the copy
RECIPE_SCHEMA_VERSION = 6
# 3: where the project disagrees with a recipe pin, the project wins (as upstream), and
#    exempt packages really are exempt (schema 2 envs with exemptions were built unfrozen)
# Fields that decide what an environment contains; the rest only affect evaluation.
ENV_FIELDS = (
    "python",
    "packages",
    "requirements",
    "requirements_kind",
    "pip_packages",
    "constraints",
    "exclude_newer",
    "exclude_newer_exempt",
    "system_packages",
    "locales",
)


class Recipe(BaseModel):
    """How to build an environment for, and run the tests of, one (repo, version)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    python: str = Field(description='Interpreter version "X.Y", or "host" for the engine\'s own.')
    packages: tuple[str, ...] = Field((), description="pip requirements installed first.")
    requirements: tuple[str, ...] = Field(
        (),
        description="Requirements files in the repo at environment_setup_commit; the first "
        "that exists is used (upstream's MAP_REPO_TO_REQS_PATHS / ENV_YML_PATHS).",
    )
    requirements_kind: Literal["pip", "conda_env"] = Field(
        "pip", description="A pip requirements file, or a conda environment.yml to translate."
    )
    pip_packages: tuple[str, ...] = Field(
        (), description="pip requirements that win over packages."
    )
    constraints: tuple[str, ...] = Field((), description="Extra pip constraints for every step.")
    exclude_newer: str | None = Field(
        None, description="Resolve as of this date (YYYY-MM-DD), against dependency drift."
    )
    exclude_newer_exempt: tuple[str, ...] = Field(
        (), description="Packages resolved without the date cap (old wheels lack a C library)."
    )
    system_packages: tuple[str, ...] = Field(
        (), description="Debian packages unpacked into the environment's sysroot (no root needed)."
    )
    locales: tuple[str, ...] = Field(
        (), description="Locales generated into the environment with localedef (no root needed)."
    )
    pre_install: tuple[str, ...] = Field(
        (), description="Shell steps in the checkout before install."
    )
    install: str | None = Field(None, description="Installs the repository into the environment.")
    test_cmd: str
    eval_commands: tuple[str, ...] = Field((), description="Shell steps at the top of eval.sh.")
    upstream_eval_commands: tuple[str, ...] | None = Field(
        None,
        description="Upstream's eval commands where the engine runs others (locale-gen needs "
        "root): what the official instance images run (the Docker backend).",
    )
    log_parser: str = "parse_log_pytest"
    eval_type: Literal["pass_and_fail", "fail_only"] = "pass_and_fail"
    directive_style: Literal["paths", "django"] = "paths"
    eval_timeout: float | None = Field(None, description="Default time limit for eval.sh.")
    network: bool = Field(False, description="Tests need the network (sandbox leaves it on).")
    cpus: float | None = Field(
        None,
        description="CPUs upstream's image is limited to (nano_cpus), shown to the tests "
        "as the cgroup CPU quota Docker would show.",
    )
    services: tuple[str, ...] = Field(
        (), description="Local stand-ins for network services the tests call (e.g. httpbin)."
    )
    env_vars: tuple[tuple[str, str], ...] = Field((), description="Set while tests run.")
    notes: tuple[str, ...] = Field(
        (), description="What the conda-to-venv translation could not keep, and what replaces it."
    )

    def env_key(self, setup_commit: str) -> str:
        """Identity of the built environment: equal keys share one build."""
        data = {k: getattr(self, k) for k in ENV_FIELDS}
        if self.reads_setup_commit:
            data["setup_commit"] = setup_commit
        blob = json.dumps([RECIPE_SCHEMA_VERSION, data], sort_keys=True, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def content_env_key(self, files: Mapping[str, str | None]) -> str:
        """Identity of the environment by what defines it: the recipe's fields and the
        text of every file the build reads from the repository (``files``: path -> text,
        None where a candidate is absent). Commits whose requirements read the same share
        one build (environments/manager.py)."""
        data: dict[str, object] = {k: getattr(self, k) for k in ENV_FIELDS}
        data["files"] = {
            path: None if text is None else hashlib.sha256(text.encode()).hexdigest()
            for path, text in sorted(files.items())
        }
        blob = json.dumps([RECIPE_SCHEMA_VERSION, "content", data], sort_keys=True, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def content_keyed(self) -> bool:
        """Whether the build reads only files it can name (requirements files), so that
        their text, not the commit, says which environment it is. A build that locks the
        project reads the whole tree at the commit: keyed by the commit."""
        return bool(self.requirements) and not self.locks_project

    @property
    def reads_setup_commit(self) -> bool:
        """Whether the build reads the repository at the environment_setup_commit: its
        requirements files (as upstream), or the project's own dependencies, which the
        engine locks with the rest (``project_extras``). Only such rows need that
        commit at all."""
        return bool(self.requirements) or self.locks_project

    @property
    def locks_project(self) -> bool:
        """Whether the build locks the project's own dependencies, from a checkout of the
        whole tree at the environment_setup_commit."""
        return bool(self.exclude_newer and _installs_project(self.install))

    def digest(self) -> str:
        # Upstream's eval commands are the instance images' (the engine runs none of them).
        data = self.model_dump_json(exclude={"upstream_eval_commands"})
        return hashlib.sha256(data.encode()).hexdigest()[:16]


def _installs_project(install: str | None) -> bool:
    return project_extras(install) is not None


class RecipeBook:
    """Recipes by repo and version."""

    def __init__(self, recipes: Mapping[str, Mapping[str, Recipe]], source: str = "") -> None:
        self._recipes = {repo: dict(versions) for repo, versions in recipes.items()}
        self.source = source

    @classmethod
    def from_data(cls, data: Mapping[str, Any], source: str) -> RecipeBook:
        recipes: dict[str, dict[str, Recipe]] = {}
        for repo, versions in data.get("recipes", {}).items():
            for version, spec in versions.items():
                try:
                    recipes.setdefault(repo, {})[version] = Recipe.model_validate(spec)
                except ValidationError as exc:
                    raise ConfigError(
                        f"{source}: recipe {repo} {version} is invalid: {exc}"
                    ) from None
        return cls(recipes, source)

    @classmethod
    def from_file(cls, path: Path) -> RecipeBook:
        return cls.from_data(json.loads(path.read_text()), str(path))

    @classmethod
    def merged(cls, books: Iterable[RecipeBook]) -> RecipeBook:
        combined: dict[str, dict[str, Recipe]] = {}
        for book in books:
            for repo, versions in book._recipes.items():
                combined.setdefault(repo, {}).update(versions)
        return cls(combined, "+".join(b.source for b in books))

    def repos(self) -> list[str]:
        return sorted(self._recipes)

    def versions(self, repo: str) -> dict[str, Recipe]:
        return dict(self._recipes.get(repo, {}))

    def for_instance(self, instance: Instance) -> Recipe:
        versions = self._recipes.get(instance.repo)
        if versions is None:
            raise NoRecipe(
                f"no environment recipe for repo {instance.repo}; known repos: "
                f"{', '.join(self.repos()) or 'none'}"
            )
        recipe = versions.get(instance.version)
        if recipe is None:
            raise NoRecipe(
                f"no environment recipe for {instance.repo} version {instance.version}; "
                f"known versions: {', '.join(sorted(versions))}"
            )
        return recipe

    def digest(self) -> str:
        blob = json.dumps(
            {
                r: {v: rec.model_dump(mode="json") for v, rec in vs.items()}
                for r, vs in sorted(self._recipes.items())
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


_PIP_INSTALL = re.compile(r"\bpip\s+install\b(.*)$")


def project_extras(install: str | None) -> str | None:
    """The extras of a ``pip install [-e] .[extras]`` install step ("" for none), or None
    when the step does not pip-install the repository itself."""
    m = _PIP_INSTALL.search(install or "")
    if not m:
        return None
    for token in shlex.split(m.group(1)):
        if token == "." or token.startswith(".["):
            return token[1:]
    return None


def known_network_instances() -> frozenset[str]:
    """Instances whose tests need the internet upstream (data/network_instances.json)."""
    entry = resources.files("swegreen") / "data" / "network_instances.json"
    if not entry.is_file():
        return frozenset()
    return frozenset(k for k in json.loads(entry.read_text()) if not k.startswith("_"))


def tests_need_network(recipe: Recipe, instance_id: str, named: Iterable[str] = ()) -> bool:
    """Whether an instance's tests keep the network: its recipe says so, the instance is a
    known one (data/network_instances.json), or the config ``named`` it. The one rule the
    engine's sandbox and the AWS pipeline's choice of task network both follow."""
    return recipe.network or instance_id in known_network_instances() or instance_id in set(named)


def verified_recipes() -> RecipeBook:
    """The recipes of SWE-bench Verified's repositories, shipped as data. (The package's
    whole catalog, the sample's too, is ``environments.catalog.builtin_recipes``.)"""
    books = []
    data_dir = resources.files("swegreen") / "data"
    for name in ("swebench_recipes.json",):
        entry = data_dir / name
        if entry.is_file():
            books.append(
                RecipeBook.from_data(json.loads(entry.read_text()), f"swegreen/data/{name}")
            )
    return RecipeBook.merged(books)


PREPARED_SCHEMA = 1


def prepared_name(
    instance: Instance,
    recipe: Recipe,
    setup_commit: str | None = None,
    *,
    offline_installs: bool = False,
) -> str:
    """The name of an instance's prepared workspace (testbed.py): one per instance,
    environment and setup steps (a changed recipe or a rebuilt environment prepares it
    again). ``setup_commit``: where the environment's files were read when that was not
    the row's environment_setup_commit (testbed.setup_source). Here, not in testbed.py,
    because the AWS pipeline's Lambdas name them too. ``offline_installs``: made with the
    wheelhouse its evaluations install from (EvalConfig.offline_installs), another one."""
    parts: list[object] = [
        PREPARED_SCHEMA,
        instance.base_commit,
        recipe.env_key(setup_commit or instance.environment_setup_commit),
        recipe.pre_install,
        recipe.install,
    ]
    if offline_installs:
        parts.append("offline-installs")
    blob = json.dumps(parts)
    return f"{instance.instance_id}.{hashlib.sha256(blob.encode()).hexdigest()[:12]}"
