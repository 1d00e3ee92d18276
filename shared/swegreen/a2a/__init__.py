"""The A2A client side: talking to participants (dialects, polling, parts)."""
