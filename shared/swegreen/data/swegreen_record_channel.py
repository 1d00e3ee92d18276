"""swegreen's record channel: the part both recorders share (the pytest plugin and the
runner recorder). The engine writes it at the top of each recorder's module, so that the
module stays one file under a name of the run's own.

Each event is a JSON line signed with HMAC-SHA256 (its counter and pid inside) with a key
the engine hands over once: through an inherited pipe (``SWEGREEN_RECORD_KEY_FD``), or in a
container a file removed once read (``SWEGREEN_RECORD_KEY_FILE``). The line goes to the
FIFO ``SWEGREEN_RECORD`` names, or after a mark of the run's own on a copy of stderr taken
at import (``SWEGREEN_RECORD=stderr``), before any capture points descriptor 2 elsewhere.
Python 3.5+: no f-strings, no annotations.
"""

import contextlib
import hashlib
import hmac
import json
import os

_channel = {"fd": None, "seq": 0}


def _take_key():
    """Read the key from its pipe, once, and close it (nothing if it is not a pipe); in a
    container, from the file ``SWEGREEN_RECORD_KEY_FILE`` names, removed once read."""
    import stat

    path = os.environ.pop("SWEGREEN_RECORD_KEY_FILE", "")
    if path:
        try:
            with open(path, "rb") as fh:
                data = fh.read(256)
            os.unlink(path)
        except OSError:
            return b""
        key = data.strip()
        return key if len(key) == 64 else b""
    try:
        fd = int(os.environ.pop("SWEGREEN_RECORD_KEY_FD", ""))
    except ValueError:
        return b""
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return b""  # not ours: left alone
    except OSError:
        return b""
    try:
        os.set_blocking(fd, False)
        data = os.read(fd, 256)
    except OSError:
        return b""
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    key = data.strip()
    return key if len(key) == 64 else b""


_KEY = _take_key()
_PATH = os.environ.pop("SWEGREEN_RECORD", "")
_MARK = os.environ.pop("SWEGREEN_RECORD_MARK", "").encode("ascii", "replace")
_STDERR = None
if _PATH == "stderr":
    with contextlib.suppress(OSError):
        _STDERR = os.dup(2)


def _open_channel():
    """The channel's descriptor (None: no channel or no key; nothing is recorded)."""
    if not _PATH or not _KEY:
        return None
    if _PATH == "stderr":
        return _STDERR
    try:
        fd = os.open(_PATH, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return None
    import fcntl

    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
    return fd


def _emit(event):
    fd = _channel["fd"]
    if fd is None:
        return
    _channel["seq"] += 1
    event = dict(event, seq=_channel["seq"], pid=os.getpid())
    body = json.dumps(event, sort_keys=True)
    mac = hmac.new(_KEY, body.encode("utf-8"), hashlib.sha256).hexdigest()
    line = _MARK + (json.dumps({"e": body, "mac": mac}) + "\n").encode("utf-8")
    with contextlib.suppress(OSError):
        os.write(fd, line)
