"""What a run publishes: AgentBeats results, the HTML report, the console."""
