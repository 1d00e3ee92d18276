"""swegreen: a SWE-bench Verified evaluator (AgentBeats green agent) with the official grader."""

__version__ = "0.1.0"

# The official harness without its package's start-up (about 1 s of imports in every
# process): before any module of swegreen imports a part of it.
from swegreen.core import upstream as _upstream

_upstream.register()
