"""Where runs and rows are kept: SQLite, artifact files."""
