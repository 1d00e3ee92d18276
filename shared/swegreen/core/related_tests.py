"""Which test files exercise the modules a patch touched: the regression check's scope.

A row's F2P and P2P lists pin down only the tests its own test files hold; a patch can
pass them all and still break a neighbouring module's tests (the literature finds 7.8%
of "resolved" patches failing the full suite). The regression check runs the test files
that name the touched modules, found the way these projects name them: ``stats.py`` is
tested by ``test_stats.py`` (or ``stats_test.py``), nearest to the module first
(``sympy/core/expr.py`` -> ``sympy/core/tests/test_expr.py``, ``src/_pytest/pathlib.py``
-> ``testing/test_pathlib.py``, ``django/utils/text.py`` -> ``tests/utils_tests/test_text.py``).
A module no test file names (most of django's) adds nothing: the check then covers the
row's own test files in full.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from swebench.harness.constants import NON_TEST_EXTS

TEST_DIRS = frozenset({"tests", "test", "testing", "unittests"})
MAX_PER_MODULE = 2  # test files taken for one module (the nearest ones)
MAX_FILES = 12  # test files the check adds to a row, at most


def is_test_path(path: str) -> bool:
    """Whether ``path`` is a test file or lives among tests (never a touched module)."""
    parts = path.split("/")
    name = parts[-1]
    return (
        any(p in TEST_DIRS for p in parts[:-1])
        or name.startswith("test_")
        or name.endswith("_test.py")
        or name in ("conftest.py", "tests.py")
    )


def _stem(module: str) -> str | None:
    parts = module.split("/")
    name = parts[-1].removesuffix(".py")
    if name == "__init__":
        name = parts[-2] if len(parts) > 1 else ""
    name = name.lstrip("_")  # _base.py is tested by test_base.py
    return name or None


def _shared_prefix(a: str, b: str) -> int:
    return len(os.path.commonpath([a, b]).split("/")) if os.path.commonpath([a, b]) else 0


def _tokens(directory: str) -> set[str]:
    """The words of a directory path that say what it is about: not the test folders,
    ``_tests`` suffixes stripped (django's ``contenttypes_tests``)."""
    words = set()
    for part in directory.split("/"):
        part = part.removesuffix("_tests").removesuffix("_test").strip("_")
        if part and part not in TEST_DIRS:
            words.add(part)
    return words


def _affinity(module: str, candidate: str) -> int:
    """How many of the module's package words (below its top-level package) the test
    file's directories name: ``django/contrib/contenttypes/management/__init__.py`` is
    nearer ``tests/contenttypes_tests/test_management.py`` than
    ``tests/auth_tests/test_management.py``."""
    package = module.split("/")[1:-1]
    return len(set(package) & _tokens(os.path.dirname(candidate)))


def related_test_files(
    changed: Iterable[str], tracked: Sequence[str], limit: int = MAX_FILES
) -> list[str]:
    """The tracked test files that name the changed modules, at most ``MAX_PER_MODULE``
    per module and ``limit`` in all (in the order modules came). Of several, the ones
    whose directories name the module's package win, then the nearest; a name that
    several unrelated test files share and none of them ties to the module (astropy's
    many ``test_core.py`` for ``astropy/timeseries/core.py``) adds nothing."""
    by_name: dict[str, list[str]] = {}
    for path in tracked:
        if path.endswith(".py") and is_test_path(path):
            by_name.setdefault(path.rsplit("/", 1)[-1], []).append(path)
    found: list[str] = []
    for module in changed:
        if not module.endswith(".py") or is_test_path(module):
            continue
        stem = _stem(module)
        if stem is None:
            continue
        names = (f"test_{stem}.py", f"{stem}_test.py", f"test_{stem}s.py")
        candidates = [p for n in names for p in by_name.get(n, [])]
        if not candidates:
            continue
        home = os.path.dirname(module) or "."
        best = max(_affinity(module, c) for c in candidates)
        if best == 0 and len(candidates) > 1:
            continue  # one name, unrelated places: nothing says which tests this module
        candidates = [c for c in candidates if _affinity(module, c) == best]
        candidates.sort(key=lambda p: (-_shared_prefix(home, os.path.dirname(p) or "."), p))
        for path in candidates[:MAX_PER_MODULE]:
            if path not in found and len(found) < limit:
                found.append(path)
    return found


def directives_for(paths: Iterable[str], style: str) -> list[str]:
    """How the test command names test files (upstream's ``get_test_directives`` on a
    list of paths): non-test extensions dropped; django wants dotted module names."""
    directives = [p for p in paths if not any(p.endswith(ext) for ext in NON_TEST_EXTS)]
    if style == "django":
        return [p.removesuffix(".py").removeprefix("tests/").replace("/", ".") for p in directives]
    return directives
