"""Evaluation configuration: the ``[config]`` table of scenario.toml, validated once.

Layers, lowest first: field defaults < scenario.toml ``[config]`` < ``SWEGREEN_<KEY>``
environment variables < explicit overrides (CLI flags, or an A2A request's config).
Core code receives the validated model and never reads the environment itself.
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from swegreen.core.dataset import DEFAULT_DATASET, Selection, public_dataset_name
from swegreen.core.errors import ConfigError
from swegreen.core.images import image_template
from swegreen.core.interaction import Budget
from swegreen.core.plan import PLATFORM_STEP_MINUTES
from swegreen.core.task_dialects import AUTO, DIALECTS

ENV_PREFIX = "SWEGREEN_"
# 5 MB: the largest gold patch of SWE-bench Verified is 17 kB; nothing an agent
# writes to fix an issue comes near, while a 50 MB "patch" is an attack on the grader.
DEFAULT_MAX_PATCH_BYTES = 5_000_000
# Tables AgentBeats' scenario.toml may carry besides [config]; they are not ours to check.
AGENTBEATS_TABLES = frozenset({"green_agent", "participants"})


def repo_url(template: str, repo: str, instance_id: str = "") -> str:
    """The URL ``repo_url_template`` (or ``participant_repo_url_template``) gives for a
    repository (``{repo}``, ``{owner}``, ``{name}``, ``{instance_id}``)."""
    owner, _, name = repo.partition("/")
    return template.format(repo=repo, owner=owner, name=name, instance_id=instance_id)


class EvalConfig(BaseModel):
    """What an assessment evaluates and how. Every key may appear in scenario.toml [config]."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # 10,000: a distributed Map's own limit (the AWS pipeline); a local run is bounded by
    # its machine long before.
    max_concurrent_rows: int = Field(1, ge=1, le=10_000, description="Rows evaluated at once.")
    max_rows: int = Field(3, description="Rows to evaluate; -1 for all of the selection.")
    num_instances: int | None = Field(
        None,
        description="AgentBeats v2: how many rows the whole assessment evaluates (all its "
        "shards together); when given it wins over max_rows.",
    )
    green_agent_model: str = Field(
        "ollama/qwen2.5-coder:7b",
        description="litellm model for the green agent's diagnoses and summaries, never verdicts.",
    )
    dataset: str = Field(DEFAULT_DATASET, description="Hub id, or a local .jsonl/.json/.parquet.")
    split: str = Field("test", description="Dataset split on the hub.")
    dataset_revision: str | None = Field(None, description="Hub revision (commit or tag) to pin.")
    instance_ids: tuple[str, ...] = Field((), description="Evaluate only these instances.")
    repos: tuple[str, ...] = Field((), description="Evaluate only rows of these repos.")
    shard_index: int = Field(0, ge=0, description="This shard's index (0-based).")
    num_shards: int = Field(
        1,
        ge=1,
        le=1000,
        description="Shards the selection is dealt to: round-robin by instance id; in "
        "contiguous runs of ids where rows are graded in Docker images (environments docker "
        "or auto), so that a shard's images share their layers.",
    )
    eval_timeout: float | None = Field(
        None,
        gt=0,
        description="Seconds for one instance's eval script (default: the "
        "recipe's own limit, else 1800, the official harness's).",
    )
    participant_timeout: float = Field(
        1800.0, gt=0, description="Seconds a participant has to return its patch."
    )
    time_budget_minutes: float | None = Field(
        None,
        ge=0,
        description="Minutes one shard may take, worst case (every row at its slowest "
        "allowed participant, longest eval and setup: core/plan.py); a request whose worst "
        "case is longer is refused at once, saying what fits. Default: 300 (the AgentBeats "
        "run step) when the request is sharded by the platform (shard_index or num_shards "
        "given), else none; 0: no check.",
    )
    max_attempts: int = Field(
        3, ge=1, le=10, description="Tries per row when the infrastructure fails (not the patch)."
    )
    repo_url_template: str = Field(
        "https://github.com/{repo}.git",
        description="Where repositories are cloned from; {repo}, {owner}, {name} are filled in. "
        "A local directory or mirror works too (e.g. /mirrors/{owner}__{name}.git).",
    )
    participant_repo_url_template: str | None = Field(
        None,
        description="Where participants are told to clone from, when that must differ from "
        "where the evaluator clones (e.g. mirrors whose history ends at each base commit); "
        "{repo}, {owner}, {name} and {instance_id} are filled in. Default: repo_url_template.",
    )
    base_validation: bool = Field(
        False,
        description="Also run each instance's tests on the base commit (cached) to "
        "tell environment problems from participant failures.",
    )
    regression_check: bool = Field(
        False,
        description="For each resolved row, also run the whole test files of the modules "
        "the patch touched (and the row's own test files) with the patch and with the gold "
        "patch (cached), and flag the row where the patch fails a test gold passes "
        "(resolved_with_regressions): a flag, the verdict stays. Engine backend only.",
    )
    env_files_at_base: bool = Field(
        False,
        description="Where a row's environment_setup_commit is missing from the repository "
        "source (a fork), read the recipe's environment files (requirements, "
        "environment.yml) at its base commit instead of failing the row; each such row "
        "says so in its `environment` provenance. Off by default: upstream reads them at "
        "the environment_setup_commit.",
    )

    isolation: Literal["auto", "bwrap", "landlock", "process"] = Field(
        "auto",
        description="How participant code is sandboxed: 'auto' (the default: bwrap where it "
        "runs, else landlock where the kernel has it, said in the run's output and recorded "
        "in each row; refuses to start where neither runs), 'bwrap' (bubblewrap: own user, "
        "PID, mount, IPC and network namespaces, unprivileged, host read-only; the run "
        "refuses to start where it cannot run), 'landlock' (no privileges or namespaces "
        "needed, as under Amber: each process confines itself to the files it is lent, no "
        "TCP to ports below 1024, no signals out; refuses to start without Landlock) or "
        "'process' (an explicit opt-in to the weakest mode: process group, limits and a "
        "clean environment only). See docs/security.md.",
    )
    environments: Literal["engine", "docker", "auto"] = Field(
        "engine",
        description="Where rows are evaluated: 'engine' (environments the engine builds "
        "itself, sandboxed by `isolation`), 'docker' (each row in a fresh container of its "
        "official instance image, on the Docker engine at DOCKER_HOST or the default "
        "socket: AgentBeats' `framework.docker`), or 'auto' (docker when a daemon answers, "
        "else engine). The green agent host's setting, like isolation. docs/fidelity.md.",
    )
    docker_images: str = Field(
        "official",
        description="Docker backend: where instance images come from: 'official' "
        "(swebench/sweb.eval.<arch>.<id>:latest on Docker Hub, 10 anonymous pulls an hour "
        "per address), 'epoch' (ghcr.io/epoch-research, 30 GiB for all 500 Verified images "
        "instead of 189) or a template with {instance_id}, {official_id} and {arch}.",
    )
    docker_pull: Literal["missing", "always", "never"] = Field(
        "missing",
        description="Docker backend: pull an image when the engine lacks it (the official "
        "harness's way), always (refresh :latest), or never.",
    )
    docker_disk_reserve_gb: float = Field(
        10.0,
        ge=0,
        description="Docker backend: free disk (GiB) a pull must leave; below it the row "
        "ends error/disk_full instead of filling the runner (the platform's gateway cannot "
        "remove images).",
    )
    docker_memory_mb: int = Field(
        8192, ge=256, description="Docker backend: memory limit of a row's container (MiB)."
    )
    docker_pids: int = Field(
        4096, ge=64, description="Docker backend: process limit of a row's container."
    )

    max_evaluator_error_share: float = Field(
        0.1,
        ge=0,
        le=1,
        description="The green agent stops an assessment, failed and with nothing published, "
        "when more than this share of its rows end in the evaluator's own errors (an "
        "environment that did not build, a crashed sandbox, an internal error, a participant "
        "that could not read the task), or when its first rows (up to 3) all do: a score "
        "nobody earned is never published. 1 turns the rule off (both parts).",
    )
    max_patch_bytes: int = Field(
        DEFAULT_MAX_PATCH_BYTES,
        ge=1,
        description="Largest patch evaluated, in bytes (UTF-8); a larger one is never applied: "
        "its row is no_op (patch_too_large).",
    )

    interactive: bool = Field(
        True,
        description="Offer participants the interactive mode: shell commands in their own "
        "copy of the prepared workspace, then a patch (needs isolation = bwrap; "
        "docs/interactive.md). Participants that answer with a patch at once are unaffected.",
    )
    max_steps: int = Field(
        100, ge=1, le=10_000, description="Interactive mode: commands one instance may run."
    )
    command_timeout: float = Field(
        300.0, gt=0, description="Interactive mode: seconds one command may run."
    )
    command_output_bytes: int = Field(
        20_000,
        ge=256,
        description="Interactive mode: bytes of one command's output sent back (its head "
        "and tail are kept).",
    )
    max_output_bytes: int = Field(
        2_000_000,
        ge=256,
        description="Interactive mode: bytes of output sent back over one instance's commands.",
    )

    task_dialect: str | dict[str, str] = Field(
        AUTO,
        description="How the task is written for participants: 'universal' (one JSON object "
        "every known public participant reads, beside the data part), 'standard' (prose + "
        "data part), 'json' (one JSON object, as mini-swe-agent wrappers read it), 'xml' "
        "(tagged text), 'agentswe' (the AgentSWE protocol's turns), or 'auto' (what the "
        "participant's agent card declares, else universal). One value for all, or a "
        "table by role, e.g. {agent = 'json'} (docs/agentbeats.md).",
    )

    network_instances: tuple[str, ...] = Field(
        (),
        description="Instances whose test command keeps the network, beside the known ones "
        "(swegreen/data/network_instances.json); the rest run with it off.",
    )
    offline_installs: bool = Field(
        False,
        description="The eval script's install (upstream's `pip install -e .`, its build "
        "requirements) from the files the prepared workspace's own install downloaded, with "
        "no package index and no network; always on in the AWS pipeline.",
    )

    @field_validator("docker_images")
    @classmethod
    def _known_image_source(cls, value: str) -> str:
        try:
            image_template(value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("instance_ids", "repos", "network_instances", mode="before")
    @classmethod
    def _list_from_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [v.strip() for v in text.split(",") if v.strip()]
        return value

    @field_validator("task_dialect")
    @classmethod
    def _known_dialects(cls, value: str | dict[str, str]) -> str | dict[str, str]:
        for name in [value] if isinstance(value, str) else list(value.values()):
            if name != AUTO and name not in DIALECTS:
                raise ValueError(
                    f"unknown task dialect {name!r}; known: {AUTO}, {', '.join(DIALECTS)}"
                )
        return value

    def dialect_for(self, role: str) -> str:
        """The requested dialect of one participant ('auto': its card decides)."""
        if isinstance(self.task_dialect, str):
            return self.task_dialect
        return self.task_dialect.get(role, AUTO)

    @field_validator("repo_url_template")
    @classmethod
    def _template_names_repo(cls, value: str) -> str:
        if not any(k in value for k in ("{repo}", "{owner}", "{name}")):
            raise ValueError(
                "must contain {repo} or {owner}/{name}, e.g. https://github.com/{repo}.git"
            )
        return value

    @field_validator("participant_repo_url_template")
    @classmethod
    def _template_names_instance(cls, value: str | None) -> str | None:
        if value is not None and not any(
            k in value for k in ("{repo}", "{owner}", "{name}", "{instance_id}")
        ):
            raise ValueError(
                "must contain {instance_id}, {repo} or {owner}/{name}, "
                "e.g. https://mirror.example/{instance_id}.git"
            )
        return value

    def budget(self) -> Budget:
        """The interactive mode's per-instance limits."""
        return Budget(
            max_steps=self.max_steps,
            command_timeout=self.command_timeout,
            command_output_bytes=self.command_output_bytes,
            max_output_bytes=self.max_output_bytes,
        )

    def time_budget(self) -> float | None:
        """The worst case a shard must fit, in minutes (None: no limit)."""
        if self.time_budget_minutes is not None:
            return self.time_budget_minutes or None
        if self.model_fields_set & {"num_shards", "shard_index"}:
            return PLATFORM_STEP_MINUTES
        return None

    def participant_url_template(self) -> str:
        """Where participants are told to clone from (``repo_url`` in the task message)."""
        return self.participant_repo_url_template or self.repo_url_template

    @model_validator(mode="after")
    def _check(self) -> EvalConfig:
        try:
            self.selection()
        except ValidationError as exc:  # surface Selection's own message, not a nested dump
            raise ValueError(
                "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
            ) from None
        return self

    def row_limit(self) -> tuple[int, str]:
        """How many rows of the selection are evaluated (-1: all), and what decided it.

        The platform's ``num_instances`` wins over ``max_rows`` (a manifest's default
        rides along with every request). A sharded request that names neither means the
        whole selection: the leaderboard template leaves ``num_instances`` empty for "all".
        Named ``instance_ids`` alone mean those instances, not the first three of them.
        """
        if self.num_instances is not None:
            why = "num_instances"
            if "max_rows" in self.model_fields_set and self.max_rows != self.num_instances:
                why += f" (max_rows {self.max_rows} set aside)"
            return self.num_instances, why
        if "max_rows" in self.model_fields_set:
            return self.max_rows, "max_rows"
        if self.instance_ids:
            return -1, "instance_ids"
        if "num_shards" in self.model_fields_set:
            return -1, "sharded without num_instances: the whole selection"
        return self.max_rows, "max_rows default"

    def selection(self) -> Selection:
        return Selection(
            max_rows=self.row_limit()[0],
            instance_ids=self.instance_ids,
            repos=self.repos,
            shard_index=self.shard_index,
            num_shards=self.num_shards,
            shard_by="round_robin" if self.environments == "engine" else "contiguous",
        )

    def public(self) -> dict[str, Any]:
        """The config as recorded in provenance and results: without the host's paths (a
        local dataset file by its name only, a local repository template as ``local``)."""
        values = self.model_dump(mode="json")
        values["max_rows"], values["rows_chosen_by"] = self.row_limit()
        values["dataset"] = public_dataset_name(self.dataset)
        values["repo_url_template"] = public_url_template(self.repo_url_template)
        if self.participant_repo_url_template is not None:
            values["participant_repo_url_template"] = public_url_template(
                self.participant_repo_url_template
            )
        return values


def read_scenario(path: Path) -> dict[str, Any]:
    """The ``[config]`` table of a scenario.toml (AgentBeats' other tables are ignored)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"scenario file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    unknown = set(data) - AGENTBEATS_TABLES - {"config"}
    if unknown:
        raise ConfigError(
            f"{path}: unknown top-level key(s) {', '.join(sorted(unknown))}; "
            "settings belong in the [config] table"
        )
    table = data.get("config", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [config] must be a table")
    return table


def config_from_env(
    env: Mapping[str, str], allowed_extra: frozenset[str] = frozenset()
) -> dict[str, str]:
    """``SWEGREEN_<KEY>`` variables for config keys; others are not read (the composition
    root warns of unknown ones once: ``unknown_env``)."""
    fields = set(EvalConfig.model_fields)
    return {
        name[len(ENV_PREFIX) :].lower(): value
        for name, value in env.items()
        if name.startswith(ENV_PREFIX) and name[len(ENV_PREFIX) :].lower() in fields
    }


def unknown_env(env: Mapping[str, str], allowed_extra: frozenset[str] = frozenset()) -> str | None:
    """One warning naming the ``SWEGREEN_*`` variables nothing reads (a test suite's own,
    a misspelt key: the nearest known one is suggested), or None."""
    known = {ENV_PREFIX + k.upper() for k in (*EvalConfig.model_fields, *allowed_extra)}
    unknown = sorted(n for n in env if n.startswith(ENV_PREFIX) and n not in known)
    if not unknown:
        return None
    named = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
        named.append(f"{name} (did you mean {close[0]}?)" if close else name)
    return (
        f"ignoring environment variable(s) {', '.join(named)}: not read by swegreen "
        "(docs/configuration.md lists those that are)"
    )


def build_config(
    *layers: tuple[str, Mapping[str, Any]],
) -> EvalConfig:
    """Merge named layers (lowest first) and validate. Errors name the layer of the bad key."""
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for label, values in layers:
        for key, value in values.items():
            if value is None:
                continue
            merged[key] = value
            origin[key] = label
    try:
        return EvalConfig.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, origin)) from None


def load_config(
    scenario: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    env_extra: frozenset[str] = frozenset(),
) -> EvalConfig:
    layers: list[tuple[str, Mapping[str, Any]]] = []
    if scenario is not None:
        layers.append((str(scenario), read_scenario(scenario)))
    if env is not None:
        layers.append(("environment", config_from_env(env, env_extra)))
    if overrides:
        layers.append(("command line", overrides))
    return build_config(*layers)


def _explain(exc: ValidationError, origin: Mapping[str, str]) -> str:
    lines = []
    for err in exc.errors():
        key = str(err["loc"][0]) if err["loc"] else ""
        where = f" (from {origin[key]})" if key in origin else ""
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            known = ", ".join(EvalConfig.model_fields)
            lines.append(f"unknown config key {key!r}{where}; known keys: {known}")
        elif key:
            lines.append(f"config key {key!r}{where}: {msg} (got {err.get('input')!r})")
        else:
            lines.append(msg)
    return "invalid configuration: " + "; ".join(lines)


def public_url_template(template: str) -> str:
    """A repository URL template as published: a network URL without credentials, else
    ``local`` (a directory or ``file://`` mirror on this host says nothing to a reader)."""
    parts = urlsplit(template)
    if parts.scheme in ("http", "https", "git", "ssh") and parts.hostname:
        netloc = parts.netloc.rpartition("@")[2]  # no user:password@
        if parts.scheme == "ssh" and parts.username:
            netloc = f"{parts.username}@{netloc}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    if re.fullmatch(r"[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:.+", template):
        return template  # scp-like ssh: git@github.com:{repo}.git
    return "local"
