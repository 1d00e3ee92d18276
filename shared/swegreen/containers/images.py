"""Instance images: found or pulled once, with their digest, never past the disk reserve.

AgentBeats' Docker gateway lets a green pull and inspect images but not list or remove
them, so every pulled image stays on the runner's disk until the shard ends. Pulls are
made one at a time (each checks the free disk first) and may run ahead of the rows that
need them (``prefetch``), so a row's pull overlaps the rows before it.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import APIError, ImageNotFound, NotFound

from swegreen.core.errors import DiskFull, ImageUnavailable

GIB = 1024**3


@dataclass(frozen=True)
class Image:
    name: str
    id: str
    digest: str | None  # the registry digest (name@sha256:...); None for an image built here
    size_bytes: int
    pulled: bool  # pulled for this run (False: it was already there)
    pull_seconds: float = 0.0

    def provenance(self) -> dict[str, object]:
        return {
            "image": self.name,
            "image_id": self.id,
            "image_digest": self.digest,
            "image_bytes": self.size_bytes,
            "image_pulled": self.pulled,
        }


def free_bytes_at(client: docker.DockerClient) -> Callable[[], int]:
    """Where to read the free disk: the daemon's data root when it is on this machine's
    filesystem (a local daemon), else this container's root (on a runner, its overlay sits
    on the same disk as the images)."""
    root = "/"
    try:
        data_root = client.info().get("DockerRootDir") or ""
    except APIError:
        data_root = ""
    if data_root and Path(data_root).is_dir():
        root = data_root
    return lambda: shutil.disk_usage(root).free


class Images:
    """The images a run needs. ``pull``: ``missing`` (the official harness's way: use a
    local image, else pull), ``always`` (pull to refresh ``:latest``) or ``never``."""

    def __init__(
        self,
        client: docker.DockerClient,
        *,
        pull: str = "missing",
        reserve_bytes: int = 10 * GIB,
        free_bytes: Callable[[], int] | None = None,
    ) -> None:
        self.client = client
        self.pull_policy = pull
        self.reserve_bytes = reserve_bytes
        self._free_bytes = free_bytes or free_bytes_at(client)
        self._tasks: dict[str, asyncio.Task[Image]] = {}
        self._one_pull = asyncio.Lock()

    async def get(self, name: str) -> Image:
        """The image, pulled if needed; ``ImageUnavailable`` / ``DiskFull`` if it cannot be."""
        task = self._tasks.get(name)
        if task is None or (task.done() and task.exception() is not None):
            task = self._tasks[name] = asyncio.create_task(self._obtain(name))
        return await asyncio.shield(task)

    def prefetch(self, names: Iterable[str]) -> None:
        """Start getting these images now (in order, one pull at a time); a failure is
        reported to the row that needs the image, not here."""
        for name in names:
            if name not in self._tasks:
                task = self._tasks[name] = asyncio.create_task(self._obtain(name))
                task.add_done_callback(lambda t: t.cancelled() or t.exception())

    def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()

    async def _obtain(self, name: str) -> Image:
        if self.pull_policy != "always":
            found = await asyncio.to_thread(self._inspect, name)
            if found is not None:
                return found
        if self.pull_policy == "never":
            raise ImageUnavailable(
                f"image {name} is not on the Docker engine and docker_pull is 'never'; "
                "pull it first or set docker_pull = 'missing'",
                permanent=True,
            )
        async with self._one_pull:
            free = await asyncio.to_thread(self._free_bytes)
            if free < self.reserve_bytes:
                raise DiskFull(
                    f"only {free / GIB:.1f} GiB of disk is free and the run keeps "
                    f"{self.reserve_bytes / GIB:.1f} GiB in reserve, so {name} is not pulled; "
                    "pulled images cannot be removed through the platform's Docker gateway: "
                    "run fewer rows per shard (more shards), use the smaller images "
                    "(docker_images = 'epoch'), or lower docker_disk_reserve_gb"
                )
            t0 = time.monotonic()
            try:
                await asyncio.to_thread(self._pull, name)
            except (ImageNotFound, NotFound) as exc:
                raise ImageUnavailable(
                    f"image {name} does not exist in its registry ({exc.explanation}); "
                    "check docker_images",
                    permanent=True,
                ) from None
            except APIError as exc:
                raise ImageUnavailable(f"pulling {name} failed: {_why(exc)}") from None
            seconds = time.monotonic() - t0
        found = await asyncio.to_thread(self._inspect, name)
        if found is None:
            raise ImageUnavailable(f"{name} was pulled but the engine does not have it")
        return Image(found.name, found.id, found.digest, found.size_bytes, True, seconds)

    def _inspect(self, name: str) -> Image | None:
        try:
            attrs = self.client.api.inspect_image(name)
        except (ImageNotFound, NotFound):
            return None
        repo = split_tag(name)[0]
        digests = [d for d in attrs.get("RepoDigests") or [] if d.split("@")[0] == repo]
        return Image(
            name,
            attrs["Id"],
            (digests or attrs.get("RepoDigests") or [None])[0],
            int(attrs.get("Size") or 0),
            False,
        )

    def _pull(self, name: str) -> None:
        repository, tag = split_tag(name)
        # The low-level call: images.pull would list the repository's tags afterwards,
        # a call the platform's gateway refuses. Errors arrive in the progress stream.
        for event in self.client.api.pull(repository, tag=tag, stream=True, decode=True):
            if isinstance(event, dict) and event.get("error"):
                raise APIError(str(event["error"]), explanation=str(event["error"]))


def split_tag(name: str) -> tuple[str, str]:
    """``repo:tag`` -> (repo, tag); a name without a tag means ``latest``."""
    head, _, last = name.rpartition("/")
    if ":" in last:
        last, tag = last.split(":", 1)
    else:
        tag = "latest"
    return (f"{head}/{last}" if head else last), tag


def _why(exc: APIError) -> str:
    said = str(exc.explanation or exc)
    if "toomanyrequests" in said or "rate limit" in said.lower():
        return (
            f"{said} (the registry's rate limit: Docker Hub allows 10 anonymous pulls an "
            "hour per address; docker_images = 'epoch' pulls from ghcr.io instead)"
        )
    if "no such host" in said or "dial tcp" in said or "timeout" in said.lower():
        return f"{said} (the Docker engine cannot reach the registry from this host)"
    return said
