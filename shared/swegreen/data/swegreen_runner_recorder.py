"""swegreen's runner recorder: each test's outcome under unittest (django's runtests.py) and
sympy's own runner, seen by code loaded before any of the project's.

The pytest recorder is a pytest plugin; django's and sympy's runners have no plugin point
that loads before the project (runtests.py imports django first; sympy's runner lives
inside sympy). So the test phase starts Python with this module imported by a
``sitecustomize`` of the engine's (a read-only directory on PYTHONPATH, the module under a
name of the run's own), in the first Python process only: the variable that names it is
removed as it is read. What it does, before the project runs:

- notes the identity and code of unittest's machinery (``TestCase.run`` and the helpers
  it calls, the result classes, the suites, the loader, the assertion methods) and of the
  builtins the runners call;
- puts a finder first on ``sys.meta_path`` that loads the benchmark's modules (the test
  files and the runner's own modules, by the rule tamper.py puts them back by:
  ``django/test/``, any ``runtests.py``, sympy's ``utilities/pytest.py``) from their
  source, never from bytecode, and keeps the code objects that compile made and each
  module's namespace as its body left it;
- unittest: runs every test through a witness of its result, so that what
  ``TestCase.run`` itself reported (``addSuccess``, ``addFailure``, ...) is recorded
  whatever the result class does with it, and only from unittest's own code; before a
  test runs, the function it will call must be (or reach, through its decorators) the
  code its file compiles to for that name;
- sympy: wraps the runner's reporter (the calls ``SymPyTests.test_file`` makes for each
  test) and its ``compile``, so that each test function is checked against its file's
  compile before it runs.

After every test and at exit it compares all of that with what it noted; a change is a
``tamper`` event. Events are signed as the pytest recorder signs them (HMAC-SHA256 with
a key from an inherited pipe, a counter per line). The engine counts a graded test as
passed only where this record shows it passed.

Kept compatible with every Python a SWE-bench environment has (3.5+): no f-strings, no
annotations.
"""

import builtins
import contextlib
import json
import os
import sys

# The record channel is a module of its own under a name of the run's own, which the
# engine writes in place of ``swegreen_record_channel`` here (sandbox/recorder.py).
from swegreen_record_channel import _channel, _emit, _open_channel

_SPEC_VARIABLE = "SWEGREEN_RUNNER_SPEC"
_TEST_DIRS = ("test", "tests", "testing")


def _read_spec():
    path = os.environ.pop(_SPEC_VARIABLE, "")
    try:
        with open(path) as fh:
            spec = json.load(fh)
    except (OSError, ValueError):
        return {}
    return spec if isinstance(spec, dict) else {}


_SPEC = _read_spec()
_REPO = os.path.realpath(_SPEC.get("repo") or ".")
_KIND = _SPEC.get("kind", "")
_state = {"told": set(), "current": None, "file": None}


def _tamper(what, when):
    """Say ``what`` changed, once, and ``when`` it was noticed ("after test ...")."""
    if what in _state["told"]:
        return
    _state["told"].add(what)
    _emit({"event": "tamper", "said": what + " (noticed " + when + ")"})


# -- what must not change: objects and their code, by name --------------------------------

_CODE = type(_read_spec.__code__)
_FUNCTION = type(_read_spec)
_METHOD = type(_read_spec.__get__(0))  # a bound method
# label -> (the object, its code or None, the names of its class dict or None); the
# machinery is checked after every test, the test modules' namespaces at the end
_WATCHED = {}
_WATCHED_TESTS = {}


def _code_of(obj):
    """The code an object runs, read without running anything of its own: a lazy object of
    the project (django's ``settings``) answers any attribute by running code."""
    kind = type(obj)
    if kind in (staticmethod, classmethod, _METHOD):
        obj, kind = obj.__func__, type(obj.__func__)
    elif kind is property:
        obj, kind = obj.fget, type(obj.fget)
    if kind is _FUNCTION:
        return obj.__code__
    return None


