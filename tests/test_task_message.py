"""What participants receive never contains the gold patch, the test patch or the tests."""

from __future__ import annotations

import json
import re

from swegreen.core.dataset import parse_rows
from swegreen.core.task_dialects import (
    DIALECTS,
    EXTENSION_URI,
    CardFacts,
    Skill,
    choose,
    docker_image,
    render,
)
from swegreen.core.task_message import HIDDEN_FIELDS, SHARED_FIELDS, task_data, task_text

from .helpers import raw_row

CANARIES = {
    "patch": "diff --git a/GOLD_CANARY b/GOLD_CANARY",
    "test_patch": "diff --git a/TESTPATCH_CANARY b/TESTPATCH_CANARY",
    "FAIL_TO_PASS": json.dumps(["tests/test_x.py::F2P_CANARY"]),
    "PASS_TO_PASS": json.dumps(["tests/test_x.py::P2P_CANARY"]),
    "eval_script": "EVALSCRIPT_CANARY",
}


def test_hidden_fields_never_reach_the_participant() -> None:
    inst = parse_rows([raw_row(1, hints_text="look at x.py", **CANARIES)])[0]
    data = task_data(inst, "https://github.com/{repo}.git")
    for dialect in DIALECTS:
        facts = {**data, "cwd": "/w/repo", "python_version": "3.9"}  # what agentswe adds
        rendered = render(dialect, facts, task_text(data))
        blob = json.dumps(rendered.data) + rendered.text
        for canary in (
            "GOLD_CANARY",
            "TESTPATCH_CANARY",
            "F2P_CANARY",
            "P2P_CANARY",
            "EVALSCRIPT_CANARY",
        ):
            assert canary not in blob, (dialect, canary)
        assert "look at x.py" in blob
    assert set(data) == set(SHARED_FIELDS)
    assert not set(data) & set(HIDDEN_FIELDS)


def test_the_message_has_what_an_agent_needs() -> None:
    inst = parse_rows([raw_row(7, repo="psf/requests", hints_text="see models.py")])[0]
    data = task_data(inst, "https://github.com/{repo}.git")
    assert data["repo_url"] == "https://github.com/psf/requests.git"
    assert data["base_commit"] == "c" * 40 and data["instance_id"] == "psf__requests-7"
    text = task_text(data)
    assert "psf/requests" in text and "c" * 40 in text and "<issue>" in text
    assert "see models.py" in text and "unified diff" in text


def test_no_hints_section_without_hints() -> None:
    data = task_data(parse_rows([raw_row(1)])[0], "{repo}")
    assert "<hints>" not in task_text(data)


def test_the_interactive_mode_is_offered_with_its_budgets() -> None:
    from swegreen.core.interaction import PROTOCOL, Budget

    inst = parse_rows([raw_row(1, **CANARIES)])[0]
    budget = Budget(
        max_steps=7, command_timeout=60, command_output_bytes=500, max_output_bytes=9000
    )
    data = task_data(inst, "{repo}", budget)
    offer = data["interactive"]
    assert offer["protocol"] == PROTOCOL and offer["max_steps"] == 7
    assert offer["request"]["command"] and offer["reply"] == "command_result"
    text = task_text(data)
    assert PROTOCOL in text and "7 commands" in text and "input-required" in text
    assert set(data) == {*SHARED_FIELDS, "interactive"}
    assert "TESTPATCH_CANARY" not in json.dumps(data) + text
    assert "interactive" not in task_data(inst, "{repo}")  # not offered: not mentioned


