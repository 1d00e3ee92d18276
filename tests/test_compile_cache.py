"""The compiler cache (compile_cache.py): an evaluation's install compiles nothing its
prepared workspace compiled already, a changed source is compiled again (never served
stale), and no evaluation writes the cache."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from swegreen.core.config import EvalConfig
from swegreen.core.dataset import Instance
from swegreen.core.recipes import Recipe, RecipeBook
from swegreen.environments.compile_cache import CACHE_DIR, CompileCache
from swegreen.evaluation.engine import LocalSettings, build_engine

from .helpers import make_repo
from .test_prepared import tree_digest

pytestmark = pytest.mark.skipif(
    shutil.which("ccache") is None or shutil.which("gcc") is None,
    reason="needs ccache and gcc (scripts/install-system-deps.sh installs them)",
)

# Like pip's build isolation, a header in a fresh random directory at every build: the
# reason a plain compiler cache never hits on an eval-time reinstall.
SETUP_PY = """\
import os, tempfile
from setuptools import Extension, setup

headers = tempfile.mkdtemp(prefix="pip-build-env-")
with open(os.path.join(headers, "answer.h"), "w") as fh:
    fh.write("#define BASE 40\\n")
setup(
    name="fastcalc",
    version="0",
    packages=["fastcalc"],
    ext_modules=[Extension("fastcalc._speed", ["fastcalc/_speed.c"], include_dirs=[headers])],
)
"""
SPEED_C = """\
#include <Python.h>
#include "answer.h"
#define ANSWER (BASE + 2)
static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(ANSWER); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_speed", NULL, -1, methods};
PyMODINIT_FUNC PyInit__speed(void) { return PyModule_Create(&mod); }
"""
TEST_PATCH = """\
diff --git a/tests/test_speed.py b/tests/test_speed.py
new file mode 100644
--- /dev/null
+++ b/tests/test_speed.py
@@ -0,0 +1,5 @@
+from fastcalc._speed import answer
+
+
+def test_answer():
+    assert answer() == 42
"""
PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"
"""
# The real compiler, counting the compiles (not the links) ccache could not answer, in a
# file beside the checkout it compiles (writable there, in and out of the sandbox).
COUNTING = """#!/bin/bash
for a in "$@"; do [[ $a == -c ]] && echo "$*" >> "$SWEGREEN_REPO/../compiles.log"; done
exec {real} "$@"
"""

RECIPE = Recipe(
    python="host",
    packages=("pytest==8.3.5",),
    # PEP 660 editable install (setuptools >= 64): every install builds in new temp dirs
    install="python -m pip install --no-build-isolation --no-index -v -e .",
    test_cmd="pytest --no-header -rA --tb=no -p no:cacheprovider",
    eval_timeout=300,
)


@pytest.fixture
def compiled(tmp_path: Path, host_env: dict[str, str]):
    repo = tmp_path / "upstream" / "t__fastcalc"
    sha = make_repo(
        repo,
        {
            "pyproject.toml": PYPROJECT,
            "setup.py": SETUP_PY,
            "fastcalc/__init__.py": "",
            "fastcalc/_speed.c": SPEED_C,
        },
    )
    instance = Instance.model_validate(
        {
            "instance_id": "t__fastcalc-1",
            "repo": "t/fastcalc",
            "base_commit": sha,
            "environment_setup_commit": sha,
            "patch": "",
            "test_patch": TEST_PATCH,
            "problem_statement": "p",
            "version": "1.0",
            "FAIL_TO_PASS": json.dumps(["tests/test_speed.py::test_answer"]),
            "PASS_TO_PASS": "[]",
        }
    )
    config = EvalConfig(repo_url_template=str(tmp_path / "upstream" / "{owner}__{name}"))
    settings = LocalSettings(output_dir=tmp_path / "results", cache_dir=tmp_path / "cache")
    engine = build_engine(
        settings, config, host_env, recipes=RecipeBook({"t/fastcalc": {"1.0": RECIPE}})
    )
    found = CompileCache.find(host_env)
    assert found is not None
    # where the sandbox can run them: the environment cache is shown to it read-only
    counting = {}
    for name, real in found.compilers.items():
        shim = engine.testbeds.envs.root / "counting-compilers" / name
        shim.parent.mkdir(parents=True, exist_ok=True)
        shim.write_text(COUNTING.format(real=real))
        shim.chmod(0o755)
        counting[name] = str(shim)
    engine.testbeds.compile_cache = CompileCache(found.ccache, counting)
    yield engine.testbeds, instance
    engine.close()


def compiles(workspace: Path) -> int:
    log = workspace / "compiles.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_an_evaluation_compiles_only_what_changed_and_never_writes_the_cache(compiled) -> None:
    testbeds, instance = compiled

    async def main() -> None:
        async with testbeds.open("one", instance) as first:
            assert first.prepared is not None
            assert compiles(first.prepared) == 1  # the prepared workspace's build
            cache = first.prepared / CACHE_DIR
            digest = tree_digest(cache)
            run = await testbeds.run_eval(first)
            text = run.log_path.read_text()
            assert "PASSED tests/test_speed.py::test_answer" in text, text[-3000:]
            # the eval-time install asked for the compile again, and ccache answered it
            assert "building 'fastcalc._speed' extension" in text
            assert compiles(first.workspace) == 0
            assert tree_digest(cache) == digest

        async with testbeds.open("two", instance) as second:
            speed = second.repo / "fastcalc" / "_speed.c"
            speed.write_text(speed.read_text().replace("BASE + 2", "BASE + 3"))
            run = await testbeds.run_eval(second)
            text = run.log_path.read_text()
            assert "FAILED tests/test_speed.py::test_answer" in text, text[-3000:]
            assert compiles(second.workspace) == 1  # the changed source, compiled
            assert tree_digest(cache) == digest  # and not written back

        async with testbeds.open("three", instance) as third:  # nothing stale afterwards
            run = await testbeds.run_eval(third)
            assert "PASSED tests/test_speed.py::test_answer" in run.log_path.read_text()
            assert compiles(third.workspace) == 0

    asyncio.run(main())


def test_without_ccache_evaluations_still_build_and_pass(compiled) -> None:
    testbeds, instance = compiled
    testbeds.compile_cache = None

    async def main() -> None:
        async with testbeds.open("one", instance) as first:
            assert first.prepared is not None
            assert not (first.prepared / CACHE_DIR).exists()
            run = await testbeds.run_eval(first)
            text = run.log_path.read_text()
            assert "building 'fastcalc._speed' extension" in text
            assert "PASSED tests/test_speed.py::test_answer" in text

    asyncio.run(main())
