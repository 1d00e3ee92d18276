"""Environments: recipes' catalog, interpreters, the dated package index,
locks, source builds, system packages, services the tests call."""
