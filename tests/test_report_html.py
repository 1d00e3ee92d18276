"""The run's HTML report, rendered by a real browser (Chromium, headless, from Debian's
packages): a real run of the sample's crafted predictions, which reach every status."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from swegreen.core.classify import Status
from swegreen.sample import SampleBenchmark
from tests.conftest import RunSample

from .test_cli import cli


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:  # scripts/install-system-deps.sh installs it
        pytest.fail("chromium is not installed: run scripts/install-system-deps.sh")
    return found


def browse(page: Path, tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """Chromium with no network at all: the page must need nothing from outside."""
    return subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",  # as root in CI; the page is our own
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
            "--proxy-server=127.0.0.1:9",  # any request to the network fails
            "--virtual-time-budget=2000",
            *flags,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_run_writes_a_report_a_browser_shows(
    run_sample: RunSample, sample: SampleBenchmark, tmp_path: Path
) -> None:
    outcome = run_sample(str(sample.crafted), run_id="html")
    page = tmp_path / "results" / "html" / "report.html"
    assert page.exists()
    html = page.read_text()
    # nothing to fetch at view time: no script, stylesheet, image or font from anywhere
    for fetches in ("<script", "<link", "src=", 'href="http', "url(", "@import"):
        assert fetches not in html, fetches

    dom = browse(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = dom.stdout
    assert "swegreen run html" in text
    # the leaderboard, each status's share, and every instance with its files
    assert f"<b>{len(outcome.results)}</b>" in text
    ran = sum(r.tests_ran for r in outcome.results)
    assert f"<b>{ran} of {len(outcome.results)}</b>" in text  # rows whose tests ran
    assert 0 < ran < len(outcome.results)  # the crafted predictions hold both kinds
    for status in Status:
        assert f">{status.value}<" in text
    for row in outcome.results:
        assert f'id="{row.instance_id}"' in text
        for name in ("patch.diff", "test_output.txt", "report.json", "result.json"):
            # a file is linked if and only if the run wrote it
            linked = f'href="instances/{row.instance_id}/{name}"' in text
            assert linked == (page.parent / "instances" / row.instance_id / name).exists()
        assert f'href="instances/{row.instance_id}/result.json"' in text
    # per repository: its resolved rate with Wilson's interval; a timing plot, a bar a row
    from swegreen.core.intervals import as_text, wilson

    for repo in {r.repo for r in outcome.results}:
        mine = [r for r in outcome.results if r.repo == repo]
        hits = sum(r.status is Status.RESOLVED for r in mine)
        assert f'<td>{repo}</td><td class="n">{len(mine)}</td>' in text
        assert f"{hits / len(mine):.1%} {as_text(wilson(hits, len(mine)))}" in text
    # which tests a row broke, where its verdict rests on them
    for row in outcome.results:
        if row.status in (Status.BREAKING_RESOLVED, Status.REGRESSION) and row.p2p_failing:
            assert f"P2P broken ({len(row.p2p_failing)}): {row.p2p_failing[0]}" in text
    assert any(r.status is Status.BREAKING_RESOLVED and r.p2p_failing for r in outcome.results)
    # what each interval is, and what "P2P kept without running" means, said on the page
    assert "Bracketed: 95% intervals." in text and "P2P kept without running: P2P" in text
    assert text.count("<rect") >= 2 * len(outcome.results)

    shot = tmp_path / "report.png"
    taken = browse(page, tmp_path, f"--screenshot={shot}", "--window-size=1200,1400")
    assert taken.returncode == 0 and shot.stat().st_size > 10_000, taken.stderr[-2000:]


def test_report_html_renders_any_stored_run(
    tmp_path: Path, session_cache: Path, sample: SampleBenchmark
) -> None:
    run = cli(
        "run",
        "--sample",
        "--patches",
        "empty",
        "--max-rows",
        "2",
        "--run-id",
        "again",
        "--no-progress",
        cwd=tmp_path,
        cache=session_cache,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    (tmp_path / "results" / "again" / "report.html").unlink()
    out = cli("report", "--run-id", "again", "--html", cwd=tmp_path, cache=session_cache)
    assert out.returncode == 0, out.stdout + out.stderr
    page = tmp_path / "results" / "again" / "report.html"
    assert f"HTML report: {page}" in " ".join(out.stdout.split())
    dom = browse(page, tmp_path, "--dump-dom")
    assert "swegreen run again" in dom.stdout and "empty_patch" in dom.stdout
    refused = cli("report", "--html", cwd=tmp_path, cache=session_cache)
    assert refused.returncode == 2 and "needs --run-id" in refused.stdout
