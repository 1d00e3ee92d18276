"""The official harness, loaded without its package's start-up.

Importing any part of ``swebench.harness`` runs the package's ``__init__``, which imports
the whole harness: datasets, pandas, pyarrow, docker, modal; about 1 s in every process
(``swegreen run`` on one warm row took 6 s, its test command 2: docs/benchmarks-log.md). The
engine uses the harness's constants, grader and log parsers, and three small helpers.
``register`` (run by ``swegreen/__init__``) makes ``swebench.harness`` a package whose
``__init__`` is not run: its submodules import as usual, each with only its own imports.
The helpers live in modules whose imports are heavy (``utils``: datasets;
``run_evaluation``: docker), so they are compiled from those modules' own source text,
unchanged (``tests/test_upstream.py`` checks them against a real import).
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

HARNESS = "swebench.harness"


def register() -> None:
    """Let ``swebench.harness.*`` import without the package's ``__init__``; a no-op
    once the harness is imported (by this or by anything else)."""
    if HARNESS in sys.modules:
        return
    spec = importlib.util.find_spec("swebench")
    if spec is None or spec.origin is None:
        return  # not installed: the imports that need it say so
    path = Path(spec.origin).parent / "harness"
    module = types.ModuleType(HARNESS, "the official harness (swegreen.core.upstream)")
    module.__path__ = [str(path)]
    module.__file__ = str(path / "__init__.py")
    module.__package__ = HARNESS
    sys.modules[HARNESS] = module


def definitions(module: str, names: tuple[str, ...]) -> dict[str, Any]:
    """Top-level functions and literal constants ``names`` of upstream's ``module``,
    compiled from its source file without running its imports; the functions see the
    harness's constants as their globals (all they use)."""
    from swebench.harness import constants

    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ImportError(f"{module} is not installed")
    source = Path(spec.origin).read_text(encoding="utf-8")
    statements = [_statement(source, name, spec.origin) for name in names]
    if None in statements:  # not found alone: the whole file's parse decides
        statements = _statements(ast.parse(source, spec.origin), names)
    namespace: dict[str, Any] = {
        **{k: v for k, v in vars(constants).items() if not k.startswith("__")},
        "__name__": module,
        "__builtins__": builtins,
    }
    found: dict[str, Any] = {}
    for node in statements:
        if isinstance(node, ast.FunctionDef):
            code = compile(ast.Module(body=[node], type_ignores=[]), spec.origin, "exec")
            exec(code, namespace)  # upstream's own function, from its own file
            found[node.name] = namespace[node.name]
        elif isinstance(node, ast.Assign) and isinstance(target := node.targets[0], ast.Name):
            found[target.id] = ast.literal_eval(node.value)
    if missing := sorted(set(names) - set(found)):
        raise ImportError(f"{module} defines no {', '.join(missing)} (swebench changed?)")
    return found


def _statements(tree: ast.Module, names: tuple[str, ...]) -> list[ast.stmt]:
    """The module's top-level definitions of ``names``, from its whole parse."""
    return [
        node
        for node in tree.body
        if (isinstance(node, ast.FunctionDef) and node.name in names)
        or (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in names
        )
    ]


_NEXT_STATEMENT = re.compile(r"^(?=[A-Za-z_@])", re.MULTILINE)


def _statement(source: str, name: str, filename: str) -> ast.stmt | None:
    """The top-level statement defining ``name``, parsed alone (a tenth of the whole
    file's parse), or None where that is not certain; the whole parse then decides.

    It runs from its ``def name(`` or ``name =`` line at column 0 to the next line that
    starts a statement there. A cut inside the statement (a string or a bracket whose
    line starts at column 0) leaves it incomplete, so it does not parse."""
    starts = list(re.finditer(rf"^(def {re.escape(name)}\(|{re.escape(name)} *=)", source, re.M))
    if len(starts) != 1:
        return None
    begin = starts[0].start()
    end = _NEXT_STATEMENT.search(source, starts[0].end())
    text = "\n" * source.count("\n", 0, begin) + source[begin : end.start() if end else None]
    try:
        body = ast.parse(text, filename).body  # the line numbers are the file's
    except SyntaxError:
        return None
    wanted = _statements(ast.Module(body=body, type_ignores=[]), (name,))
    return wanted[0] if len(body) == 1 and wanted else None


register()

# Loaded on first use (``from swegreen.core.upstream import GIT_APPLY_CMDS``): the command
# line's --help and --version import nothing of the harness.
_FROM = {
    "parse_eval_script": f"{HARNESS}.utils",
    "record_test_exit_code": f"{HARNESS}.utils",
    "GIT_APPLY_CMDS": f"{HARNESS}.run_evaluation",
}
parse_eval_script: Callable[[str], list[str]]
record_test_exit_code: Callable[[list[str]], list[str]]
GIT_APPLY_CMDS: list[str]


def __getattr__(name: str) -> Any:
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = _FROM[name]  # every name of that module at once: its source is parsed once
    globals().update(definitions(module, tuple(n for n, m in _FROM.items() if m == module)))
    return globals()[name]
