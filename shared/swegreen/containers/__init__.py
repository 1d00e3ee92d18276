"""Docker Engine adapters: a row's container, instance images, the daemon (the Docker
backend, evaluation/docker_backend.py, is built on them)."""
