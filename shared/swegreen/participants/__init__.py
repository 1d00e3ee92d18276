"""Reference participants: real A2A servers used to validate the whole chain (gold, empty),
as a baseline (llm), and as deterministic fakes for tests (scripted)."""
