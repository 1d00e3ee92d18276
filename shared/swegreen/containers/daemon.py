"""Reaching a Docker engine: the socket Amber mounts, ``DOCKER_HOST``, or the default."""

from __future__ import annotations

from collections.abc import Mapping

import docker
from docker.errors import DockerException

# Image pulls and long execs go through one client: its HTTP timeout must outlast them.
CLIENT_TIMEOUT = 3600


def connect(host_env: Mapping[str, str], timeout: int = CLIENT_TIMEOUT) -> docker.DockerClient:
    """A client for ``DOCKER_HOST`` (else the default socket); it has not called anything yet."""
    return docker.DockerClient.from_env(environment=dict(host_env), timeout=timeout)


def answers(host_env: Mapping[str, str]) -> str | None:
    """None when a daemon answers a ping, else why not (for ``auto`` and error messages)."""
    try:
        client = connect(host_env, timeout=10)
    except DockerException as exc:
        return f"no Docker client could be made: {exc}"
    try:
        client.ping()
    except Exception as exc:  # any transport failure means: not here
        return f"no Docker daemon answers at {client.api.base_url}: {exc}"
    finally:
        client.close()
    return None
