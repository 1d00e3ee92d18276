"""The AgentBeats files as the platform reads them in 2026 (docs/agentbeats.md): the green
agent's Amber manifest and the example scenario against Amber's rules, and the leaderboard
queries (the JSON list the platform takes, in sync with the SQL file) run by DuckDB over
results files shaped as the leaderboard template writes them, shards concatenated."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import json5
import pytest

from swegreen.core.intervals import headline

from .conftest import RunSample

ROOT = Path(__file__).resolve().parents[1]
AGENTBEATS = ROOT / "agentbeats"

# Amber v0.3's manifest keys (compiler/manifest; strict: an unknown key is an error)
TOP_LEVEL = {
    "manifest_version",
    "experimental_features",
    "program",
    "components",
    "environments",
    "config_schema",
    "slots",
    "provides",
    "resources",
    "child_templates",
    "bindings",
    "exports",
    "metadata",
}
PROGRAM = {"image", "entrypoint", "env", "network", "mounts"}
REJECTED_SCHEMA_KEYWORDS = {
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "patternProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
}
CONFIG_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
REFERENCE = re.compile(r"\$\{(config|slots)\.([a-z0-9_]+)")


def load(name: str) -> dict[str, Any]:
    return json5.loads((AGENTBEATS / name).read_text())


def schema_problems(schema: Any, where: str = "config_schema") -> list[str]:
    problems = []
    if isinstance(schema, dict):
        problems += [f"{where}: {k} is rejected" for k in REJECTED_SCHEMA_KEYWORDS & set(schema)]
        for name in schema.get("properties", {}):
            if not CONFIG_NAME.match(name) or "__" in name:
                problems.append(f"{where}: property name {name!r}")
        for key, value in schema.items():
            problems += schema_problems(value, f"{where}.{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            problems += schema_problems(value, f"{where}[{i}]")
    return problems


def common_problems(manifest: dict[str, Any]) -> list[str]:
    """Rules every manifest meets: strict keys, a version that knows `when`, a config
    schema Amber accepts, references to declared config and slots only."""
    problems = [f"unknown top-level key {k}" for k in set(manifest) - TOP_LEVEL]
    version = tuple(int(p) for p in manifest["manifest_version"].split("."))
    if not (0, 2, 0) <= version < (1, 0, 0):
        problems.append(f"manifest_version {version} (conditional env needs >= 0.2.0, < 1)")
    schema = manifest.get("config_schema", {"type": "object"})
    if schema.get("type") != "object":
        problems.append("config_schema's root is not an object")
    problems += schema_problems(schema)
    text = json.dumps(manifest)
    for kind, name in REFERENCE.findall(text):
        declared = schema.get("properties", {}) if kind == "config" else manifest.get("slots", {})
        if name not in declared:
            problems.append(f"${{{kind}.{name}}} names nothing declared")
    return problems


def image_stages() -> dict[str, str]:
    """green-docker.Dockerfile's stages by name (the manifest's image)."""
    text = (ROOT / "container" / "green-docker.Dockerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    return {stage.split("\n", 1)[0].split(" AS ")[-1].strip(): stage for stage in stages}


def image_env() -> dict[str, str]:
    """What the manifest's image's ENV lines set (its final stage and the one it is FROM)."""
    stages = image_stages()
    env: dict[str, str] = {}
    for stage in (stages["slim-python"], stages["green-docker"]):
        for block in re.findall(r"^ENV (.*?)(?<!\\)$", stage, re.M | re.S):
            for name, value in re.findall(r"(\w+)=(\S+)", block.replace("\\\n", " ")):
                env[name] = value
    return env


def test_the_green_manifest_meets_ambers_rules() -> None:
    manifest = load("amber-manifest.json5")
    assert common_problems(manifest) == []
    program = manifest["program"]
    assert set(program) <= PROGRAM, set(program) - PROGRAM
    # the Docker gateway's socket, which needs the experimental feature, where the program's
    # Docker client looks for it
    [mount] = [m["path"] for m in program["mounts"] if m["from"] == "framework.docker"]
    assert program["env"]["DOCKER_HOST"] == f"unix://{mount}"
    assert "docker" in manifest["experimental_features"]
    # the committed manifest is the workflow's template: its image is filled in by digest
    assert program["image"] == "IMAGE@DIGEST"
    # the gateway's proxy: optional (the gateway binds it weakly), named in env
    assert manifest["slots"]["proxy"] == {"kind": "a2a", "optional": True}
    assert program["env"]["PROXY_URL"] == {"when": "slots.proxy.url", "value": "${slots.proxy.url}"}
    # what it provides is served on a declared endpoint, and exported
    endpoints = {e["name"]: e["port"] for e in program["network"]["endpoints"]}
    assert manifest["provides"]["a2a"] == {"kind": "a2a", "endpoint": "a2a"}
    assert endpoints["a2a"] == 9009 and manifest["exports"] == {"a2a": "a2a"}
    assert "--port 9009" in program["entrypoint"] and "--host 0.0.0.0" in program["entrypoint"]
    # a secret never has a default, and optional config is only used under `when`
    for name, spec in manifest["config_schema"]["properties"].items():
        assert "default" not in spec or not spec.get("secret"), name
        uses = [v for v in program["env"].values() if f"config.{name}" in json.dumps(v)]
        assert all(isinstance(v, dict) and v["when"] == f"config.{name}" for v in uses), uses
    assert isinstance(manifest["metadata"]["participant_roles"], list)


def test_the_manifest_declares_every_variable_the_image_sets() -> None:
    """Amber clears the environment of a program with a mount: program.env plus PATH, HOME
    and TMPDIR are all it gets, so each ENV line of the image is declared again."""
    env = load("amber-manifest.json5")["program"]["env"]
    declared = image_env()
    assert declared and "SWEGREEN_CACHE_DIR" in declared
    for name, value in declared.items():
        if name != "PATH":
            assert env.get(name) == value, (name, value, env.get(name))
    entry = load("amber-manifest.json5")["program"]["entrypoint"].split()[0]
    assert entry.startswith("/") and entry.removesuffix("/bin/swegreen") in declared["PATH"]


def test_ambers_helper_can_make_the_docker_socket_as_the_images_user() -> None:
    """Amber's helper binds the framework.docker socket itself, as the image's USER, before
    the program starts; a directory that user cannot write ends it (no card, no score).
    The image's last USER must own the mount's directory (the platform check runs it)."""
    [mount] = [
        m["path"]
        for m in load("amber-manifest.json5")["program"]["mounts"]
        if m["from"] == "framework.docker"
    ]
    stage = image_stages()["green-docker"]
    user = re.findall(r"^USER (\S+)", stage, re.M)[-1]
    assert user.split(":")[0] in ("$SANDBOX_UID", "10001")
    folder = mount.rsplit("/", 1)[0]
    chowned = [line for line in stage.replace("\\\n", " ").splitlines() if "chown" in line]
    assert any(folder in line and "$SANDBOX_UID:$SANDBOX_UID" in line for line in chowned)
    assert folder not in ("/var/run", "/run", "/tmp")  # a directory of its own


def test_the_manifest_is_rendered_with_a_pinned_image_only(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("render", ROOT / "scripts/render_manifest.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    render = module.main

    digest = "ghcr.io/someone/swegreen-green-docker@sha256:" + "ab" * 32
    url = (
        "https://raw.githubusercontent.com/someone/swegreen/0123abc/agentbeats/amber-manifest.json5"
    )
    out, scenario = tmp_path / "m.json5", tmp_path / "s.json5"
    args = ["--image", digest, "--out", str(out), "--scenario-out", str(scenario)]
    assert render([*args, "--manifest-url", url]) == 0
    manifest = json5.loads(out.read_text())
    assert manifest["program"]["image"] == digest
    assert common_problems(manifest) == []
    assert json5.loads(scenario.read_text())["components"]["green"]["manifest"] == url
    # only the image line changed: the comments stay
    before = (ROOT / "agentbeats" / "amber-manifest.json5").read_text().splitlines()
    after = out.read_text().splitlines()
    assert [a for a, b in zip(before, after, strict=True) if a != b] == [
        '    image: "IMAGE@DIGEST",'
    ]
    for bad in ("ghcr.io/OWNER/swegreen-green-agent:latest", "ghcr.io/x/y:latest",
                "ghcr.io/x/y@sha256:abc"):  # fmt: skip
        with pytest.raises(SystemExit, match="not a pinned reference"):
            render(["--image", bad, "--out", str(out)])


def test_the_scenario_wires_gateway_green_and_participant() -> None:
    scenario = load("scenario.json5")
    assert common_problems(scenario) == []
    components = scenario["components"]
    gateway = components["gateway"]  # the workflows write gateway.config.assessment_config
    assert gateway["manifest"].startswith(
        "https://raw.githubusercontent.com/RDI-Foundation/agentbeats-gateway/"
    )
    roles = gateway["config"]["participant_roles"]
    assert roles["green"] == "green" and set(roles) - {"green"} == {"purple1"}
    participant = roles["purple1"]
    assert components["green"]["manifest"].endswith("/agentbeats/amber-manifest.json5")
    assert participant in components  # the role is the component: the leaderboard's id key
    bindings = {(b["to"], b["from"], b.get("weak", False)) for b in scenario["bindings"]}
    assert bindings == {
        ("#gateway.green", "#green.a2a", False),
        ("#gateway.purple1", f"#{participant}.a2a", False),
        ("#green.proxy", "#gateway.proxy", True),
    }
    assert scenario["exports"] == {"results": "#gateway.results"}
    # a child using framework.docker needs the feature in every parent
    assert "docker" in scenario["experimental_features"]
    assert set(scenario["metadata"]["agentbeats_ids"]) == {"green", participant}
    config = gateway["config"]["assessment_config"]
    assert 1 <= config["num_shards"] <= 20  # the template clamps to 20


def test_the_platforms_query_list_is_the_sql_file() -> None:
    listed = json.loads((AGENTBEATS / "leaderboard.json").read_text())
    assert [q["name"] for q in listed] == ["SWE-bench Verified", "Per repository"]
    check = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "leaderboard_json.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr


def as_the_gateway_sends(value: Any) -> Any:
    """Data parts travel as protobuf Values: every number arrives as a float."""
    if isinstance(value, dict):
        return {k: as_the_gateway_sends(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_the_gateway_sends(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


@pytest.fixture
def submissions(run_sample: RunSample, settings, tmp_path: Path) -> Path:
    """Two submissions as the template commits them: each ran in two shards, whose result
    lists are concatenated; participants keyed by component name, ids are UUIDs."""
    out = tmp_path / "results"
    out.mkdir()
    ids = {
        "gold": "019f8243-0000-7000-8000-00000000a001",
        "empty": "019f8243-0000-7000-8000-00000000b002",
    }
    for source, uuid in ids.items():
        results = []
        for shard in (0, 1):
            run_id = f"sub-{source}-{shard}"
            run_sample(source, run_id=run_id, max_rows=4, shard_index=shard, num_shards=2)
            data = json.loads((settings.output_dir / run_id / "results.json").read_text())
            for row in data["results"]:
                results.append(as_the_gateway_sends({**row, "participant": "coding_agent"}))
        participants = {"green": "019f8243-0000-7000-8000-00000000c003", "coding_agent": uuid}
        body = {"status": "completed", "participants": participants, "results": results}
        (out / f"{uuid}.json").write_text(json.dumps(body))
    return out


def test_each_listed_query_runs_over_results_as_the_template_writes_them(
    submissions: Path,
) -> None:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE results AS SELECT * FROM read_json_auto('{submissions}/*.json')")
    tables = {}
    for query in json.loads((AGENTBEATS / "leaderboard.json").read_text()):
        rows = con.execute(query["query"]).fetchall()
        columns = [d[0] for d in con.description]
        assert columns[0] == "id", query["name"]
        tables[query["name"]] = [dict(zip(columns, r, strict=True)) for r in rows]
    overall = {r["id"]: r for r in tables["SWE-bench Verified"]}
    gold, empty = (
        overall["019f8243-0000-7000-8000-00000000a001"],
        overall["019f8243-0000-7000-8000-00000000b002"],
    )
    assert list(overall) == [gold["id"], empty["id"]]  # ranked by resolved share
    assert gold["instances"] == 4 and gold["resolved"] == 1.0 and gold["tests_ran"] == 4
    # the resolved share's interval, as swegreen computes it (Wilson's or the clustered one)
    for agent, rows in ((gold, {"sample/calculator": (4, 4)}), (empty, None)):
        if rows is None:  # empty: none resolved, over the sample's repositories
            assert agent["resolved_low"] == 0.0 and 0 < agent["resolved_high"] < 1
            continue
        low, high = headline(rows)
        assert (agent["resolved_low"], agent["resolved_high"]) == (round(low, 4), round(high, 4))
    assert empty["instances"] == 4 and empty["no_op"] == 1.0 and empty["f2p_pass_rate"] == 0.0
    assert empty["tests_ran"] == 0  # the green agent's own id never appears as a row
    assert "019f8243-0000-7000-8000-00000000c003" not in overall
    per_repo = tables["Per repository"]
    assert sum(r["instances"] for r in per_repo if r["id"] == gold["id"]) == 4
