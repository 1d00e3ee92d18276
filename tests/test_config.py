"""Configuration layering and validation: defaults < scenario.toml < environment < flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from swegreen.core.config import EvalConfig, build_config, load_config, unknown_env
from swegreen.core.errors import ConfigError


def scenario(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    return path


def test_defaults_match_the_seed() -> None:
    c = EvalConfig()
    assert (c.max_concurrent_rows, c.max_rows, c.green_agent_model) == (
        1,
        3,
        "ollama/qwen2.5-coder:7b",
    )
    assert c.dataset == "SWE-bench/SWE-bench_Verified"


def test_layers_override_in_order(tmp_path: Path) -> None:
    path = scenario(
        tmp_path,
        """
[green_agent]
image = "ghcr.io/x/green:latest"

[[participants]]
name = "agent"

[config]
max_rows = 10
max_concurrent_rows = 4
green_agent_model = "openai/gpt-4o-mini"
""",
    )
    c = load_config(path, {"SWEGREEN_MAX_ROWS": "20", "HOME": "/x"}, {"max_concurrent_rows": 2})
    assert c.max_rows == 20  # environment beats the file
    assert c.max_concurrent_rows == 2  # flags beat both
    assert c.green_agent_model == "openai/gpt-4o-mini"  # file beats the default


def test_lists_from_the_environment(tmp_path: Path) -> None:
    c = load_config(None, {"SWEGREEN_INSTANCE_IDS": "a__b-1, a__b-2", "SWEGREEN_REPOS": '["a/b"]'})
    assert c.instance_ids == ("a__b-1", "a__b-2") and c.repos == ("a/b",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[config]\nmax_rowz = 3\n", r"unknown config key 'max_rowz' \(from .*scenario.toml\)"),
        ("[config]\nmax_rows = 'lots'\n", r"config key 'max_rows' \(from .*scenario.toml\)"),
        ("[config]\nmax_concurrent_rows = 0\n", r"max_concurrent_rows.*greater than or equal to 1"),
        ("[config]\nmax_rows = 0\n", r"max_rows must be -1 \(all rows\) or a positive count"),
        (
            "[config]\nshard_index = 3\nnum_shards = 2\n",
            r"shard_index must be between 0 and num_shards - 1 \(1\), not 3",
        ),
        ("[config]\nrepo_url_template = 'https://example.com/x.git'\n", r"must contain \{repo\}"),
        ("[configs]\nmax_rows = 3\n", r"unknown top-level key\(s\) configs"),
        ("[config\n", r"not valid TOML"),
    ],
)
def test_bad_config_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(scenario(tmp_path, text))


def test_unknown_environment_variables_are_not_read_and_named_once() -> None:
    """A test suite's own SWEGREEN_* variable, a misspelt key: ignored, with one warning
    that names them (and the key a misspelling is nearest to)."""
    env = {"SWEGREEN_MAX_ROW": "3", "SWEGREEN_TEST_TMP": "/x", "SWEGREEN_CACHE_DIR": "/c"}
    assert load_config(None, env, env_extra=frozenset({"cache_dir"})).max_rows == 3
    warning = unknown_env(env, frozenset({"cache_dir"}))
    assert warning is not None
    assert "SWEGREEN_MAX_ROW (did you mean SWEGREEN_MAX_ROWS?)" in warning
    assert "SWEGREEN_TEST_TMP" in warning and "SWEGREEN_CACHE_DIR" not in warning
    assert unknown_env({"SWEGREEN_MAX_ROWS": "2", "HOME": "/h"}) is None
    assert load_config(None, {"SWEGREEN_MAX_ROWS": "2"}).max_rows == 2


def test_num_instances_is_agentbeats_name_for_max_rows_and_wins_over_it() -> None:
    assert build_config(("request", {"num_instances": 7})).selection().max_rows == 7
    # the gateway sends the manifest's config (max_rows 3) plus num_instances: not rejected
    both = build_config(("request", {"num_instances": 8, "max_rows": 3}))
    assert both.selection().max_rows == 8
    assert both.public()["max_rows"] == 8
    assert both.public()["rows_chosen_by"] == "num_instances (max_rows 3 set aside)"
    # sharded with neither: every shard deals from the whole selection
    sharded = build_config(("request", {"shard_index": 1, "num_shards": 2}))
    assert sharded.selection().max_rows == -1
    assert sharded.public()["rows_chosen_by"].startswith("sharded without num_instances")
    assert build_config(("r", {"num_shards": 2, "max_rows": 4})).selection().max_rows == 4
    assert build_config(("request", {})).public()["rows_chosen_by"] == "max_rows default"


def test_naming_instances_evaluates_all_of_them_unless_max_rows_is_set() -> None:
    assert EvalConfig(instance_ids=("a", "b", "c", "d")).selection().max_rows == -1
    assert EvalConfig(instance_ids=("a", "b", "c", "d"), max_rows=2).selection().max_rows == 2
