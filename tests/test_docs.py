"""The documentation: every configuration key the code accepts named, every relative link
and anchor resolving, and no task page longer than one can read in ten minutes."""

from __future__ import annotations

from pathlib import Path

from swegreen.core.config import EvalConfig

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_every_config_key_is_documented() -> None:
    text = (DOCS / "configuration.md").read_text()
    missing = [key for key in EvalConfig.model_fields if f"`{key}`" not in text]
    assert missing == []


def slug(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    import re

    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    import re

    found, fence = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and (m := re.match(r"^#{1,6} (.+)$", line)):
            found.add(slug(m.group(1)))
    return found


def test_relative_links_and_their_anchors_in_the_docs_resolve() -> None:
    import re

    root = DOCS.parent
    broken = []
    for page in [root / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            where = page if not target else page.parent / target
            if not where.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and where.suffix == ".md" and anchor not in anchors(where):
                broken.append(f"{page.name}: {target}#{anchor}")
    assert broken == []


# The records: dated measurements and changes, read by date, not end to end.
LOGS = {"validation-log.md", "benchmarks-log.md", "changelog.md"}
PAGE_LINES = 400


def test_no_task_page_is_longer_than_one_reads_in_ten_minutes() -> None:
    long = {
        page.name: n
        for page in sorted(DOCS.glob("*.md"))
        if page.name not in LOGS and (n := len(page.read_text().splitlines())) > PAGE_LINES
    }
    assert long == {}
