"""Git: repository caches and mirrors, history stores, the engine's own git."""
