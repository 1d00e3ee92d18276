"""The documentation names every configuration key the code accepts."""

from __future__ import annotations

from pathlib import Path

from swegreen.core.config import EvalConfig

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_every_config_key_is_documented() -> None:
    text = (DOCS / "configuration.md").read_text()
    missing = [key for key in EvalConfig.model_fields if f"`{key}`" not in text]
    assert missing == []


def test_relative_links_in_the_docs_resolve() -> None:
    import re

    root = DOCS.parent
    broken = []
    for page in [root / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.name}: {target}")
    assert broken == []