def _watch_namespace(into, owner, namespace, path=()):
    """Note every function, method and class of ``namespace`` (module ``owner``'s dict,
    or the dict of its class at ``path``) that ``owner`` defines (its classes' own dicts
    too, two levels down)."""
    for name, value in list(namespace.items()):
        if name.startswith("__") and name.endswith("__") and not callable(value):
            continue
        here = (*path, name)
        if issubclass(type(value), type):
            if vars(value).get("__module__") != owner or len(path) > 1:
                continue
            _watch(into, owner, here, (value, None, _methods(value)))
            _watch_namespace(into, owner, dict(vars(value)), here)
        elif callable(value) or type(value) in (staticmethod, classmethod, property):
            _watch(into, owner, here, (value, _code_of(value), None))


_PARTS = {}  # label -> (module name, the attribute path in it): each check's lookup


def _watch(into, module, path, entry):
    label = module + "." + ".".join(path)
    _PARTS[label] = (module, path)
    into[label] = entry


_MISSING = object()


def _methods(cls):
    """The names of a class's own functions (its data, such as the ``tearDown_exceptions``
    unittest itself sets on a class, or the ``available_apps`` django's runner sets, may
    change; a function added where one was inherited may not)."""
    return frozenset(
        n
        for n, v in vars(cls).items()
        if type(v) in (_FUNCTION, staticmethod, classmethod, property)
    )


def _lookup(label):
    module, path = _PARTS[label]
    obj = sys.modules.get(module, _MISSING)
    for part in path:
        space = getattr(obj, "__dict__", {})
        if part not in space:
            return _MISSING
        obj = space[part]
    return obj


def _mock(obj):
    """unittest.mock's stand-ins: a test's own patch, undone when it ends."""
    module = getattr(type(obj), "__module__", "") or ""
    code = _code_of(obj)
    return module.startswith("unittest.mock") or (
        code is not None and code.co_filename.endswith(os.path.join("unittest", "mock.py"))
    )


def _wraps(new, old):
    """Whether ``new`` holds ``old`` as what it wraps (``_chain``), through no wrapper of
    the project's own code."""
    target = old.__func__ if type(old) in (staticmethod, classmethod) else old
    parents = {}
    chain = _chain(new, parents)
    return any(f is target for f in chain[1:]) and (
        _reached_through_project(chain, parents, target) is None
    )


def _benchmarks(obj):
    """Whether ``obj`` runs code of the benchmark's files (django's runtests.py sets
    ``TransactionTestCase.available_apps`` to a property of its own, and
    ``ParallelTestSuite.init_worker`` to a partial of runner.py's ``_init_worker``)."""
    if type(obj) is property:
        obj = obj.fget
    chain = _chain(obj)
    return bool(chain) and _benchmark_file(chain[0].__code__.co_filename)


def _audit(when, final=False):
    watched = list(_WATCHED.items())
    if final:
        watched += list(_WATCHED_TESTS.items())
    for label, (obj, code, names) in watched:
        now = _lookup(label)
        if now is _MISSING:
            now = None
        if now is not obj:
            if _benchmarks(now) or (code is not None and _wraps(now, obj)):
                # the benchmark's own doing (runtests.py sets a property, a test class
                # stubs importlib.import_module and puts it back), or a wrapper of the
                # very function (django's database features mark tests skipped so); the
                # baseline stays, so that putting the original back is no change either
                continue
            if not (not final and _mock(now)):
                _tamper(label + " was replaced", when)
        elif code is not None and _code_of(obj) is not code:
            _tamper(label + "'s code was replaced", when)
        elif names is not None and _methods(obj) != names:
            changed = [n for n in sorted(_methods(obj) ^ names) if n in vars(obj)]
            changed = [n for n in changed if not _benchmarks(vars(obj)[n])]
            if not final:
                changed = [n for n in changed if not _mock(vars(obj)[n])]
            if changed:
                _tamper(label + " gained or lost members: " + ", ".join(changed)[:200], when)
    for name, module in list(_MACHINERY.items()):
        if sys.modules.get(name) is not module:
            _tamper("module " + name + " was replaced in sys.modules", when)
    if sys.meta_path[:1] != [_FINDER]:
        _tamper("the finder of the benchmark's modules was moved or removed", when)
    if sys.gettrace() is not None or sys.getprofile() is not None:
        _tamper("a trace or profile function was left set", when)


