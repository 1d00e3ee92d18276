"""The pure core: rows, task messages, patches, grading, classification, metrics,
configuration and the ports the adapters implement. Imports nothing else of swegreen."""
