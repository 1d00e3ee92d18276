"""The task message in the shapes participants already read.

The same facts (``task_message.task_data``: nothing hidden) are rendered five ways:

- ``universal`` (the default): one JSON object as the only text part, holding every field
  the readers below take (``docker_image`` and its aliases, ``hints``, the tags a tag
  reader looks for, in a string field, the AgentSWE ``cwd`` where a workbench is open) and
  how to reply either way, with the standard data part beside it. Public participants
  differ in what they read, and two publish identical cards while speaking different
  protocols, so no card heuristic can choose for them: one message that every reader
  accepts can;
- ``standard``: prose instructions plus the facts as a data part (this project's own);
- ``json``: one JSON object as the only text part, as agents wrapping mini-swe-agent parse
  it, with ``hints`` beside ``hints_text`` and ``docker_image`` named as SWE-bench names
  its per-instance images;
- ``xml``: tagged text (``<task_id>``, ``<repository>``, ``<repo_url>``, ``<base_commit>``,
  ``<problem_statement>``, ``<hints>``), for agents that clone ``repo_url`` themselves;
- ``agentswe``: the AgentSWE protocol's task (agentswe.py), whose agents work through
  commands the green agent runs for them; ``data`` then carries ``cwd`` and
  ``python_version``.

Which one a participant gets is the request's choice, else what its agent card declares
(``choose``), else ``universal``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from swegreen.core import agentswe
from swegreen.core.images import image_name

Dialect = Literal["universal", "standard", "json", "xml", "agentswe"]
DIALECTS: tuple[Dialect, ...] = ("universal", "standard", "json", "xml", "agentswe")
DEFAULT: Dialect = "universal"
AUTO = "auto"
# An agent card declares its dialect with this extension: {"uri": EXTENSION_URI,
# "params": {"dialect": "json"}} in capabilities.extensions, or with a skill tagged
# SKILL_TAG_PREFIX + dialect, e.g. "task-dialect:xml" (docs/agentbeats.md).
EXTENSION_URI = "urn:swegreen:task-dialect:v1"
SKILL_TAG_PREFIX = "task-dialect:"

REPLY = (
    "Reply with your change as a unified diff against the base commit, exactly as `git diff` "
    'prints it (paths a/... and b/...): a JSON object {"patch": "<diff>"}, <patch>...</patch> '
    "tags, a ```diff block, or the bare diff. Change only the repository's code: the tests "
    "that will judge the fix are not shown, and test files you change are reset before they "
    "run. A reply without a diff counts as no change."
)
# The universal message's own instructions: both ways of answering, one sentence each.
UNIVERSAL_REPLY = REPLY + (
    " To look around first (AgentSWE protocol), end a turn with an artifact named `bash` "
    "(a command; nothing it writes stays) or `debug` (a command whose writes are undone "
    "after it) and read its output in the next message; finish with an artifact named "
    "`patch` holding the diff."
)
# Tags a tag-reading agent parses (its own regular expressions find them anywhere in the
# text, a JSON string included); the issue itself is a JSON field already.
TAGS = (
    "<task_id>{instance_id}</task_id><repository>{repo}</repository>"
    "<repo_url>{repo_url}</repo_url><base_commit>{base_commit}</base_commit>"
    "<version>{version}</version>"
)
XML = """\
Fix the issue in the repository below, checked out at its base commit. Clone it from
repo_url into a directory of your own.

<task_id>{instance_id}</task_id>
<repository>{repo}</repository>
<repo_url>{repo_url}</repo_url>
<base_commit>{base_commit}</base_commit>
<version>{version}</version>
<problem_statement>
{problem_statement}
</problem_statement>
<hints>
{hints_text}
</hints>