_STDLIB = (
    "unittest",
    "unittest.case",
    "unittest.result",
    "unittest.runner",
    "unittest.suite",
    "unittest.loader",
    "unittest.util",
    "unittest.signals",
    "unittest.main",
    "functools",
    "importlib",
    "importlib._bootstrap",
    "importlib._bootstrap_external",
    "inspect",
)
_BUILTINS = (
    "__import__",
    "compile",
    "exec",
    "eval",
    "getattr",
    "hasattr",
    "isinstance",
    "issubclass",
    "callable",
    "open",
    "print",
    "repr",
    "str",
    "type",
    "super",
    "iter",
    "next",
    "len",
    "Exception",
    "BaseException",
    "AssertionError",
)


def _watch_stdlib():
    import importlib

    for name in _STDLIB:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        _watch_namespace(_WATCHED, name, dict(vars(module)))
    for name in _BUILTINS:
        if hasattr(builtins, name):
            _watch(_WATCHED, "builtins", (name,), (getattr(builtins, name), None, None))
    for name in ("exit", "settrace", "setprofile", "excepthook"):
        _watch(_WATCHED, "sys", (name,), (getattr(sys, name), None, None))


# -- the benchmark's modules, compiled from their source -----------------------------------

_LOADED = {}  # module name -> module
_MACHINERY = {}  # the runner's modules among them (not the tests', which tests may reload)
_CODES = {}  # id(code) -> code: every code object a benchmark module's compile made
_DEFS = {}  # (module name, class qualname) -> {name: code of its def in the class body}


def _in_repo(path):
    path = os.path.realpath(str(path))
    return path.startswith(_REPO + os.sep)


def _may_be_benchmark(name, path):
    """Whether submodule ``name`` of a package at ``path`` can be a benchmark file
    (``_benchmark_file``), from the names alone: most imports (the project's own modules,
    a library's) need no search of ours."""
    last = name.rpartition(".")[2]
    for entry in path:
        entry = os.path.realpath(str(entry))
        if not entry.startswith(_REPO + os.sep):
            continue
        parts = entry[len(_REPO) + 1 :].split(os.sep)
        if (
            any(p in _TEST_DIRS for p in parts)
            or last in _TEST_DIRS
            or last.startswith("test_")
            or last.endswith("_test")
            or last == "runtests"
            or (last == "pytest" and parts[-1] == "utilities")
        ):
            return True
    return False


def _benchmark_file(path):
    """Whether the file at ``path`` is the benchmark's: a test file or a runner module, by
    the rule tamper.py puts such files back by (``protected_reason``; the two are checked
    to agree in tests/test_integrity_runners.py)."""
    path = os.path.realpath(path)
    if not path.endswith(".py") or not path.startswith(_REPO + os.sep):
        return False
    rel = path[len(_REPO) + 1 :].replace(os.sep, "/")
    parts = rel.split("/")
    base = parts[-1]
    return (
        base == "runtests.py"
        or rel.endswith("/utilities/pytest.py")
        or any(p in _TEST_DIRS for p in parts[:-1])
        or base.startswith("test_")
        or base.endswith("_test.py")
    )


