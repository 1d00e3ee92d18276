"""swegreen's start-up hook for the runners it records (django's, sympy's).

Written as ``sitecustomize.py`` into a read-only directory of the engine's at the end of
the test command's PYTHONPATH. Python imports it when it starts, after the environment's
own ``.pth`` files (which the environment guard vouches for) and before any script or
project module. It imports the run's recorder (its module name in
``SWEGREEN_RUNNER_MODULE``, removed as it is read, so that only the first Python process
of the test command records), then whatever ``sitecustomize`` the environment itself
would have run, so that nothing else changes. Python 3.5+.
"""

import os
import sys


def _load():
    name = os.environ.pop("SWEGREEN_RUNNER_MODULE", "")
    if name:
        __import__(name)


def _chain():
    """The next ``sitecustomize`` on sys.path, as Python would have found it without us."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.realpath(__file__))
    rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_load()
_chain()
