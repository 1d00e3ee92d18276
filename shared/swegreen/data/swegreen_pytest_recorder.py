"""swegreen's pytest recorder: each test's outcome, written where the test cannot rewrite it.

The sandbox's test phase loads this module as a pytest plugin (``-p <name>``, from a
read-only directory on PYTHONPATH, under a name of the run's own). It prints nothing and
changes nothing; it appends one JSON line per event to the record channel named by
SWEGREEN_RECORD (a FIFO that the engine reads from outside the sandbox), so that what a
test prints on stdout can be checked against what pytest itself saw. Only the sessions
rooted at the repository under test record (not pytester's inner sessions, not xdist
workers).

Code under test runs in this process, so it could write lines of its own into the
channel. Every line is signed (HMAC-SHA256, counter included) with a key the engine
passes through an inherited pipe (its descriptor named by SWEGREEN_RECORD_KEY_FD), which
this module drains and closes when it is imported, before any conftest or project module
is: the key is in no environment, and the pipe is empty for whoever opens it later (the
parent shell's copy, through /proc). A line without a valid signature is a forgery the
engine reports. The module also notes pytest's own machinery (the functions
that run a test and make its report, and the plugins on the reporting hooks) before the
tests run, and reports a change (``tamper``) seen after any test or at the end: code that
replaces ``Function.runtest`` or registers a report-rewriting hook while the tests run is
named; so is an item whose test function (or its code) is not the one it was collected
with, or not code compiled from its file's bytes: every test module is compiled afresh
from its source (pytest's cached rewrite is never read) and the code objects of that
compile are kept, so a test whose function's code was replaced between the module's
execution and its collection (code under test can arrange that) is named too. Neither
check runs on pytest's own repository, whose tests change pytest. A skip or
xfail raised while a test runs is recorded with the repository files its traceback
passes through and whether the test carries the marker for it.

Kept compatible with every Python and pytest a SWE-bench environment has (3.5+, pytest
3+): no f-strings, no annotations.
"""

import contextlib
import os

import pytest

# The record channel is a module of its own under a name of the run's own, which the
# engine writes in place of ``swegreen_record_channel`` here (sandbox/recorder.py).
from swegreen_record_channel import _channel, _emit, _open_channel

_state = {
    "session": 0,
    "baseline": None,
    "told": set(),
    "conftests": set(),
    "items": {},
}


_REPO = os.environ.get("SWEGREEN_REPO", "")
_HOOKS = (
    "pytest_runtest_protocol",
    "pytest_runtest_setup",
    "pytest_runtest_call",
    "pytest_runtest_teardown",
    "pytest_runtest_makereport",
    "pytest_runtest_logreport",
    "pytest_report_teststatus",
    "pytest_pyfunc_call",
)


def _open():
    if not _REPO or os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return _open_channel()


def _inside(root, repo):
    root, repo = os.path.realpath(root), os.path.realpath(repo)
    return root == repo or root.startswith(repo + os.sep)


def _is_pytest_itself_at(repo):
    return bool(repo) and any(
        os.path.isfile(os.path.join(repo, where, "_pytest", "python.py")) for where in ("", "src")
    )


def _is_pytest_itself():
    return _is_pytest_itself_at(_REPO)


def _functions():
    """What runs a test and makes its report: the identity of each function."""
    import importlib

    found = {}
    for module, path in (
        ("_pytest.python", "Function.runtest"),
        ("_pytest.python", "pytest_pyfunc_call"),
        ("_pytest.runner", "call_and_report"),
        ("_pytest.runner", "call_runtest_hook"),
        ("_pytest.runner", "runtestprotocol"),
        ("_pytest.runner", "pytest_runtest_makereport"),
        ("_pytest.runner", "CallInfo.from_call"),
        ("_pytest.reports", "TestReport.from_item_and_call"),
        ("_pytest.reports", "BaseReport.passed"),
    ):
        try:
            obj = importlib.import_module(module)
            for part in path.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            continue
        func = getattr(obj, "__func__", getattr(obj, "fget", obj))
        found[module + "." + path] = (id(func), id(getattr(func, "__code__", None)))
    return found


# Taken when pytest imports this plugin: before any conftest or project module runs.
_FUNCTIONS = _functions()

# -- what each test module's bytes compile to ------------------------------------------

# realpath of a test module -> (its code, as pytest's rewriter compiled it from the file's
# bytes: True, so the functions it defines are those very code objects; False: compiled
# here again, equal by value)
_COMPILED = {}


def _keep(fn, code):
    if isinstance(code, type(_keep.__code__)):
        _COMPILED[os.path.realpath(str(fn))] = (code, True)


