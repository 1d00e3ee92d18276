"""The AgentBeats green agent: an A2A server that asks participants for patches over A2A
and evaluates them with the engine."""
