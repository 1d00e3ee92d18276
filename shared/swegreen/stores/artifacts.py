"""Where a run's files live, and the local-disk artifact store.

Layout (relative to the artifact root)::

    <run_id>/run.json                     provenance of the run
    <run_id>/results.json                 AgentBeats shape: {"participants", "results": [row]}
    <run_id>/instances.jsonl              one result row per instance
    <run_id>/run_report.json              the official run-level report (resolved_ids, ...)
    <run_id>/report.html                  the run for people: one self-contained page
    <run_id>/instances/<id>/patch.diff    the patch that was evaluated
    <run_id>/instances/<id>/eval.sh       the script that ran the tests
    <run_id>/instances/<id>/test_output.txt   stdout+stderr of eval.sh, in order
    <run_id>/instances/<id>/run_instance.log  apply chain and phases
    <run_id>/instances/<id>/report.json   the official harness's report shape
    <run_id>/instances/<id>/result.json   this row, as stored
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

from swegreen.core.ids import check_id
from swegreen.core.ports import ArtifactStore
from swegreen.core.scrub import Scrub

PATCH = "patch.diff"
EVAL_SCRIPT = "eval.sh"
TEST_OUTPUT = "test_output.txt"
TEST_RECORD = "test_record.jsonl"  # what pytest itself recorded (recorder.py)
BASE_CENSUS = "base_census.json"  # what configures pytest's session on the base commit
REGRESSION_OUTPUT = "regression_output.txt"  # --regression-check: the patch's wider run
INSTANCE_LOG = "run_instance.log"
TRANSCRIPT = "interaction.json"  # the interactive mode's commands and what they printed
REPORT = "report.json"
RESULT = "result.json"
RUN_INFO = "run.json"
RESULTS = "results.json"
RESULT_PAGES = "results/"  # results.json in pages of a few MB: "results/<n>.json", from 1
RUN_REPORT = "run_report.json"  # the official harness's run-level report (publish.run_report)
REPORT_HTML = "report.html"  # the run for people (reports/html.py)
INSTANCES = "instances.jsonl"


def instance_key(run_id: str, instance_id: str, name: str) -> str:
    # Checked where they enter too (flags, requests, files): this is the last line.
    check_id(run_id, "run id")
    check_id(instance_id, "instance id")
    return f"{run_id}/instances/{instance_id}/{name}"


def run_key(run_id: str, name: str) -> str:
    check_id(run_id, "run id")
    return f"{run_id}/{name}"


@functools.cache
def _umask() -> int:
    """The process's umask, read once and without changing it (``os.umask`` sets it to
    read it, which other threads would see)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def atomic_write(path: Path, data: bytes) -> None:
    """Write via a temporary file and rename, so a crash never leaves half a file. The file
    gets the mode a plain ``open`` would give it (``mkstemp`` makes it 0600: results nobody
    else could read, unlike the rest of the run's files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class LocalArtifacts:
    """An ``ArtifactStore`` on a local directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise ValueError(f"artifact key {key!r} leaves the artifact root")
        return path

    def write_text(self, key: str, text: str) -> None:
        atomic_write(self._path(key), text.encode("utf-8", "surrogateescape"))

    def read_text(self, key: str) -> str | None:
        try:
            return self._path(key).read_text(encoding="utf-8", errors="surrogateescape")
        except FileNotFoundError:
            return None

    def exists(self, key: str) -> bool:
        return self._path(key).exists()

    def location(self, key: str) -> str:
        return str(self._path(key))


class ScrubbedArtifacts:
    """An ``ArtifactStore`` that redacts the host's secrets from every text it writes
    (test output, logs, scripts, rows): whatever a test or a build printed of them."""

    def __init__(self, inner: ArtifactStore, scrub: Scrub) -> None:
        self.inner = inner
        self.scrub = scrub

    def write_text(self, key: str, text: str) -> None:
        self.inner.write_text(key, self.scrub(text))

    def read_text(self, key: str) -> str | None:
        return self.inner.read_text(key)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def location(self, key: str) -> str:
        return self.inner.location(key)
