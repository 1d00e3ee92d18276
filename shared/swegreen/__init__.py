"""swegreen: a SWE-bench Verified evaluator (AgentBeats green agent) with the official grader."""

__version__ = "0.1.0"