def _watch_compiles():
    """Keeps what pytest's assertion rewriter compiles each test module to, and makes it
    compile every one from its source: a cached rewrite (``__pycache__/*-pytest-*.pyc``,
    which code run earlier in the session could have forged) is never read."""
    try:
        from _pytest.assertion import rewrite
    except ImportError:
        return
    rewrite_test = getattr(rewrite, "_rewrite_test", None)
    if rewrite_test is None or not hasattr(rewrite, "_read_pyc"):
        return

    def _rewrite_test(*args, **kwargs):
        result = rewrite_test(*args, **kwargs)
        fn = [a for a in args if not hasattr(a, "getini")] or [kwargs.get("fn")]
        with contextlib.suppress(Exception):
            _keep(fn[0], result[1])
        return result

    def _read_pyc(*args, **kwargs):
        return None

    rewrite._rewrite_test = _rewrite_test
    rewrite._read_pyc = _read_pyc


def _not_compiled_from_its_file(item):
    """Why the code the item runs is not what its file defines (None: it is, or the file
    does not define the test: inherited, imported, generated)."""
    module = getattr(item, "module", None)
    path = getattr(module, "__file__", None)
    if not path or not _REPO:
        return None
    path = os.path.realpath(path)
    if not _inside(path, _REPO) or not path.endswith(".py"):
        return None
    kept = _COMPILED.get(path)
    if kept is None:  # imported without the rewriter (``--assert=plain``): as Python does
        with open(path, "rb") as fh:
            kept = (compile(fh.read(), path, "exec", dont_inherit=True), False)
        _COMPILED[path] = kept
    cls = getattr(item, "cls", None)
    name = getattr(item, "originalname", None) or item.name.split("[")[0]
    scope = kept[0]
    if cls is not None:
        bodies = [c for c in _code_consts(scope) if c.co_name == cls.__name__]
        if not bodies:
            return None
        scope = bodies[0]
    defined = [c for c in _code_consts(scope) if c.co_name == name]
    if not defined:
        return None
    func = getattr(item.obj, "__func__", item.obj)
    codes = [getattr(f, "__code__", None) for f in _wrapped_chain(func)]
    if any(_same(code, c, kept[1]) for code in codes[:1] for c in defined):
        return None
    if (cls.__name__ if cls is not None else None, name) in _decorated(path):
        # wrappers its decorators made: the file's function must be reached through them
        # (``functools.wraps``), unless none of them is the repository's (a library's,
        # such as hypothesis's, which keeps the test elsewhere)
        if any(code is not None and _compiled_in(code, kept) for code in codes):
            return None  # its own function, or a wrapper a decorator of its file made
        if not any(code is not None and _inside(code.co_filename, _REPO) for code in codes):
            return None
    return "its test function's code is not what its file compiles to"


def _compiled_in(code, kept):
    """Whether ``code`` is one of the code objects the module's compile made."""
    stack = [kept[0]]
    while stack:
        here = stack.pop()
        if _same(code, here, kept[1]):
            return True
        stack += _code_consts(here)
    return False


def _code_consts(code):
    return [c for c in code.co_consts if isinstance(c, type(code))]


def _same(code, compiled, by_identity):
    return code is compiled if by_identity else code == compiled


def _wrapped_chain(func):
    """``func`` and the functions it holds, nearest first: ``functools.wraps``'
    ``__wrapped__``, hypothesis's ``inner_test`` (its wrapper's code claims the test's
    file and line), and the functions in its closure (a decorator's wrapper that keeps
    the test without ``wraps``, as matplotlib's ``check_figures_equal``)."""
    chain, todo, seen = [], [func], set()
    while todo and len(chain) < 100:
        here = todo.pop(0)
        here = getattr(here, "__func__", here)
        if id(here) in seen or not hasattr(here, "__code__"):
            continue
        seen.add(id(here))
        chain.append(here)
        inner = getattr(here, "__wrapped__", None)
        hyp = getattr(getattr(here, "hypothesis", None), "inner_test", None)
        todo += [f for f in (inner, hyp) if f is not None]
        for cell in getattr(here, "__closure__", None) or ():
            with contextlib.suppress(ValueError):  # an empty cell
                todo.append(cell.cell_contents)
    return chain


_DECORATED = {}


