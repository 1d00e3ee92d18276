"""The official harness, loaded without its package's start-up: the same code, and none
of the heavy imports (datasets, pandas, docker's SDK through the harness, modal)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from swegreen.core import upstream

SCRIPT = "#!/bin/bash\nset -uxo pipefail\ncd /testbed\n: '>>>>> Start Test Output'\npytest\n"
SCRIPT += ": '>>>>> End Test Output'\ngit checkout abc tests/x.py\n"
REAL = f"""
import json
import swebench.harness.utils as u, swebench.harness.run_evaluation as r
lines = u.parse_eval_script({SCRIPT!r})
print(json.dumps([lines, u.record_test_exit_code(lines), u.record_test_exit_code(["x"]),
                  r.GIT_APPLY_CMDS]))
"""


def test_the_helpers_are_upstreams_own() -> None:
    """Compiled from upstream's source, they answer as a real import of it does."""
    real = subprocess.run(
        [sys.executable, "-c", REAL], capture_output=True, text=True, check=True
    ).stdout
    lines = upstream.parse_eval_script(SCRIPT)
    ours = [
        lines,
        upstream.record_test_exit_code(lines),
        upstream.record_test_exit_code(["x"]),
        upstream.GIT_APPLY_CMDS,
    ]
    assert json.loads(real) == ours
    assert upstream.parse_eval_script.__module__ == "swebench.harness.utils"


def test_the_engine_imports_no_part_of_the_harness_it_does_not_use() -> None:
    probe = (
        "import sys, swegreen.evaluation.engine, swegreen.core.grading\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'datasets', 'pandas', 'pyarrow', 'modal'})\n"
        "print(heavy, 'swebench.harness.utils' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[] False"


def test_a_missing_definition_is_an_import_error_that_names_it() -> None:
    with pytest.raises(ImportError, match="no_such_helper"):
        upstream.definitions("swebench.harness.utils", ("no_such_helper",))


FAKE = '''"""A module of upstream's shape."""
import this_module_is_not_installed

def helper(x):
    text = """
not indented
"""
    return text + x

VALUE = [
    "a",
]

def twice():
    return 1

def twice():
    return 2
'''


def test_a_definition_is_parsed_alone_only_where_that_is_certain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement with a line at column 0 inside it, or a name defined twice, is read
    from the whole file's parse, as Python itself would define it."""
    (tmp_path / "upstream_shaped.py").write_text(FAKE)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert upstream._statement(FAKE, "VALUE", "f") is not None  # alone: the fast way
    assert upstream._statement(FAKE, "helper", "f") is None  # cut inside its string
    assert upstream._statement(FAKE, "twice", "f") is None
    found = upstream.definitions("upstream_shaped", ("helper", "VALUE", "twice"))
    assert found["helper"]("y") == "\nnot indented\ny"
    assert found["VALUE"] == ["a"]
    assert found["twice"]() == 2
    assert found["helper"].__code__.co_firstlineno == 4  # the file's own line numbers
