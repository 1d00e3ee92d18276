"""Two small repositories whose tests run under the runners of Verified's other 306 rows.

- ``sample/ordinals``: django's shape. ``tests/runtests.py`` imports the package first
  (as django's imports django), then runs the named test modules with unittest's
  ``TextTestRunner`` at verbosity 2; graded with ``parse_log_django``, the labels in the
  django style (``test_ordinal``).
- ``sample/symcalc``: sympy's shape. The runner lives inside the library
  (``symcalc/utilities/runtests.py``: ``SymPyTests`` compiling and running each test
  file's ``test_*`` functions, ``PyTestReporter`` printing ``name ok``/``F``/``E``), reached
  through the package (``symcalc.test()``) from ``bin/test``; graded with
  ``parse_log_sympy``.

Each is built as a git repository with a base commit that has the bug, and a dataset row
(gold patch, test patch, FAIL_TO_PASS, PASS_TO_PASS) in SWE-bench's format, with the recipe
the engine grades it by. Python 3.5+ code, like the runners it stands in for.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from swegreen.core.recipes import Recipe, RecipeBook

ORDINALS = {
    "ordinals/__init__.py": "from .words import ordinal\n",
    "ordinals/words.py": (
        "def ordinal(n):\n"
        "    suffix = {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')\n"
        "    return '%d%s' % (n, suffix)\n"
    ),
    "tests/runtests.py": (
        "#!/usr/bin/env python\n"
        "import os\n"
        "import sys\n"
        "import unittest\n"
        "\n"
        "HERE = os.path.dirname(os.path.abspath(__file__))\n"
        "sys.path.insert(1, os.path.dirname(HERE))\n"
        "import ordinals  # noqa: E402,F401  (the project first, as django's runtests.py)\n"
        "import functools  # noqa: E402\n"
        "\n"
        "\n"
        "def _debug(*args):\n"
        "    pass\n"
        "\n"
        "\n"
        "# the runner's own setting of a framework attribute, as django's sets init_worker\n"
        "unittest.TestSuite.debug = functools.partial(_debug, None)\n"
        "\n"
        "\n"
        "def main(argv):\n"
        "    labels = [a for a in argv if not a.startswith('-') and not a.isdigit()]\n"
        "    suite = unittest.TestSuite()\n"
        "    for label in labels:\n"
        "        suite.addTests(unittest.defaultTestLoader.loadTestsFromName(label))\n"
        "    result = unittest.TextTestRunner(verbosity=2).run(suite)\n"
        "    return 0 if result.wasSuccessful() else 1\n"
        "\n"
        "\n"
        "if __name__ == '__main__':\n"
        "    sys.exit(main(sys.argv[1:]))\n"
    ),
    "tests/test_ordinal.py": "",  # ordinal_tests(): below
}
ORDINALS_GOLD = {
    "ordinals/words.py": (
        "def ordinal(n):\n"
        "    if n % 100 in (11, 12, 13):\n"
        "        return '%dth' % n\n"
        "    suffix = {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')\n"
        "    return '%d%s' % (n, suffix)\n"
    ),
}


def ordinal_tests(teens: bool) -> str:
    """The ordinals' test file, with the fail-to-pass test (the test patch's) or not."""
    return (
        "import functools\n"
        "import unittest\n"
        "\n"
        "from ordinals import ordinal\n"
        "\n"
        "\n"
        "class OrdinalTests(unittest.TestCase):\n"
        "    def test_first(self):\n"
        "        self.assertEqual(ordinal(1), '1st')\n"
        "\n"
        "    def test_second(self):\n"
        "        self.assertEqual(ordinal(22), '22nd')\n"
        "\n"
        "    def test_many(self):\n"
        "        for n, expected in ((101, '101st'), (42, '42nd')):\n"
        "            with self.subTest(n=n):\n"
        "                self.assertEqual(ordinal(n), expected)\n"
        "\n"
        "    def test_plain(self):\n"
        '        """Numbers ending in 4 to 9 take th."""\n'
        "        self.assertEqual(ordinal(7), '7th')\n"
        + (
            "\n"
            "    def test_teens(self):\n"
            "        self.assertEqual(ordinal(11), '11th')\n"
            "        self.assertEqual(ordinal(112), '112th')\n"
            if teens
            else ""
        )
        + "\n"
        "\n"
        "def _check(self, n, expected):\n"
        "    self.assertEqual(ordinal(n), expected)\n"
        "\n"
        "\n"
        "# generated, as django's register_tests makes them\n"
        "OrdinalTests.test_generated_3 = functools.partialmethod(_check, 3, '3rd')\n"
    )


ORDINALS["tests/test_ordinal.py"] = ordinal_tests(teens=False)
ORDINALS_TEST = {"tests/test_ordinal.py": ordinal_tests(teens=True)}

SYMCALC_RUNNER = '''"""A runner inside the library, in sympy's shape."""
import inspect
import os
import sys
import traceback