def _decorated(path):
    """(class name or None, function name) of the defs in ``path`` with a decorator that
    may wrap (anything but pytest's marks), read from the file's bytes."""
    found = _DECORATED.get(path)
    if found is not None:
        return found
    import ast

    found = set()
    with open(path, "rb") as fh:
        tree = ast.parse(fh.read(), path)
    defs = (ast.FunctionDef, getattr(ast, "AsyncFunctionDef", ast.FunctionDef))
    for node in tree.body:
        scopes = [(None, node)]
        if isinstance(node, ast.ClassDef):
            scopes = [(node.name, inner) for inner in node.body]
        for owner, fn in scopes:
            if isinstance(fn, defs) and any(not _is_mark(d) for d in fn.decorator_list):
                found.add((owner, fn.name))
    _DECORATED[path] = found
    return found


def _is_mark(node):
    """``@pytest.mark.x``, ``@mark.x(...)``: marks change no function."""
    import ast

    if isinstance(node, ast.Call):
        node = node.func
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.append(node.id)
    return "mark" in names[1:]


if not _is_pytest_itself_at(_REPO):
    _watch_compiles()


def _hookimpls(config):
    """The plugins implementing the hooks that run and report tests."""
    found = {}
    for name in _HOOKS:
        get = getattr(getattr(config.hook, name, None), "get_hookimpls", None)
        if get is not None:
            for impl in get():
                found[(name, getattr(impl, "plugin_name", "?"), id(impl.function))] = True
    return found


def _audit(config, when):
    if _channel["fd"] is None or _state["baseline"] is None:
        return
    changed = []
    now = _functions()
    changed += [k for k in sorted(_FUNCTIONS) if now.get(k) != _FUNCTIONS[k]]
    for name, plugin, _ in sorted(set(_hookimpls(config)) - set(_state["baseline"])):
        if plugin not in _state["conftests"]:
            changed.append("hook " + name + " (from " + str(plugin) + ")")
    for what in changed:
        if what not in _state["told"]:
            _state["told"].add(what)
            _emit({"event": "tamper", "what": what, "when": when})


def pytest_plugin_registered(plugin, manager):
    """conftest.py files are the benchmark's (put back before the tests): their hooks,
    registered while collecting, are expected."""
    path = getattr(plugin, "__file__", None) or ""
    if os.path.basename(path) in ("conftest.py", "conftest.pyc") and _inside(path, _REPO):
        name = manager.get_name(plugin) if hasattr(manager, "get_name") else None
        _state["conftests"].add(name)


def pytest_configure(config):
    root = str(getattr(config, "rootdir", ""))
    if not root or not _REPO or not _inside(root, _REPO):
        return
    if _channel["fd"] is None:
        _channel["fd"] = _open()
    _state["session"] += 1
    config._swegreen_session = _state["session"]
    _emit({"event": "start", "session": _state["session"]})


# -- what configures the session: compared with what the base commit's configures -----


