"""What a participant receives for one instance: the issue, written for an agent.

Only what a person fixing the issue would have: the problem statement, the repository
and commit, and the hints. Never the gold patch, the test patch, or the names of the
tests that will judge the fix (``HIDDEN_FIELDS``); ``tests/test_task_message.py``
checks that none of them can leak.
"""

from __future__ import annotations

from typing import Any

from swegreen.core.config import repo_url
from swegreen.core.dataset import Instance
from swegreen.core.interaction import Budget

HIDDEN_FIELDS = ("patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS", "eval_script")
SHARED_FIELDS = (
    "instance_id",
    "repo",
    "repo_url",
    "base_commit",
    "problem_statement",
    "hints_text",
    "version",
    "environment_setup_commit",
)

INSTRUCTIONS = """\
Fix the issue below in the repository {repo} ({repo_url}), checked out at commit {base_commit}.

Work in your own checkout. When you are done, reply with your change as a unified diff
against {base_commit}, exactly as `git diff` prints it (paths a/... and b/...), either as a
data part {{"patch": "<diff>"}}, an artifact, or a ```diff fenced block. Change only the
repository's code: the tests that will judge the fix are not shown and test files you
change are reset before they run. A reply without a diff counts as no change.

Instance: {instance_id} (version {version})

<issue>
{problem_statement}
</issue>
"""
HINTS = "\n<hints>\n{hints_text}\n</hints>\n"
INTERACTIVE = """
Interactive mode ({protocol}) is on: instead of working in your own checkout, you may run
shell commands in a copy of this instance's prepared workspace (the repository at
{base_commit}, its environment installed, no network). Send one command per turn in this
task: end your turn in state input-required with a data part {{"command": "<shell>"}} (or
one ```bash block). Each command starts in the repository's root in a fresh shell; files
persist between commands, processes do not. You get back {{"command_result": {{"exit_code",
"output", "truncated", "duration", "steps_left", ...}}}}. Budget: {max_steps} commands,
{command_timeout:g} s each, {command_output_bytes} bytes of output per command,
{max_output_bytes} in all. `git add -A && git diff --cached` there shows exactly your
changes. Finish as above, with your diff; using up the budget ends the instance with no patch.
"""


def task_data(
    instance: Instance, url_template: str, interactive: Budget | None = None
) -> dict[str, Any]:
    """The structured half of the message: the fields an agent needs, nothing hidden, and
    the interactive mode's offer when it is on."""
    data = {
        "instance_id": instance.instance_id,
        "repo": instance.repo,
        "repo_url": repo_url(url_template, instance.repo, instance.instance_id),
        "base_commit": instance.base_commit,
        "problem_statement": instance.problem_statement,
        "hints_text": instance.hints_text,
        "version": instance.version,
        "environment_setup_commit": instance.environment_setup_commit,
    }
    if interactive is not None:
        data["interactive"] = interactive.offer()
    return data


def task_text(data: dict[str, Any]) -> str:
    """The same facts as prose instructions."""
    text = INSTRUCTIONS.format(**data)
    if data.get("hints_text", "").strip():
        text += HINTS.format(**data)
    if "interactive" in data:
        text += INTERACTIVE.format(base_commit=data["base_commit"], **data["interactive"])
    return text