def _keep_codes(module_name, code):
    """Every code object of a compile, and the defs of each class body by its qualname."""
    stack = [(code, "")]
    while stack:
        here, qual = stack.pop()
        _CODES[id(here)] = here
        inner = [c for c in here.co_consts if isinstance(c, _CODE)]
        if qual:
            defs = _DEFS.setdefault((module_name, qual), {})
            for c in inner:  # in source order: a later def of a name wins, as at run time
                defs[c.co_name] = c
        for c in inner:
            if c.co_name.startswith("<"):
                stack.append((c, qual))
            elif _is_class_body(c):
                stack.append((c, (qual + "." if qual else "") + c.co_name))
            else:
                stack.append((c, (qual + "." if qual else "") + c.co_name + ".<locals>"))


def _is_class_body(code):
    names = code.co_names
    return "__module__" in names and "__qualname__" in names


class _SourceLoader:
    """Loads a benchmark module from its bytes (no bytecode), keeping what it compiled."""

    def __init__(self, name, path, is_package):
        self.name, self.path, self.is_package = name, path, is_package

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        with open(self.path, "rb") as fh:
            source = fh.read()
        code = compile(source, self.path, "exec", dont_inherit=True)
        _keep_codes(module.__name__, code)
        exec(code, module.__dict__)  # a module that fails to import is not kept (tests do so)
        _LOADED[module.__name__] = module
        _after_load(module)

    def get_source(self, name):
        with open(self.path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")

    def is_package(self, name):
        return self.is_package

    def get_filename(self, name):
        return self.path

    def get_code(self, name):
        with open(self.path, "rb") as fh:
            return compile(fh.read(), self.path, "exec", dont_inherit=True)


class _Finder:
    """First on sys.meta_path: the benchmark's modules load through ``_SourceLoader``."""

    def find_spec(self, name, path=None, target=None):
        import importlib.machinery as machinery

        if path is not None and not _may_be_benchmark(name, path):
            return None  # left to Python's own finder, without a second search
        spec = machinery.PathFinder.find_spec(name, path)
        origin = getattr(spec, "origin", None)
        if spec is None or type(spec.loader) is not machinery.SourceFileLoader:
            return None  # bytecode only, an extension, a zip (an egg): Python's own way
        if not origin or not os.path.isfile(origin) or not _benchmark_file(origin):
            return None
        is_package = spec.submodule_search_locations is not None
        spec.loader = _SourceLoader(name, origin, is_package)
        return spec

    def find_module(self, name, path=None):  # Python < 3.4 protocol: not used
        return None

    def invalidate_caches(self):
        pass


_FINDER = _Finder()


def _after_load(module):
    """A benchmark module's namespace as its body left it: watched from now on, and every
    function in it must be code its compile made."""
    name = module.__name__
    for label, value in list(vars(module).items()):
        code = _code_of(value)
        if code is not None and code.co_filename == module.__file__ and id(code) not in _CODES:
            _tamper(name + "." + label + " is not code its file compiles to", "at import")
    if _KIND == "sympy" and hasattr(module, "SymPyTests") and hasattr(module, "PyTestReporter"):
        _hook_sympy(module)
    path = os.path.realpath(getattr(module, "__file__", "") or "")
    rel = path[len(_REPO) + 1 :].replace(os.sep, "/")
    machinery = not _test_module(rel)
    if machinery:
        _MACHINERY[name] = module
    _watch_namespace(_WATCHED if machinery else _WATCHED_TESTS, name, dict(vars(module)))


def _test_module(rel):
    """A test file (not the test framework's own modules: ``django/test/``)."""
    parts = rel.split("/")
    return parts[0] in _TEST_DIRS or parts[-1].startswith("test_") or parts[-1].endswith("_test.py")


# -- which code a test must run ------------------------------------------------------------


def _chain(func, parents=None):
    """``func`` and the functions it holds: ``__wrapped__``, a bound method's function, a
    partial's or partialmethod's ``func`` and its closure's cells, nearest first; read
    from functions' own dicts only (an object of the project's could answer any attribute
    with code)."""
    import functools

    parents = {} if parents is None else parents  # id of a function -> what held it
    chain, todo, seen = [], [(func, None)], set()
    while todo and len(chain) < 50:
        here, holder = todo.pop(0)
        kind = type(here)
        if kind in (_METHOD, staticmethod, classmethod):
            here, kind = here.__func__, type(here.__func__)
        if kind in (functools.partial, functools.partialmethod):
            todo.append((here.func, holder))  # django's register_tests: partialmethods
            continue
        if kind is not _FUNCTION and id(here) not in seen:
            # a callable object that keeps the function (asgiref's async_to_sync keeps it
            # as ``awaitable``; others as ``__wrapped__``)
            seen.add(id(here))
            own = _own_dict(here)
            todo += [(v, holder) for k, v in own.items() if k == "__wrapped__" or (
                type(v) is _FUNCTION)]  # fmt: skip
            continue
        if id(here) in seen:
            continue
        seen.add(id(here))
        parents[id(here)] = holder
        chain.append(here)
        inner = here.__dict__.get("__wrapped__")
        if inner is not None:
            todo.append((inner, here))
        for cell in here.__closure__ or ():
            with contextlib.suppress(ValueError):
                todo.append((cell.cell_contents, here))
    return chain


def _own_dict(obj):
    """An object's instance dict where its type keeps it the usual way (read without
    running any of its code), else empty."""
    import types

    for klass in type(obj).__mro__:
        if "__dict__" in vars(klass):
            if type(vars(klass)["__dict__"]) is not types.GetSetDescriptorType:
                return {}
            break
    else:
        return {}
    try:
        found = object.__getattribute__(obj, "__dict__")
    except (AttributeError, TypeError):
        return {}
    return found if type(found) is dict else {}


def _reached_through_project(chain, parents, found):
    """The first wrapper of the project's own code (a file of the repository that is not
    the benchmark's) on the way from the test's function to ``found``, or None. A wrapper
    that keeps the test and never calls it must not be the patch's: wrappers of the
    benchmark's files (django's test decorators), of unittest and of installed libraries
    (``mock.patch``) are the benchmark's or the environment's."""
    here = parents.get(id(found))
    while here is not None:
        path = here.__code__.co_filename
        if _in_repo(path) and not _benchmark_file(path):
            return here
        here = parents.get(id(here))
    return None


def _expected_code(cls, name):
    """The code the def of ``name`` in the first class of ``cls``'s MRO that has it compiles
    to; None where no benchmark module's compile defines it there (generated, inherited
    from the library, or a class no benchmark module made)."""
    for klass in getattr(cls, "__mro__", ()):
        if name not in vars(klass):
            continue
        defs = _DEFS.get((klass.__module__, getattr(klass, "__qualname__", klass.__name__)))
        return defs.get(name) if defs is not None else None
    return None


def _wrong_code(func, expected):
    """Why ``func`` does not run the code its file defines (None: it does)."""
    parents = {}
    chain = _chain(func, parents)
    found = [f for f in chain if f.__code__ is expected or (
        expected is None and id(f.__code__) in _CODES)]  # fmt: skip
    if not found:
        if expected is not None:
            return "its test function's code is not what its file compiles to"
        return "its test function is not code of any test file"
    wrapper = _reached_through_project(chain, parents, found[0])
    if wrapper is not None:
        return "its test function is wrapped by the project's " + wrapper.__code__.co_name
    return None


# -- unittest -------------------------------------------------------------------------------


def _names(test):
    names = [str(test)]
    with contextlib.suppress(Exception):
        doc = test.shortDescription()
        if doc:
            names.append(doc)
    return names


class _Witness:
    """What ``TestCase.run`` reports, noted before it reaches the result it was given."""

    def __init__(self, result, test):
        object.__setattr__(self, "_result", result)
        object.__setattr__(self, "_test", test)
        object.__setattr__(self, "_seen", [])

    def __getattr__(self, name):
        return getattr(object.__getattribute__(self, "_result"), name)

    def __setattr__(self, name, value):
        setattr(object.__getattribute__(self, "_result"), name, value)

    def _note(self, test, outcome):
        if test is not object.__getattribute__(self, "_test"):
            return
        seen = object.__getattribute__(self, "_seen")
        if id(sys._getframe(2).f_code) not in _UNITTEST_CODES:
            # only unittest's own code reports a test's outcome: a call from elsewhere
            # (code under test that found this object) reports nothing of it
            _tamper(
                "test " + str(test) + ": its outcome was reported from outside unittest",
                "while it ran",
            )
            outcome = "tampered"
        seen.append(outcome)

    def addSuccess(self, test):
        self._note(test, "passed")
        return self._result.addSuccess(test)

    def addFailure(self, test, err):
        self._note(test, "failed")
        return self._result.addFailure(test, err)

    def addError(self, test, err):
        self._note(test, "error")
        return self._result.addError(test, err)

    def addSkip(self, test, reason):
        self._note(test, "skipped")
        return self._result.addSkip(test, reason)

    def addExpectedFailure(self, test, err):
        self._note(test, "xfailed")
        return self._result.addExpectedFailure(test, err)

    def addUnexpectedSuccess(self, test):
        self._note(test, "xpassed")
        return self._result.addUnexpectedSuccess(test)

    def addSubTest(self, test, subtest, err):
        if err is not None:
            self._note(test, "failed")
        return self._result.addSubTest(test, subtest, err)


_RANK = ("passed", "skipped", "xfailed", "xpassed", "failed", "error", "tampered")


def _verdict(seen):
    if not seen:
        return None
    return max(seen, key=_RANK.index)


_UNITTEST_CODES = set()  # ids of every code object of unittest.case's functions


def _codes_of_module(module):
    """Every code object of ``module``'s functions and methods, nested ones included."""
    found, stack, values = set(), [], list(vars(module).values())
    for value in list(values):
        if issubclass(type(value), type) and vars(value).get("__module__") == module.__name__:
            values += list(vars(value).values())
    for value in values:
        stack += [f.__code__ for f in _chain(value)]  # a contextmanager's own generator too
    while stack:
        code = stack.pop()
        if code is not None and id(code) not in found:
            found.add(id(code))
            stack += [c for c in code.co_consts if isinstance(c, _CODE)]
    return found


def _hook_unittest():
    import unittest
    import unittest.case

    _UNITTEST_CODES.update(_codes_of_module(unittest.case))
    original = unittest.TestCase.run

    def run(self, result=None):
        if result is None or _channel["fd"] is None:
            return original(self, result)
        name = getattr(self, "_testMethodName", "")
        why = None
        with contextlib.suppress(Exception):
            func = getattr(type(self), name, None)
            if func is not None and _benchmark_module(type(self)):
                why = _wrong_code(func, _expected_code(type(self), name))
        witness = _Witness(result, self)
        try:
            return original(self, witness)
        except BaseException:  # escaped the test's own handling: it did not pass
            object.__getattribute__(witness, "_seen").append("error")
            raise
        finally:
            seen = object.__getattribute__(witness, "_seen")
            if why is not None:
                _tamper("test " + str(self) + ": " + why, "before it ran")
                seen.append("tampered")
            _audit("after test " + str(self))
            outcome = _verdict(seen)
            if outcome is not None:
                _emit({"event": "test", "names": _names(self), "outcome": outcome})

    run.__wrapped_by_swegreen__ = True
    unittest.TestCase.run = run


def _benchmark_module(cls):
    return any(getattr(k, "__module__", None) in _LOADED for k in getattr(cls, "__mro__", ()))


# -- sympy's runner -------------------------------------------------------------------------


def _hook_sympy(runner):
    """Wrap the reporter calls ``SymPyTests.test_file`` makes for each test file and test,
    and the ``compile`` it compiles each test file with (the runner's module global,
    which ``builtins.compile`` would otherwise be)."""
    reporter = runner.PyTestReporter
    files = {}  # realpath of a test file -> {top-level def name: code}, and "*": all ids
    runner_codes = _codes_of_module(runner)  # its own code: e.g. its wrapper of a generated test

    def compile_(source, filename, *args, **kwargs):
        code = compile(source, filename, *args, **kwargs)
        if isinstance(code, _CODE):
            kept, stack = set(), [code]
            while stack:
                here = stack.pop()
                kept.add(id(here))
                stack += [c for c in here.co_consts if isinstance(c, _CODE)]
            defs = {c.co_name: c for c in code.co_consts if isinstance(c, _CODE)}
            files[os.path.realpath(str(filename))] = (defs, kept)
        return code

    runner.compile = compile_

    def entering_filename(self, filename, *args, **kwargs):
        _state["file"] = os.path.realpath(str(filename))

    def entering_test(self, f, *args, **kwargs):
        name = getattr(f, "__name__", str(f))
        _state["current"] = [name, []]
        defs, kept = files.get(_state.get("file"), ({}, set()))
        codes = [_code_of(g) for g in _chain(f)]
        expected = defs.get(name)
        if expected is not None:
            ok = any(c is expected for c in codes)
        else:
            ok = any(c is not None and (id(c) in kept or id(c) in runner_codes) for c in codes)
        if not ok:
            _tamper(
                "test " + name + ": its test function's code is not what its file compiles to",
                "before it ran",
            )
            _state["current"][1].append("tampered")

    def outcome_of(outcome):
        def note(self, *args, **kwargs):
            if _state["current"] is None:
                return
            test, seen = _state["current"]
            _state["current"] = None
            seen.append(outcome)
            _audit("after test " + test)
            _emit({"event": "test", "names": [test], "outcome": _verdict(seen)})

        return note

    notes = [("entering_filename", entering_filename), ("entering_test", entering_test)]
    notes += [
        (name, outcome_of(outcome))
        for name, outcome in (
            ("test_pass", "passed"),
            ("test_fail", "failed"),
            ("test_exception", "error"),
            ("test_skip", "skipped"),
            ("test_xfail", "xfailed"),
            ("test_xpass", "xpassed"),
        )
    ]
    for name, note in notes:
        original = vars(reporter).get(name)
        if original is None:
            continue
        setattr(reporter, name, _noting(name, note, original, runner_codes))


def _noting(name, note, original, callers):
    """The reporter's method ``name``, noting first; only a call from the runner's own code
    (``callers``: ``SymPyTests.test_file``) notes an outcome."""

    def method(self, *args, **kwargs):
        _shadowed(self)
        if id(sys._getframe(1).f_code) in callers:
            note(self, *args, **kwargs)
        elif _state["current"] is not None:
            test = _state["current"][0]
            _tamper(
                "test " + test + ": the reporter was called from outside the runner", "while it ran"
            )
            _state["current"][1].append("tampered")
        return original(self, *args, **kwargs)

    method.__name__ = name
    return method


def _shadowed(obj):
    """An instance attribute that hides a method of the runner's classes."""
    for name, value in list(getattr(obj, "__dict__", {}).items()):
        if callable(value) and hasattr(type(obj), name):
            what = type(obj).__name__ + "." + name + " was shadowed on its instance"
            _tamper(what, "during a test")


# -- start ---------------------------------------------------------------------------------


def _finish():
    if _state["current"] is not None:  # a test that never reported: the process ended
        _emit({"event": "test", "names": [_state["current"][0]], "outcome": "error"})
    _audit("at the end", final=True)
    _emit({"event": "runner-finish"})


def _start():
    _channel["fd"] = _open_channel() if _KIND else None
    if _channel["fd"] is None:
        return
    _emit({"event": "runner-start", "runner": _KIND})
    if _KIND == "unittest":
        _hook_unittest()
    _watch_stdlib()
    sys.meta_path.insert(0, _FINDER)
    import atexit

    atexit.register(_finish)


_start()