def get_symcalc_dir():
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class PyTestReporter(object):
    def __init__(self, verbose=False):
        self._verbose = verbose
        self._failed = []

    def write(self, text):
        sys.stdout.write(text)
        sys.stdout.flush()

    def start(self):
        self.write("=" * 20 + " test process starts " + "=" * 20 + "\\n")

    def entering_filename(self, filename, n):
        self.write("%s[%d] " % (os.path.relpath(filename, get_symcalc_dir()), n))

    def leaving_filename(self):
        self.write("\\n")

    def entering_test(self, f):
        self._active = f.__name__
        if self._verbose:
            self.write("\\n" + f.__name__ + " ")

    def test_pass(self):
        self.write("ok" if self._verbose else ".")

    def test_fail(self, exc_info):
        self._failed.append(self._active)
        self.write("F")

    def test_exception(self, exc_info):
        self._failed.append(self._active)
        self.write("E")

    def test_skip(self, v=None):
        self.write("s")

    def finish(self):
        self.write("\\n" + ("tests finished: %d failed" % len(self._failed)) + "\\n")
        for name in self._failed:
            self.write("_" * 10 + " symcalc/tests/test_arith.py:" + name + " " + "_" * 10 + "\\n")
        return not self._failed


class SymPyTests(object):
    def __init__(self, reporter):
        self._reporter = reporter
        self._testfiles = []

    def test(self):
        self._reporter.start()
        for f in self._testfiles:
            self.test_file(f)
        return self._reporter.finish()

    def test_file(self, filename):
        reporter = self._reporter
        gl = {"__file__": filename}
        with open(filename) as fh:
            source = fh.read()
        code = compile(source, filename, "exec", flags=0, dont_inherit=True)
        exec(code, gl)
        funcs = []
        for name in gl:
            if name.startswith("test_") and inspect.isfunction(gl[name]):
                func = gl[name]
                while hasattr(func, "__wrapped__"):
                    func = func.__wrapped__
                if inspect.getsourcefile(func) == filename:
                    funcs.append(gl[name])
        funcs.sort(key=lambda x: inspect.getsourcelines(x)[1])
        reporter.entering_filename(filename, len(funcs))
        for f in funcs:
            reporter.entering_test(f)
            try:
                f()
            except AssertionError:
                reporter.test_fail(sys.exc_info())
            except Exception:
                reporter.test_exception(sys.exc_info())
            else:
                reporter.test_pass()
        reporter.leaving_filename()


def test(*paths, **kwargs):
    reporter = PyTestReporter(verbose=kwargs.get("verbose", False))
    t = SymPyTests(reporter)
    root = get_symcalc_dir()
    for p in paths:
        t._testfiles.append(os.path.join(root, p))
    return t.test()