def _where(path, digest=True):
    """A file as the same in another checkout of the row: inside the repository, its
    relative path (and a digest of its bytes: a plugin's code); inside the interpreter's
    prefix, relative to it; else as it is."""
    if not path:
        return "-"
    import hashlib
    import sys

    path = os.path.realpath(str(path))
    if path.endswith((".pyc", ".pyo")) and "__pycache__" not in path:
        path = path[:-1]
    if _REPO and _inside(path, _REPO) and (os.path.isdir(path) or not digest):
        return "repo:" + os.path.relpath(path, os.path.realpath(_REPO))
    if _REPO and _inside(path, _REPO):
        try:
            with open(path, "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()[:16]
        except OSError:
            digest = "unreadable"
        return "repo:" + os.path.relpath(path, os.path.realpath(_REPO)) + " " + digest
    for prefix in (sys.prefix, getattr(sys, "base_prefix", sys.prefix)):
        if _inside(path, prefix):
            return "prefix:" + os.path.relpath(path, os.path.realpath(prefix))
    return path


def _plugins(config):
    """Every plugin registered so far, as a module's name or an object's class, with the
    file that holds its code (this recorder and its channel aside: their names are the
    run's own)."""
    import sys
    import types

    ours = (sys.modules.get(__name__), sys.modules.get(_emit.__module__))
    found = []
    for plugin in config.pluginmanager.get_plugins():
        if plugin is None or any(plugin is o for o in ours):
            continue
        if isinstance(plugin, types.ModuleType):
            what, path = plugin.__name__, getattr(plugin, "__file__", None)
        else:
            cls = type(plugin)
            module = sys.modules.get(cls.__module__)
            if module is not None and any(module is o for o in ours):
                continue
            what = cls.__module__ + "." + cls.__name__
            path = getattr(module, "__file__", None)
        found.append(what + " @ " + _where(path))
    return sorted(found)


def _census(config):
    ini = getattr(config, "inipath", None) or getattr(config, "inifile", None)
    root = getattr(config, "rootpath", None) or getattr(config, "rootdir", None)
    values = {}
    try:
        for name in config.inicfg:
            values[str(name)] = str(config.inicfg[name])
    except Exception:
        values = {"?": "unreadable"}
    return {
        "event": "census",
        "plugins": _plugins(config),
        # the file's values are compared, not its bytes: the rest is the project's
        "inifile": _where(ini, digest=False) if ini else None,
        "rootdir": _where(root, digest=False) if root else None,
        "ini": values,
    }


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    config = session.config
    if getattr(config, "_swegreen_session", None) != 1:
        return
    if not _is_pytest_itself():
        with contextlib.suppress(Exception):
            _emit(_census(config))
    if os.environ.get("SWEGREEN_CENSUS") == "1":
        # the base commit's census (the engine's own run, before any patch): no test runs
        pytest.exit("swegreen: census taken")
    if not _is_pytest_itself():
        _state["baseline"] = _hookimpls(config)
        _audit(config, "configuration")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtestloop(session):
    _audit(session.config, "collection")
    yield


def pytest_runtest_logreport(report):
    event = {
        "event": "test",
        "nodeid": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "xfail": hasattr(report, "wasxfail"),
    }
    raised = getattr(report, "_swegreen_raised", None)
    if raised is not None:
        event["raised"] = raised
    _emit(event)


def _unwrapped(obj):
    func = getattr(obj, "__func__", obj)
    return (id(func), id(getattr(func, "__code__", None)))


@pytest.hookimpl(hookwrapper=True)
def pytest_itemcollected(item):
    """The function each test item was collected with, before any other hook sees it."""
    with contextlib.suppress(Exception):
        _state["items"][item.nodeid] = _unwrapped(item.obj)
    yield


def _swapped(item):
    """How the item no longer runs what was collected (None: it does)."""
    if "runtest" in getattr(item, "__dict__", {}):
        return "its runtest was replaced"
    collected = _state["items"].get(item.nodeid)
    try:
        now = _unwrapped(item.obj)
    except Exception:
        return None
    if collected is not None and now[0] != collected[0]:
        return "its test function was swapped"
    if collected is not None and now[1] != collected[1]:
        return "its test function's code was replaced"
    try:
        return _not_compiled_from_its_file(item)
    except Exception:
        return None


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_protocol(item, nextitem):
    if _state["baseline"] is not None:
        swapped = _swapped(item)
        if swapped is not None:
            what = "test item " + item.nodeid + ": " + swapped
            if what not in _state["told"]:
                _state["told"].add(what)
                _emit({"event": "tamper", "what": what, "when": "collection"})
    yield
    _audit(item.config, item.nodeid)


def _outcome_exceptions():
    import unittest

    found = [unittest.SkipTest]
    for name in ("skip", "xfail"):
        exc = getattr(getattr(pytest, name, None), "Exception", None)
        if exc is not None:
            found.append(exc)
    return tuple(found)


def _marked(item, kind):
    names = ("xfail",) if kind == "xfail" else ("skip", "skipif")
    for name in names:
        get = getattr(item, "get_closest_marker", None)
        if get is not None and get(name) is not None:
            return True
        if get is None and name in getattr(item, "keywords", {}):
            return True
    return False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skip or xfail raised while the test ran: where from, and whether the test
    carries the marker for it (the engine tells an outcome the tests chose from one the
    code under test produced)."""
    outcome = yield
    excinfo = getattr(call, "excinfo", None)
    if excinfo is None or not _REPO:
        return
    try:
        if not isinstance(excinfo.value, _outcome_exceptions()):
            return
        kind = "xfail" if type(excinfo.value).__name__ == "XFailed" else "skip"
        files = []
        tb = excinfo.tb
        while tb is not None:
            path = tb.tb_frame.f_code.co_filename
            if _inside(path, _REPO):
                rel = os.path.relpath(os.path.realpath(path), os.path.realpath(_REPO))
                if not files or files[-1] != rel:
                    files.append(rel)
            tb = tb.tb_next
        report = outcome.get_result()
        report._swegreen_raised = {"kind": kind, "marked": _marked(item, kind), "files": files}
    except Exception:
        pass


@pytest.hookimpl(hookwrapper=True)
def pytest_sessionfinish(session, exitstatus):
    yield
    config = session.config
    number = getattr(config, "_swegreen_session", None)
    if number is None:
        return
    _audit(config, "session finish")
    status = getattr(session, "exitstatus", exitstatus)
    try:
        status = int(status)
    except (TypeError, ValueError):
        status = -1
    _emit({"event": "finish", "session": number, "status": status})
