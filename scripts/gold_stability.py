"""Write the rows whose gold patch does not resolve stably here, with the evidence
(swegreen/data/gold_stability.json): the validated denominator's complement.

    python scripts/gold_stability.py RESULTS_DIR --table NAME=docs/validation-log.md \\
        --runs NAME=RUN[,RUN...] [--runs ...]

Each ``--table`` or ``--runs`` is one evidence run: a per-row table of an earlier
validation (the ``| instance | gold | ...`` rows of docs/validation-log.md after its
"What validation found" heading), or stored runs in RESULTS_DIR (within one group a later
run overrides an earlier one for the same row: a re-run after a fix). A row is validated
when its gold patch was graded (its tests ran) at least once and was ``resolved`` every
time it was; every other row is listed, with each run's verdict.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from swegreen.core.dataset import load_dataset
from swegreen.core.gold_stability import STABILITY_FILE

OUT = Path(__file__).resolve().parents[1] / "shared" / "swegreen" / "data" / STABILITY_FILE
DATASET = Path(__file__).resolve().parents[2] / "shared" / "data" / "swebench_verified.jsonl"
TABLE_ROW = re.compile(r"^\| ([\w.-]+__[\w.-]+-\d+) \| (\w+) \|", re.M)


def from_table(path: Path) -> dict[str, str]:
    text = path.read_text()
    text = text[text.index("## What validation found") :]
    rows: dict[str, str] = {}
    for m in TABLE_ROW.finditer(text):
        rows.setdefault(m[1], m[2])
    return rows


def from_runs(results: Path, runs: str) -> dict[str, str]:
    rows: dict[str, str] = {}
    for run in runs.split(","):
        for p in sorted((results / run / "instances").glob("*/result.json")):
            row = json.loads(p.read_text())
            verdict = row["status"] if row["tests_ran"] or row["status"] != "error" else "error"
            rows[row["instance_id"]] = f"{verdict}/{row['reason']}"
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--table", action="append", default=[])
    parser.add_argument("--runs", action="append", default=[])
    parser.add_argument("--dataset", default=str(DATASET))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    evidence: dict[str, dict[str, str]] = {}
    described = []
    for spec in args.table:
        name, path = spec.split("=", 1)
        evidence[name] = from_table(Path(path))
        described.append({"name": name, "source": f"{Path(path).name} tables", "rows": 0})
    for spec in args.runs:
        name, runs = spec.split("=", 1)
        evidence[name] = from_runs(args.results, runs)
        described.append({"name": name, "source": f"runs {runs}", "rows": 0})
    for item in described:
        item["rows"] = len(evidence[item["name"]])
    listed = {}
    for instance in load_dataset(args.dataset).instances:
        iid = instance.instance_id
        verdicts = {name: rows[iid] for name, rows in evidence.items() if iid in rows}
        graded = [v for v in verdicts.values() if not v.startswith("error")]
        if graded and all(v.split("/")[0] == "resolved" for v in graded):
            continue
        why = (
            "gold not resolved in every run that graded it"
            if graded
            else "never graded here (every run ended in an error)"
        )
        listed[iid] = {"why": why, "verdicts": verdicts}
    args.out.write_text(
        json.dumps(
            {
                "about": "Rows of SWE-bench Verified whose gold patch is not validated here: "
                "not resolved in every run that graded it, or never graded. Written by "
                "scripts/gold_stability.py from the evidence runs (docs/validation-log.md).",
                "evidence": described,
                "rows": dict(sorted(listed.items())),
            },
            indent=1,
        )
        + "\n"
    )
    print(f"{len(listed)} rows not validated, from {len(evidence)} evidence run(s): {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