def test_the_json_dialect_is_one_object_as_mini_swe_agent_reads_it() -> None:
    inst = parse_rows([raw_row(3, repo="psf/requests", hints_text="see models.py")])[0]
    data = task_data(inst, "https://github.com/{repo}.git")
    rendered = render("json", data, task_text(data))
    assert rendered.data is None
    payload = json.loads(rendered.text)
    assert payload["instance_id"] == "psf__requests-3"
    assert payload["hints"] == payload["hints_text"] == "see models.py"
    assert payload["base_commit"] == "c" * 40 and payload["repo"] == "psf/requests"
    assert (
        payload["docker_image"] == "docker.io/swebench/sweb.eval.x86_64.psf_1776_requests-3:latest"
    )
    assert docker_image("django__django-11099") == (
        "docker.io/swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    )
    assert docker_image("Foo__Bar-1").endswith("foo_1776_bar-1:latest")  # lower-cased


def test_where_rows_are_graded_in_instance_images_the_message_names_the_same_image() -> None:
    """With the Docker backend, the participant's docker_image is the grader's own source,
    so a runner whose disk keeps every pull pulls each instance image once."""
    epoch = "ghcr.io/epoch-research/swe-bench.eval.x86_64.django__django-11099:latest"
    assert docker_image("django__django-11099", "epoch") == epoch
    local = "mirror.example:5000/sweb.eval.{arch}.{official_id}:latest"
    assert docker_image("a__b-1", local) == "mirror.example:5000/sweb.eval.x86_64.a_1776_b-1:latest"
    assert docker_image("a__b-1", "me/sweb.{instance_id}") == "docker.io/me/sweb.a__b-1"
    inst = parse_rows([raw_row(5, repo="psf/requests")])[0]
    data = task_data(inst, "https://github.com/{repo}.git")
    image = docker_image(inst.instance_id, "epoch")
    for dialect in ("universal", "json"):
        payload = json.loads(render(dialect, data, task_text(data), image).text)
        assert payload["docker_image"] == image, dialect
    assert json.loads(render("universal", data, "", image).text)["image_uri"] == image


def test_the_xml_dialect_tags_what_tag_reading_agents_parse() -> None:
    inst = parse_rows([raw_row(5, repo="psf/requests", hints_text="see models.py")])[0]
    data = task_data(inst, "https://mirror.example/{repo}.git")
    text = render("xml", data, task_text(data)).text

    def tag(name: str) -> str:
        found = re.search(rf"<{name}>(.*?)</{name}>", text, re.DOTALL)
        assert found, name
        return found.group(1).strip()

    assert tag("task_id") == "psf__requests-5" and tag("repository") == "psf/requests"
    assert tag("repo_url") == "https://mirror.example/psf/requests.git"
    assert tag("base_commit") == "c" * 40 and tag("hints") == "see models.py"
    assert tag("problem_statement") == inst.problem_statement.strip()


def test_the_dialect_is_the_requests_else_the_cards_else_universal() -> None:
    declared = CardFacts(extensions=[(EXTENSION_URI, {"dialect": "xml"})])
    assert choose("json", declared) == ("json", "request")
    assert choose("auto", declared) == ("xml", "agent card extension")
    assert choose("auto", CardFacts(input_modes=["application/json"])) == (
        "json",
        "agent card input modes",
    )
    assert choose("auto", CardFacts(input_modes=["text/plain", "application/json"]))[0] == (
        "universal"
    )
    assert choose("auto", CardFacts(extensions=[("urn:other", {"dialect": "xml"})])) == (
        "universal",
        "default",
    )
    assert choose("auto", None) == ("universal", "default")
    wants_turns = CardFacts(extensions=[(EXTENSION_URI, {"dialect": "agentswe"})])
    assert choose("auto", wants_turns) == ("agentswe", "agent card extension")
    assert choose("auto", wants_turns, ("standard", "json", "xml")) == (
        "universal",
        "default (the card's agentswe is not served here)",
    )


def test_a_cards_skills_can_choose_the_dialect() -> None:
    tagged = CardFacts(skills=[Skill(tags=["swe-bench"]), Skill(tags=["Task-Dialect:XML"])])
    assert choose("auto", tagged) == ("xml", "agent card skill")
    # the extension is more explicit than a skill's tag
    both = CardFacts([(EXTENSION_URI, {"dialect": "json"})], skills=tagged.skills)
    assert choose("auto", both) == ("json", "agent card extension")
    assert choose("auto", CardFacts(skills=[Skill(tags=["task-dialect:klingon"])])) == (
        "universal",
        "default",
    )
    turns = CardFacts(skills=[Skill(tags=["task-dialect:agentswe"])])
    assert choose("auto", turns, ("universal", "json", "xml"))[0] == "universal"
    # input modes: JSON alone for every skill; a skill without its own has the card's
    json_skills = [Skill(input_modes=["application/json"]), Skill(input_modes=["application/json"])]
    assert choose("auto", CardFacts(input_modes=["text/plain"], skills=json_skills)) == (
        "json",
        "agent card input modes",
    )
    mixed = [Skill(input_modes=["application/json"]), Skill()]
    assert choose("auto", CardFacts(input_modes=["text/plain"], skills=mixed))[0] == "universal"
    texty = [Skill(input_modes=["text/plain"])]
    assert choose("auto", CardFacts(input_modes=["application/json"], skills=texty)) == (
        "universal",
        "default",
    )
    inherit = CardFacts(input_modes=["application/json"], skills=[Skill(tags=["swe"])])
    assert choose("auto", inherit) == ("json", "agent card input modes")


def test_the_universal_message_holds_what_every_known_reader_takes() -> None:
    """One JSON object (the only text part) with each public reader's names for the facts,
    the tags a tag reader's regular expressions find, both ways to answer, and the standard
    data part beside it; the AgentSWE ``cwd`` only where a workbench is open."""
    inst = parse_rows([raw_row(4, repo="psf/requests", hints_text="see models.py")])[0]
    data = task_data(inst, "https://github.com/{repo}.git")
    rendered = render("universal", data, task_text(data))
    payload = json.loads(rendered.text)
    image = "docker.io/swebench/sweb.eval.x86_64.psf_1776_requests-4:latest"
    assert payload["docker_image"] == payload["image_uri"] == payload["image"] == image
    assert payload["hints"] == payload["hints_text"] == "see models.py"
    assert payload["problem_statement"] == inst.problem_statement
    assert {k: payload[k] for k in SHARED_FIELDS} == data
    assert "cwd" not in payload
    for tag, value in {
        "task_id": "psf__requests-4",
        "repository": "psf/requests",
        "repo_url": "https://github.com/psf/requests.git",
        "base_commit": "c" * 40,
    }.items():
        found = re.search(rf"<{tag}>(.*?)</{tag}>", rendered.text, re.DOTALL)
        assert found and found.group(1) == value, tag
    assert "unified diff" in payload["instructions"]
    assert "`bash`" not in payload["instructions"]  # no workbench: no AgentSWE turns offered
    assert rendered.data == data
    bench = render("universal", {**data, "cwd": "/w/repo", "python_version": "3.9"}, "")
    assert json.loads(bench.text)["cwd"] == "/w/repo"
    assert "`bash`" in json.loads(bench.text)["instructions"]
    assert bench.data == data  # the data part stays the standard one
