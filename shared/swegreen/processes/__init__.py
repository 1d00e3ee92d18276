"""Processes and file locks on this host (the event loop never blocks on them)."""