{reply}
"""


@dataclass(frozen=True)
class Rendered:
    text: str
    data: dict[str, Any] | None  # the data part, where the dialect has one


def docker_image(instance_id: str, source: str = "official") -> str:
    """The evaluation image for an instance, as mini-swe-agent names it (x86_64, with the
    registry written out: the images the participants' own tools pull). ``source`` is the
    Docker backend's ``docker_images``: where rows are graded in instance images, the
    participant is told the same image, so that a runner pulls each image once."""
    name = image_name(instance_id, source, "x86_64")
    first = name.split("/", 1)[0]
    has_registry = "/" in name and ("." in first or ":" in first or first == "localhost")
    return name if has_registry else "docker.io/" + name


def universal(data: Mapping[str, Any], image: str | None = None) -> dict[str, Any]:
    """The object every known reader accepts: the facts, each reader's own names for them,
    and how to answer. ``cwd``/``python_version`` only where a workbench is open."""
    image = image or docker_image(data["instance_id"])
    payload = {k: v for k, v in data.items() if k != "interactive"}
    payload.update(
        hints=data.get("hints_text", ""),
        docker_image=image,
        image_uri=image,
        image=image,
        task=TAGS.format(**data),
        # the AgentSWE turns are offered only where a workbench can serve them
        instructions=UNIVERSAL_REPLY if "cwd" in data else REPLY,
    )
    return payload


def render(
    dialect: Dialect, data: Mapping[str, Any], prose: str, image: str | None = None
) -> Rendered:
    """``data``: the task's facts; ``prose``: the standard dialect's instructions;
    ``image``: the instance image to name (default: the official one, ``docker_image``)."""
    image = image or docker_image(data["instance_id"])
    if dialect == "universal":
        facts = {k: v for k, v in data.items() if k not in ("cwd", "python_version")}
        return Rendered(json.dumps(universal(data, image), ensure_ascii=False), facts)
    if dialect == "json":
        payload = {
            **data,
            "hints": data.get("hints_text", ""),
            "docker_image": image,
            "instructions": REPLY,
        }
        return Rendered(json.dumps(payload, ensure_ascii=False), None)
    if dialect == "xml":
        return Rendered(XML.format(reply=REPLY, **data), None)
    if dialect == "agentswe":
        payload = agentswe.task(data, data["cwd"], data["python_version"])
        return Rendered(json.dumps(payload, ensure_ascii=False), None)
    return Rendered(prose, dict(data))


@dataclass(frozen=True)
class Skill:
    """What the dialect choice reads of one of the card's skills."""

    tags: Sequence[str] = ()
    input_modes: Sequence[str] = ()  # empty: the card's defaults


@dataclass(frozen=True)
class CardFacts:
    """What the dialect choice reads of an agent card (kept free of a2a types)."""

    extensions: Sequence[tuple[str, Mapping[str, Any]]] = ()
    input_modes: Sequence[str] = ()
    skills: Sequence[Skill] = ()


def choose(
    requested: str, card: CardFacts | None, served: Sequence[str] = DIALECTS
) -> tuple[Dialect, str]:
    """The dialect for one participant and what chose it (recorded in each row).

    The card is read most explicit first: the extension, then a skill's dialect tag, then
    input modes (JSON alone for every skill; a skill without modes of its own has the
    card's).
    ``served``: the dialects this caller can hold (the AWS pipeline's polled calls cannot
    hold AgentSWE's turns); a card's wish outside them falls back to the default."""
    if requested != AUTO:
        return _known(requested), "request"
    wish = next(_card_wishes(card), None) if card is not None else None
    if wish is None:
        return DEFAULT, "default"
    wanted, chosen_by = wish
    if wanted not in served:
        return DEFAULT, f"default (the card's {wanted} is not served here)"
    return wanted, chosen_by


def _card_wishes(card: CardFacts) -> Iterator[tuple[Dialect, str]]:
    for uri, params in card.extensions:
        wanted = params.get("dialect")
        if uri == EXTENSION_URI and isinstance(wanted, str) and wanted in DIALECTS:
            yield _known(wanted), "agent card extension"
    for skill in card.skills:
        for tag in (t.strip().lower() for t in skill.tags):
            wanted = tag.removeprefix(SKILL_TAG_PREFIX)
            if tag.startswith(SKILL_TAG_PREFIX) and wanted in DIALECTS:
                yield _known(wanted), "agent card skill"
    # a skill without input modes of its own takes the card's
    modes = [s.input_modes or card.input_modes for s in card.skills] or [card.input_modes]
    if all(_json_only(m) for m in modes):
        yield "json", "agent card input modes"


def _json_only(modes: Sequence[str]) -> bool:
    """Takes JSON and nothing else."""
    return {m.split(";")[0].strip().lower() for m in modes} == {"application/json"}


def _known(name: str) -> Dialect:
    if name not in DIALECTS:
        raise ValueError(f"unknown task dialect {name!r}; known: {', '.join(DIALECTS)}")
    return name  # type: ignore[return-value]