'''
SYMCALC = {
    "symcalc/__init__.py": (
        "from .arith import gcd\nfrom .utilities.runtests import test  # noqa: F401\n"
    ),
    "symcalc/arith.py": ("def gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a\n"),
    "symcalc/utilities/__init__.py": "",
    "symcalc/utilities/runtests.py": SYMCALC_RUNNER,
    "symcalc/tests/__init__.py": "",
    "symcalc/tests/test_arith.py": (
        "from symcalc import gcd\n"
        "\n"
        "\n"
        "def test_gcd():\n"
        "    assert gcd(12, 18) == 6\n"
        "\n"
        "\n"
        "def test_gcd_zero():\n"
        "    assert gcd(5, 0) == 5\n"
    ),
    "bin/test": (
        "#!/usr/bin/env python\n"
        "import os\n"
        "import sys\n"
        "\n"
        "sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))\n"
        "args = [a for a in sys.argv[1:] if not a.startswith('-')]\n"
        "import symcalc  # noqa: E402\n"
        "\n"
        "ok = symcalc.test(*args, verbose='--verbose' in sys.argv)\n"
        "sys.exit(0 if ok else 1)\n"
    ),
}
SYMCALC_GOLD = {
    "symcalc/arith.py": (
        "def gcd(a, b):\n"
        "    a, b = abs(a), abs(b)\n"
        "    while b:\n"
        "        a, b = b, a % b\n"
        "    return a\n"
    ),
}
SYMCALC_TEST = {
    "symcalc/tests/test_arith.py": SYMCALC["symcalc/tests/test_arith.py"]
    + ("\n\ndef test_gcd_negative():\n    assert gcd(4, -6) == 2\n"),
}


@dataclass(frozen=True)
class RunnerRepos:
    dataset: Path
    url_template: str
    recipes: RecipeBook
    repos: dict[str, Path]


RECIPES = {
    "sample/ordinals": Recipe(
        python="host",
        test_cmd="./tests/runtests.py --verbosity 2",
        log_parser="parse_log_django",
        directive_style="django",
        eval_timeout=60,
    ),
    "sample/symcalc": Recipe(
        python="host",
        test_cmd="bin/test -C --verbose",
        log_parser="parse_log_sympy",
        eval_timeout=60,
    ),
}
ROWS = {
    "sample/ordinals": (
        "sample__ordinals-1",
        ORDINALS,
        ORDINALS_GOLD,
        ORDINALS_TEST,
        ["test_teens (test_ordinal.OrdinalTests.test_teens)"],
        [
            "test_first (test_ordinal.OrdinalTests.test_first)",
            "test_second (test_ordinal.OrdinalTests.test_second)",
            "test_many (test_ordinal.OrdinalTests.test_many)",
            "Numbers ending in 4 to 9 take th.",
            # a partialmethod's description is its class's docstring (django-12209's too)
            "partial(func, *args, **keywords) - new function with partial application",
        ],
    ),
    "sample/symcalc": (
        "sample__symcalc-1",
        SYMCALC,
        SYMCALC_GOLD,
        SYMCALC_TEST,
        ["test_gcd_negative"],
        ["test_gcd", "test_gcd_zero"],
    ),
}


def git(repo: Path, *args: str, stdin: str | None = None) -> str:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(repo),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t.invalid",
        "GIT_AUTHOR_DATE": "@1704103200 +0000",
        "GIT_COMMITTER_DATE": "@1704103200 +0000",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def write_files(repo: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if rel in ("bin/test", "tests/runtests.py"):
            path.chmod(0o755)


def diff_of(repo: Path, files: dict[str, str]) -> str:
    """The diff that ``files`` make to the checkout's HEAD (left as it was)."""
    write_files(repo, files)
    git(repo, "add", "-A")
    patch = git(repo, "diff", "--cached", "HEAD")
    git(repo, "reset", "--quiet", "--hard", "HEAD")
    return patch


def build(root: Path) -> RunnerRepos:
    rows, repos = [], {}
    for name, (iid, base, gold, test, f2p, p2p) in ROWS.items():
        repo = root / "repos" / name.replace("/", "__")
        repo.mkdir(parents=True)
        git(repo, "init", "--quiet", "--initial-branch=main")
        write_files(repo, base)
        git(repo, "add", "-A")
        git(repo, "commit", "--quiet", "-m", "base")
        sha = git(repo, "rev-parse", "HEAD").strip()
        repos[name] = repo
        rows.append(
            {
                "repo": name,
                "instance_id": iid,
                "base_commit": sha,
                "patch": diff_of(repo, gold),
                "test_patch": diff_of(repo, test),
                "problem_statement": "fix it",
                "hints_text": "",
                "created_at": "2024-03-01T10:00:00Z",
                "version": "1.0",
                "FAIL_TO_PASS": json.dumps(f2p),
                "PASS_TO_PASS": json.dumps(p2p),
                "environment_setup_commit": sha,
            }
        )
    dataset = root / "dataset.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    book = RecipeBook({n: {"1.0": r} for n, r in RECIPES.items()}, "tests/runner_repos.py")
    return RunnerRepos(dataset, str(root / "repos" / "{owner}__{name}"), book, repos)
