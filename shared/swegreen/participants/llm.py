"""A baseline participant: one model call (plus one retry) through litellm.

It clones the repository at the base commit, picks the files the issue most likely
concerns (paths it names, then files where its identifiers occur), shows them to the model
with the issue, asks for a unified diff, and checks the diff with ``git apply --check``;
if the check fails, the error goes back to the model once. Whatever diff it ends with is
returned: the green agent decides what it is worth.
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from swegreen.core.patch_extraction import diff_in_text
from swegreen.participants.server import Reply
from swegreen.processes.procs import run_process
from swegreen.repositories.repo_cache import RepoCache

SYSTEM = (
    "You are a careful software engineer. You fix GitHub issues with minimal, correct "
    "changes and answer with a unified diff only."
)
PROMPT = """\
Repository: {repo} at commit {base_commit}

Issue:
{problem_statement}
{hints}
Relevant files:
{files}

Write the fix as a unified diff against these files, as `git diff` prints it (headers
`diff --git a/PATH b/PATH`, `--- a/PATH`, `+++ b/PATH`, then @@ hunks with exact context
lines). Reply with the diff in one ```diff block and nothing else.
"""
_PATH = re.compile(r"[\w./-]+\.py\b")
_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]{3,}\b")
STOPWORDS = {
    "self",
    "None",
    "True",
    "False",
    "return",
    "import",
    "from",
    "should",
    "with",
    "that",
    "this",
    "when",
    "have",
    "raise",
    "there",
    "which",
    "would",
    "could",
    "error",
    "python",
}


class LlmSolver:
    def __init__(
        self,
        model: str,
        workdir: Path,
        *,
        mock_response: str | None = None,
        url_template: str | None = None,
        max_files: int = 4,
        max_chars: int = 24000,
        attempts: int = 2,
    ) -> None:
        self.model = model
        self.workdir = workdir
        self.mock_response = mock_response
        self.url_template = url_template
        self.max_files = max_files
        self.max_chars = max_chars
        self.attempts = attempts

    async def __call__(self, data: dict[str, Any], text: str) -> Reply:
        try:
            repo, base = str(data["repo"]), str(data["base_commit"])
        except KeyError as exc:
            return Reply(None, f"the task lacks {exc}; expected the instance's data part")
        cache = RepoCache(
            self.workdir / "repos", self.url_template or "https://github.com/{repo}.git"
        )
        url = None if self.url_template else data.get("repo_url") or None
        checkout = self.workdir / "work" / uuid.uuid4().hex[:10]
        try:
            await cache.checkout(repo, base, checkout, url)
            files = pick_files(checkout, str(data.get("problem_statement", "")), self.max_files)
            return await self._solve(data, checkout, files)
        except Exception as exc:  # the baseline reports failure as prose, like any agent would
            return Reply(None, f"could not work on {repo}: {exc}")
        finally:
            shutil.rmtree(checkout, ignore_errors=True)

    async def _solve(self, data: dict[str, Any], checkout: Path, files: list[str]) -> Reply:
        import litellm

        shown, budget = [], self.max_chars
        for path in files:
            content = (checkout / path).read_text(errors="replace")[:budget]
            budget -= len(content)
            shown.append(f"--- {path}\n{content}")
            if budget <= 0:
                break
        hints = (
            f"\nHints:\n{data['hints_text']}\n" if str(data.get("hints_text", "")).strip() else ""
        )
        messages = [
            {"role": "system", "content": SYSTEM},
            {
                "role": "user",
                "content": PROMPT.format(
                    repo=data["repo"],
                    base_commit=data["base_commit"],
                    hints=hints,
                    problem_statement=data.get("problem_statement", ""),
                    files="\n".join(shown),
                ),
            },
        ]
        usage: Counter[str] = Counter()
        diff = None
        for _ in range(self.attempts):
            response = await litellm.acompletion(
                model=self.model, messages=messages, mock_response=self.mock_response, timeout=600
            )
            answer = response.choices[0].message.content or ""
            for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
                usage[key] += int(getattr(response.usage, key, 0) or 0)
            found = diff_in_text(answer)
            if found is None:
                feedback = "Your answer held no unified diff. Reply with one ```diff block."
            else:
                diff = found[0]
                patch_file = checkout.parent / f"{checkout.name}.diff"
                patch_file.write_text(diff)
                check = await run_process(
                    ["git", "apply", "--check", str(patch_file)], cwd=checkout, timeout=60
                )
                patch_file.unlink(missing_ok=True)
                if check.ok:
                    return Reply(
                        diff,
                        f"a fix touching {', '.join(files[:3]) or 'the repository'}",
                        usage=dict(usage),
                    )
                feedback = f"`git apply --check` refused the diff:\n{check.tail(20)}\nFix the diff."
            messages += [
                {"role": "assistant", "content": answer},
                {"role": "user", "content": feedback},
            ]
        return Reply(diff, "the last diff did not pass git apply --check", usage=dict(usage))


def pick_files(root: Path, issue: str, limit: int) -> list[str]:
    """Paths the issue names first, then source files where its identifiers occur most."""
    tracked = [p for p in _tracked(root) if p.endswith(".py")]
    named = [p for p in tracked if any(p.endswith(m.lstrip("./")) for m in _PATH.findall(issue))]
    words = {w for w in _IDENT.findall(issue) if w not in STOPWORDS}
    scores: Counter[str] = Counter()
    for path in tracked:
        if path in named or _is_test(path):
            continue
        try:
            text = (root / path).read_text(errors="replace")
        except OSError:
            continue
        hits = sum(1 for w in words if w in text)
        if hits:
            scores[path] = hits
    ranked = named + [p for p, _ in scores.most_common()]
    return ranked[:limit]


def _tracked(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if ".git" not in p.parts and p.is_file()
    )


def _is_test(path: str) -> bool:
    name = Path(path).name
    return name.startswith("test_") or "/tests/" in f"/{path}" or name == "conftest.py"
