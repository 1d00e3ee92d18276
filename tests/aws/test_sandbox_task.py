"""The evaluate task's adapters, on real files, real git and a real HTTP server: the shared
cache is only ever read (what it lacks is a row's failure, with the reason), and the
pre-signed URLs are the only way out, for this row's outputs only."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from swegreen import artifacts as art
from swegreen.aws.pipeline import SANDBOX_OUTPUTS
from swegreen.aws.presigned import PresignedUrlError, UploadArtifacts
from swegreen.aws.sandbox_task import main, sandbox_config
from swegreen.aws.shared_cache import SharedEnvs, SharedRepos
from swegreen.config import EvalConfig
from swegreen.environments import COMPLETE, ENV_INFO
from swegreen.errors import EnvSetupFailed, RepoUnavailable
from swegreen.interpreters import InterpreterSearch
from swegreen.recipes import Recipe
from tests.helpers import make_repo

RECIPE = Recipe(python="3.11", test_cmd="pytest")
ROW = art.instance_key("run", "o__r-1", "")


class Bucket(BaseHTTPRequestHandler):
    """Stands in for S3 behind pre-signed URLs: PUT stores, GET returns; a path can be
    told to answer some status codes first."""

    objects: ClassVar[dict[str, bytes]] = {}
    answers: ClassVar[dict[str, list[tuple[int, bytes]]]] = {}

    def _answer(self) -> bool:
        queued = self.answers.get(self.path)
        if not queued:
            return False
        status, body = queued.pop(0)
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return True

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if not self._answer():
            self.objects[self.path] = body
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def bucket() -> Iterator[str]:
    Bucket.objects, Bucket.answers = {}, {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), Bucket)  # bound: ready to accept
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join(timeout=10)


def uploads(base: str) -> dict[str, str]:
    return {name: f"{base}/{name}?X-Amz-Signature=s" for name in SANDBOX_OUTPUTS}


def test_outputs_go_to_their_own_urls_and_nothing_else_can_be_written(bucket: str) -> None:
    with httpx.Client(timeout=10) as http:
        store = UploadArtifacts(http, ROW, uploads(bucket), {art.PATCH: "the patch"})
        store.write_text(ROW + art.TEST_OUTPUT, "PASSED t1\n\udcff")
        store.write_text(ROW + art.PATCH, "the patch")  # already stored: no upload
        assert Bucket.objects == {
            f"/{art.TEST_OUTPUT}?X-Amz-Signature=s": "PASSED t1\n\udcff".encode(
                "utf-8", "surrogateescape"
            )
        }
        assert store.read_text(ROW + art.TEST_OUTPUT) == "PASSED t1\n\udcff"
        assert store.read_text(ROW + art.PATCH) == "the patch"
        assert store.read_text(ROW + art.REPORT) is None
        with pytest.raises(ValueError, match=r"no upload URL for 'patch\.diff'.*SANDBOX_OUTPUTS"):
            store.write_text(ROW + art.PATCH, "another patch")
        with pytest.raises(ValueError, match=r"no upload URL for 'notes\.txt'"):
            store.write_text(ROW + "notes.txt", "x")
        other_row = art.instance_key("run", "o__r-2", art.TEST_OUTPUT)
        with pytest.raises(ValueError, match="not one of this row's"):
            store.write_text(other_row, "x")
        with pytest.raises(ValueError, match="not one of this row's"):
            store.write_text(ROW + "../o__r-2/" + art.RESULT, "x")


def test_a_refused_url_says_why_and_a_transient_error_is_retried(bucket: str) -> None:
    expired = b"<Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message>"
    Bucket.answers = {
        f"/{art.REPORT}?X-Amz-Signature=s": [(403, expired)],
        f"/{art.RESULT}?X-Amz-Signature=s": [(503, b"SlowDown")],
    }
    with httpx.Client(timeout=10) as http:
        store = UploadArtifacts(http, ROW, uploads(bucket))
        with pytest.raises(PresignedUrlError, match=r"PUT \(403\).*ExpiredToken.*docs/aws.md"):
            store.write_text(ROW + art.REPORT, "{}")
        store.write_text(ROW + art.RESULT, "{}")  # after one 503
    assert Bucket.objects == {f"/{art.RESULT}?X-Amz-Signature=s": b"{}"}


def snapshot(root: Path) -> dict[str, tuple[int, float]]:
    return {
        str(p.relative_to(root)): (p.lstat().st_mode, p.lstat().st_mtime)
        for p in sorted(root.rglob("*"))
    }


def test_an_environment_is_localized_from_the_shared_cache_never_built(tmp_path: Path) -> None:
    """What an evaluation's view copies (bin/, site-packages) becomes a private copy; what
    it shares (the standard library, the sysroot) stays a link to the read-only original."""
    shared, local = tmp_path / "shared" / "envs", tmp_path / "local" / "envs"
    key = RECIPE.env_key("")
    built = shared / key
    stdlib = built / "py" / "lib" / "python3.11"
    (built / "py" / "bin").mkdir(parents=True)
    (stdlib / "site-packages" / "pkg").mkdir(parents=True)
    (built / "sysroot" / "usr" / "lib").mkdir(parents=True)
    (built / "py" / "bin" / "python3.11").write_text("#!interpreter")
    (built / "py" / "bin" / "python").symlink_to("python3.11")
    (built / "py" / "pyvenv.cfg").write_text("home = /opt/python\n")
    (stdlib / "os.py").write_text("# the standard library\n")
    (stdlib / "site-packages" / "pkg" / "__init__.py").write_text("VERSION = 1\n")
    os.utime(stdlib / "site-packages" / "pkg" / "__init__.py", (1_000_000_000, 1_000_000_000))
    (built / ENV_INFO).write_text(json.dumps({"runtime_env": {"LOCPATH": "/x"}}))
    (built / COMPLETE).write_text("")
    before = snapshot(shared)
    envs = SharedEnvs(local, shared, InterpreterSearch.from_environ({}), {})
    env = asyncio.run(envs.ensure(RECIPE, "o/r 1.0"))
    assert env.root == local / key and env.prefix == local / key / "py"
    assert env.runtime_env == {"LOCPATH": "/x"}
    copy = local / key / "py"
    assert os.readlink(copy / "bin" / "python") == "python3.11"  # links stay links
    for private in ("bin/python3.11", "pyvenv.cfg", "lib/python3.11/site-packages/pkg"):
        assert not (copy / private).is_symlink(), private
    installed = copy / "lib" / "python3.11" / "site-packages" / "pkg" / "__init__.py"
    assert installed.stat().st_mtime == 1_000_000_000  # byte-compiled files stay valid
    assert (copy / "lib" / "python3.11" / "os.py").readlink() == stdlib / "os.py"
    assert (local / key / "sysroot").readlink() == built / "sysroot"
    assert snapshot(shared) == before
    assert [p.name for p in local.iterdir()] == [key]  # no temporary copy left behind
    # Another key, whose build failed in the prepare task: the row's failure, with its log.
    other = Recipe(python="3.9", test_cmd="pytest")
    (shared / f"{other.env_key('')}.failed.log").write_text("pip: no matching distribution\n")
    before = snapshot(shared)
    with pytest.raises(EnvSetupFailed, match="not in the shared cache: its build failed") as exc:
        asyncio.run(envs.ensure(other, "o/r 2.0"))
    assert "no matching distribution" in exc.value.log_tail
    with pytest.raises(EnvSetupFailed, match="see the prepare task's log"):
        asyncio.run(envs.ensure(Recipe(python="3.8", test_cmd="pytest"), "o/r 3.0"))
    assert snapshot(shared) == before


def test_the_shared_git_cache_is_read_never_fetched(tmp_path: Path) -> None:
    upstream = tmp_path / "upstream"
    head = make_repo(upstream, {"a.py": "x = 1\n"})
    shared = tmp_path / "shared" / "repos"
    shared.mkdir(parents=True)
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(upstream), str(shared / "o__r.git")], check=True
    )
    before = snapshot(shared)
    repos = SharedRepos(tmp_path / "local" / "repos", shared, str(upstream), {"PATH": os.defpath})
    assert asyncio.run(repos.ensure_commit("o/r", head)) == shared / "o__r.git"
    checkout = tmp_path / "work" / "repo"
    asyncio.run(repos.checkout("o/r", head, checkout))
    assert (checkout / "a.py").read_text() == "x = 1\n"
    missing = "0" * 40
    with pytest.raises(RepoUnavailable, match=f"{missing} is not in the shared git cache"):
        asyncio.run(repos.ensure_commit("o/r", missing))
    with pytest.raises(RepoUnavailable, match="not in the shared git cache"):
        asyncio.run(repos.ensure_commit("o/other", head))
    assert snapshot(shared) == before  # no lock, no fetch, no new mirror


def test_the_task_definition_chooses_the_isolation_and_a_bad_phase_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {"SWEGREEN_CONFIG": json.dumps({"max_attempts": 2}), "SWEGREEN_ISOLATION": "process"}
    config = sandbox_config(env)
    assert config.max_attempts == 2
    if "isolation" in EvalConfig.model_fields:  # the task's mode wins over the request's
        request = {"max_attempts": 2, "isolation": "bwrap"}
        assert sandbox_config({**env, "SWEGREEN_CONFIG": json.dumps(request)}).isolation == (
            "process"
        )
    with pytest.raises(SystemExit) as exit_:
        main(["evaluate", "now"])
    assert exit_.value.code == 2
    assert (
        "usage: python -m swegreen.aws.sandbox_task [prepare|evaluate]" in capsys.readouterr().err
    )
