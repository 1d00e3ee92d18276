"""Writes agentbeats/leaderboard.json, the JSON list of queries the AgentBeats platform
takes (Edit Agent: ``[{"name": ..., "query": ...}]``), from agentbeats/leaderboard.sql,
where each query follows a ``-- name: <name>`` line. ``--check`` only compares."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SQL = ROOT / "agentbeats" / "leaderboard.sql"
JSON = ROOT / "agentbeats" / "leaderboard.json"


def queries(sql: str) -> list[dict[str, str]]:
    """``[{"name", "query"}]``: the text after each ``-- name:`` line up to its ``;``,
    without comment lines or the semicolon."""
    out = []
    for found in re.finditer(r"^-- name: *(.+?)\n(.*?);", sql, re.M | re.S):
        lines = [ln for ln in found.group(2).splitlines() if not ln.lstrip().startswith("--")]
        out.append({"name": found.group(1).strip(), "query": "\n".join(lines).strip()})
    return out


def rendered() -> str:
    return json.dumps(queries(SQL.read_text()), indent=2) + "\n"


def main() -> int:
    if sys.argv[1:] == ["--check"]:
        if JSON.read_text() != rendered():
            print(f"{JSON} is out of date: run python {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    JSON.write_text(rendered())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
