"""swegreen's pytest recorder: each test's outcome, written where the test cannot rewrite it.

The sandbox's test phase loads this module as a pytest plugin (``-p _swegreen_recorder``)
from the environment's site-packages. It prints nothing and changes nothing; it appends
one JSON line per event to the record channel named by SWEGREEN_RECORD (a FIFO that the
engine reads from outside the sandbox), so that what a test prints on stdout can be
checked against what pytest itself saw. Only the session rooted at the repository under
test records (not pytester's inner sessions, not xdist workers).

Kept compatible with every Python and pytest a SWE-bench environment has (3.5+, pytest
3+): no f-strings, no annotations.
"""

import contextlib
import json
import os

import pytest

_state = {"fd": None}


def _open():
    path = os.environ.get("SWEGREEN_RECORD")
    repo = os.environ.get("SWEGREEN_REPO")
    if not path or not repo or os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return None
    import fcntl

    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
    return fd


def _emit(event):
    fd = _state["fd"]
    if fd is None:
        return
    line = (json.dumps(event, sort_keys=True) + "\n").encode("utf-8")
    with contextlib.suppress(OSError):
        os.write(fd, line)


def _inside(root, repo):
    root, repo = os.path.realpath(root), os.path.realpath(repo)
    return root == repo or root.startswith(repo + os.sep)


def pytest_configure(config):
    root = str(getattr(config, "rootdir", ""))
    repo = os.environ.get("SWEGREEN_REPO", "")
    if not root or not repo or not _inside(root, repo):
        return
    _state["fd"] = _open()
    _emit({"event": "start", "pid": os.getpid()})


def pytest_runtest_logreport(report):
    _emit(
        {
            "event": "test",
            "pid": os.getpid(),
            "nodeid": report.nodeid,
            "when": report.when,
            "outcome": report.outcome,
            "xfail": hasattr(report, "wasxfail"),
        }
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_sessionfinish(session, exitstatus):
    yield
    status = getattr(session, "exitstatus", exitstatus)
    try:
        status = int(status)
    except (TypeError, ValueError):
        status = -1
    _emit({"event": "finish", "pid": os.getpid(), "status": status})
