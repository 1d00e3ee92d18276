"""The command line, as people run it: real processes, real files, a real kill mid-run."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swegreen.sample import SampleBenchmark

from .conftest import wait_until
from .helpers import read_jsonl

SHARED_DATASET = Path(__file__).resolve().parents[2] / "shared" / "data" / "swebench_verified.jsonl"


def cli(
    *args: str, cwd: Path, cache: Path, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "120"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "swegreen",
            *args,
            "--cache-dir",
            str(cache),
            "--output-dir",
            str(cwd / "results"),
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_run_prints_the_leaderboard_and_writes_agentbeats_results(
    tmp_path: Path, session_cache: Path, sample: SampleBenchmark
) -> None:
    out = cli(
        "run",
        "--sample",
        "--patches",
        "gold",
        "--max-rows",
        "2",
        "--run-id",
        "cli-gold",
        "--no-progress",
        cwd=tmp_path,
        cache=session_cache,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Leaderboard: cli-gold" in out.stdout and "resolved" in out.stdout
    results = json.loads((tmp_path / "results" / "cli-gold" / "results.json").read_text())
    assert set(results) == {"participants", "results"}
    assert results["results"][0]["total_instances"] == 2
    assert results["results"][0]["resolved_pct"] == 1.0
    # the official harness's run-level report, beside it
    report = json.loads((tmp_path / "results" / "cli-gold" / "run_report.json").read_text())
    ids = sorted(r["instance_id"] for r in results["results"][0]["instances"])
    assert report["schema_version"] == 2
    assert report["resolved_ids"] == report["completed_ids"] == report["submitted_ids"] == ids
    assert (report["total_instances"], report["error_ids"], report["incomplete_ids"]) == (2, [], [])
    # pytest's own record (the log's second witness) was written in a real CLI run: its key
    # reached the recorder through the launch (an empty record once hid a lost key)
    for iid in ids:
        record = tmp_path / "results" / "cli-gold" / "instances" / iid / "test_record.jsonl"
        events = [json.loads(json.loads(line)["e"]) for line in record.read_text().splitlines()]
        assert {e["event"] for e in events} >= {"start", "test", "finish"}, iid
    # every file of the run is as readable as a file the user writes (not mkstemp's 0600)
    umask = os.umask(0)
    os.umask(umask)
    modes = {
        f.relative_to(tmp_path).as_posix(): oct(f.stat().st_mode & 0o777)
        for f in (tmp_path / "results").rglob("*")
        if f.is_file()
    }
    assert set(modes.values()) == {oct(0o666 & ~umask)}, modes


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--patches", "gold", "--max-rows", "0"], "max_rows must be -1"),
        (["--patches", "gold", "--instance-ids", "sample__nope-1"], "unknown instance id"),
        (["--patches", "missing.jsonl"], "predictions file missing.jsonl does not exist"),
        (
            ["--patches", "gold", "--scenario", "conf/scenario.toml"],
            "unknown config key 'max_rowz'",
        ),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(
    tmp_path: Path, session_cache: Path, sample: SampleBenchmark, args: list[str], message: str
) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "scenario.toml").write_text("[config]\nmax_rowz = 3\n")
    out = cli("run", "--sample", "--no-progress", *args, cwd=tmp_path, cache=session_cache)
    assert out.returncode == 2
    assert message in " ".join(out.stdout.split())  # rich may wrap long lines


def test_a_run_whose_rows_end_in_error_exits_3_and_says_how_to_retry(
    tmp_path: Path, session_cache: Path, sample: SampleBenchmark
) -> None:
    """Exit 2 means nothing ran; 3 means the run finished but rows are errors (here the
    repository cannot be reached), so a script never takes an all-error run for success;
    the retry it advises (``--retry-errors``) evaluates those rows again."""
    out = cli(
        "run",
        "--sample",
        "--patches",
        "gold",
        "--max-rows",
        "2",
        "--max-attempts",
        "1",
        "--repo-url-template",
        str(tmp_path / "nowhere" / "{name}.git"),
        "--run-id",
        "unreachable",
        "--no-progress",
        cwd=tmp_path,
        cache=tmp_path / "cache",  # no cached clone of the sample's repositories
    )
    assert out.returncode == 3, out.stdout + out.stderr
    said = " ".join(out.stdout.split())
    assert "2 of 2 row(s) ended in error (exit code 3)" in said
    # each reason's fix once, under the table; a clone that failed may pass: a retry
    assert said.count("to fix: repo_unavailable (2: sample__calculator-1") == 1
    assert "cannot clone" in said.split("to fix: repo_unavailable", 1)[1]
    assert "`swegreen run --run-id unreachable --retry-errors` evaluates them again" in said
    rows = read_jsonl(tmp_path / "results" / "unreachable" / "instances.jsonl")
    assert {(r["status"], r["reason"]) for r in rows} == {("error", "repo_unavailable")}
    report = json.loads((tmp_path / "results" / "unreachable" / "run_report.json").read_text())
    assert (
        report["error_ids"] == report["infra_failure_ids"] == sorted(r["instance_id"] for r in rows)
    )
    assert report["completed_ids"] == [] and report["failure_reasons"] == {
        r["instance_id"]: "repo_unavailable" for r in rows
    }

    # Resumed with the repository back: the error rows stand unless asked again, and then
    # only they are evaluated
    def resume(*extra: str) -> subprocess.CompletedProcess[str]:
        return cli(
            "run", "--sample", "--patches", "gold", "--max-rows", "2",
            "--repo-url-template", sample.url_template, "--run-id", "unreachable",
            "--no-progress", *extra, cwd=tmp_path, cache=session_cache,
        )  # fmt: skip

    kept = resume()
    assert kept.returncode == 3, kept.stdout + kept.stderr
    rows = read_jsonl(tmp_path / "results" / "unreachable" / "instances.jsonl")
    assert {(r["status"], r["reason"]) for r in rows} == {("error", "repo_unavailable")}
    retried = resume("--retry-errors")
    assert retried.returncode == 0, retried.stdout + retried.stderr
    rows = read_jsonl(tmp_path / "results" / "unreachable" / "instances.jsonl")
    assert len(rows) == 2 and {r["status"] for r in rows} == {"resolved"}


def test_the_sample_is_named_on_the_command_line_as_a_request_names_it(
    tmp_path: Path, session_cache: Path, sample
) -> None:
    out = cli(
        "run",
        "--dataset",
        "swegreen:sample",
        "--patches",
        "gold",
        "--max-rows",
        "1",
        "--run-id",
        "by-name",
        "--no-progress",
        cwd=tmp_path,
        cache=session_cache,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = read_jsonl(tmp_path / "results" / "by-name" / "instances.jsonl")
    assert [r["status"] for r in rows] == ["resolved"]


def test_a_corrupt_predictions_file_exits_2(tmp_path: Path, session_cache: Path, sample) -> None:
    (tmp_path / "p.jsonl").write_text('{"instance_id": "sample__calculator-1", "model_patch": \n')
    out = cli("run", "--sample", "--patches", "p.jsonl", cwd=tmp_path, cache=session_cache)
    assert out.returncode == 2 and "p.jsonl:1: not valid JSON" in " ".join(out.stdout.split())


def test_reusing_a_run_id_for_other_patches_is_refused(tmp_path: Path, session_cache: Path, sample):
    first = cli(
        "run",
        "--sample",
        "--patches",
        "empty",
        "--max-rows",
        "1",
        "--run-id",
        "same",
        cwd=tmp_path,
        cache=session_cache,
    )
    assert first.returncode == 0
    second = cli(
        "run",
        "--sample",
        "--patches",
        "gold",
        "--max-rows",
        "1",
        "--run-id",
        "same",
        cwd=tmp_path,
        cache=session_cache,
    )
    assert second.returncode == 2 and "choose a new run id" in " ".join(second.stdout.split())


def stored(db: Path, run_id: str) -> dict[str, str]:
    if not db.exists():
        return {}
    with sqlite3.connect(db) as conn:
        try:
            rows = conn.execute(
                "SELECT instance_id, result FROM results WHERE run_id = ?", (run_id,)
            ).fetchall()
        except sqlite3.OperationalError:  # tables not created yet
            return {}
    return {iid: json.loads(r)["finished_at"] for iid, r in rows}


def processes_under(path: Path) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if str(path) in (proc / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def test_a_run_killed_mid_way_resumes_without_losing_or_duplicating_rows(
    tmp_path: Path, session_cache: Path, sample: SampleBenchmark
) -> None:
    args = [
        sys.executable,
        "-m",
        "swegreen",
        "run",
        "--sample",
        "--patches",
        "gold",
        "--run-id",
        "killed",
        "--max-rows",
        "-1",
        "--max-concurrent-rows",
        "1",
        "--no-progress",
        "--cache-dir",
        str(session_cache),
        "--output-dir",
        str(tmp_path / "results"),
    ]
    db = tmp_path / "results" / "swegreen.sqlite"
    proc = subprocess.Popen(
        args, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while len(stored(db, "killed")) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # no chance to clean up
    proc.wait()
    before = stored(db, "killed")
    assert 3 <= len(before) < 8, "the kill should land in the middle of the run"
    # the report shows it unfinished, with the command that resumes it
    listing = " ".join(cli("report", cwd=tmp_path, cache=session_cache).stdout.split())
    assert f"killed not finished gold {len(before)} of 8 rows stored" in listing, listing
    assert "resume: swegreen run --run-id killed" in listing
    # a regrade of it says how many rows it graded, and that the rest have no result yet
    regrade = " ".join(
        cli("regrade", "--run-id", "killed", cwd=tmp_path, cache=session_cache).stdout.split()
    )
    missing = 8 - len(before)
    assert f"re-graded {len(before)} row(s) of killed from saved logs; 0 changed" in regrade
    assert f"({missing} of its 8 rows have no result yet)" in regrade, regrade

    # Nothing the killed run started keeps running (its sandbox dies with it).
    work = session_cache / "work" / "killed"
    for _ in range(100):
        if not processes_under(work):
            break
        time.sleep(0.1)
    assert processes_under(work) == []

    # the run knows its patches, dataset and selection: its id alone resumes it
    out = cli("run", "--run-id", "killed", "--no-progress", cwd=tmp_path, cache=session_cache)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"resumed: {len(before)} row(s) were already stored" in " ".join(out.stdout.split())
    after = stored(db, "killed")
    assert len(after) == 8
    assert {k: after[k] for k in before} == before  # finished rows were not evaluated again
    rows = read_jsonl(tmp_path / "results" / "killed" / "instances.jsonl")
    assert sorted(r["instance_id"] for r in rows) == sorted(after)  # each once
    assert {r["status"] for r in rows} == {"resolved"}


def test_regrade_and_report_read_a_finished_run(tmp_path: Path, session_cache: Path, sample):
    assert (
        cli(
            "run",
            "--sample",
            "--patches",
            "gold",
            "--max-rows",
            "2",
            "--run-id",
            "rg",
            cwd=tmp_path,
            cache=session_cache,
        ).returncode
        == 0
    )
    regrade = cli("regrade", "--run-id", "rg", cwd=tmp_path, cache=session_cache)
    assert regrade.returncode == 0
    assert "re-graded 2 row(s) of rg from saved logs; 0 changed" in regrade.stdout
    assert "no result yet" not in regrade.stdout
    report = cli("report", "--run-id", "rg", cwd=tmp_path, cache=session_cache)
    assert report.returncode == 0 and "Leaderboard: rg (finished)" in report.stdout
    listing = cli("report", cwd=tmp_path, cache=session_cache)
    assert "rg  finished  gold  2 rows  resolved 100.0%" in listing.stdout


@pytest.mark.skipif(
    not SHARED_DATASET.exists(), reason="the team's offline Verified copy is absent"
)
def has_python_for(instance_id: str) -> bool:
    """Whether this machine has the Python the row's recipe asks for."""
    from swegreen.core.dataset import load_dataset
    from swegreen.core.errors import InterpreterNotFound
    from swegreen.environments.catalog import builtin_recipes
    from swegreen.environments.interpreters import InterpreterSearch, find_interpreter

    (instance,) = [
        i for i in load_dataset(str(SHARED_DATASET)).instances if i.instance_id == instance_id
    ]
    version = builtin_recipes().for_instance(instance).python
    try:
        find_interpreter(version, InterpreterSearch.from_environ(os.environ))
    except InterpreterNotFound:
        return False
    return True


def test_real_verified_rows_with_an_unreachable_source_fail_cleanly(
    tmp_path: Path, session_cache: Path
) -> None:
    out = cli(
        "run",
        "--dataset",
        str(SHARED_DATASET),
        "--patches",
        "gold",
        "--max-rows",
        "6",
        "--repos",
        "psf/requests,django/django",
        "--max-attempts",
        "1",
        "--run-id",
        "offline",
        "--repo-url-template",
        "https://github.invalid/{repo}.git",
        "--no-progress",
        cwd=tmp_path,
        cache=session_cache,
    )
    assert out.returncode == 3, out.stdout + out.stderr  # finished, with error rows
    rows = read_jsonl(tmp_path / "results" / "offline" / "instances.jsonl")
    assert len(rows) == 6
    # a row whose Python this machine lacks (these commands download none) says so before
    # any clone; every other row's clone fails
    for row in rows:
        if not has_python_for(row["instance_id"]):
            assert (row["status"], row["reason"]) == ("error", "interpreter_not_found")
            continue
        assert (row["status"], row["reason"], row["error_kind"]) == (
            "error",
            "repo_unavailable",
            "infrastructure",
        )
        assert "cannot clone" in row["detail"] and "github.invalid" in row["detail"]
    assert any(r["reason"] == "repo_unavailable" for r in rows) or not any(
        has_python_for(r["instance_id"]) for r in rows
    )


def test_the_demo_checks_every_sample_verdict(tmp_path: Path, session_cache: Path, sample) -> None:
    out = cli("demo", "--no-progress", cwd=tmp_path, cache=session_cache)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "All sample verdicts are as expected" in " ".join(out.stdout.split())


def test_help_and_version_answer_without_loading_the_grader() -> None:
    """`--help`/`--version` import nothing heavy (swebench pulls datasets and docker), so
    they answer at once; every flag of every command says what it is for, and the commands
    that do not evaluate do not offer evaluation flags."""
    code = (
        "import sys\n"
        "from swegreen.cli import parser\n"
        "for argv in (['--version'], ['run', '--help'], ['report', '--help']):\n"
        "    try:\n"
        "        parser().parse_args(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = sorted(m for m in ('swebench', 'datasets', 'litellm',"
        " 'swegreen.evaluation.engine') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in out.stdout, out.stdout
    import argparse

    from swegreen.cli import parser

    commands = next(
        a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices
    for name, sub in commands.items():
        for action in sub._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"swegreen {name} {action.option_strings[0]} has no help"
    for name in ("report", "regrade", "sample", "participant"):
        flags = {f for a in commands[name]._actions for f in a.option_strings}
        assert not flags & {"--keep-workspaces", "--rebuild-envs", "--no-progress"}, name


def test_messages_are_never_read_as_markup(tmp_path: Path, session_cache: Path) -> None:
    """A `[config]` in a message stays, a `[/x]` in a path does not crash the output."""
    missing = tmp_path / "[config]" / "[/x]" / "preds.jsonl"
    out = cli("run", "--sample", "--patches", str(missing), cwd=tmp_path, cache=session_cache)
    assert out.returncode == 2, out.stdout + out.stderr
    said = "".join(out.stdout.split())
    assert "error:" in said and "[config]/[/x]/preds.jsonl" in said, out.stdout
    assert "Traceback" not in out.stderr


def test_sandbox_limits_come_from_the_environment_and_bad_ones_are_refused(
    tmp_path: Path,
) -> None:
    import argparse

    from swegreen.cli.common import local_settings as _settings
    from swegreen.core.errors import ConfigError

    args = argparse.Namespace(output_dir=tmp_path / "out", cache_dir=tmp_path / "cache")
    settings = _settings(args, {"SWEGREEN_DISK_MB": "2048", "SWEGREEN_MEMORY_MB": "4096"})
    assert (settings.disk_mb, settings.memory_mb, settings.max_processes) == (2048, 4096, 4096)
    with pytest.raises(ConfigError, match=r"SWEGREEN_DISK_MB='10G' is not a limit"):
        _settings(args, {"SWEGREEN_DISK_MB": "10G"})


def test_a_run_never_shrinks(tmp_path: Path, session_cache: Path) -> None:
    """A finished run of 3 rows asked again with --max-rows 2: refused, saying what to do,
    and its results keep all 3 rows; more rows resume it."""
    common = ("--sample", "--patches", "empty", "--run-id", "keep", "--no-progress")
    first = cli("run", *common, "--max-rows", "3", cwd=tmp_path, cache=session_cache)
    assert first.returncode == 0, first.stderr
    results = tmp_path / "results" / "keep" / "results.json"
    before = results.read_text()
    smaller = cli("run", *common, "--max-rows", "2", cwd=tmp_path, cache=session_cache)
    assert smaller.returncode == 2, smaller.stdout + smaller.stderr
    said = " ".join((smaller.stdout + smaller.stderr).split())
    assert "never shrinks" in said and "new --run-id" in said, said
    assert results.read_text() == before
    assert json.loads(before)["results"][0]["total_instances"] == 3
    more = cli("run", *common, "--max-rows", "4", cwd=tmp_path, cache=session_cache)
    assert more.returncode == 0, more.stderr
    assert json.loads(results.read_text())["results"][0]["total_instances"] == 4
    # no row ran its tests (empty patches): no pass rate is shown, the count is
    table = more.stdout
    for label in ("F2P tests passing", "P2P tests passing"):
        (line,) = [ln for ln in table.splitlines() if label in ln]
        assert "n/a" in line and "%" not in line, line
    assert "0 of 4" in next(ln for ln in table.splitlines() if "rows whose tests ran" in ln)
    # the end of a run: the reasons in words, where results.json and report.html are
    assert "4 the patch was empty (empty_patch)" in table
    for name in ("results.json", "report.html", "instances.jsonl"):
        (line,) = [ln for ln in table.splitlines() if ln.rstrip().endswith(name)]
        assert Path(line.split()[-1]).is_file(), line
    html = (tmp_path / "results" / "keep" / "report.html").read_text()
    assert html.count("<b>n/a</b>") == 2


def test_report_without_runs_says_so_and_makes_nothing(tmp_path: Path, session_cache: Path) -> None:
    out = cli("report", cwd=tmp_path, cache=session_cache)
    assert out.returncode == 0, out.stderr
    assert "no runs in" in out.stdout and "swegreen run --sample" in out.stdout
    assert not (tmp_path / "results").exists()
    missing = cli("report", "--run-id", "nope", cwd=tmp_path, cache=session_cache)
    assert missing.returncode == 2 and "holds no runs" in missing.stdout
    assert not (tmp_path / "results").exists()


def test_unknown_swegreen_variables_are_named_once_and_the_command_runs(
    tmp_path: Path, session_cache: Path
) -> None:
    env = {**os.environ, "SWEGREEN_TEST_TMP_X": "1", "SWEGREEN_MAX_ROW": "2", "COLUMNS": "120"}
    argv = [sys.executable, "-m", "swegreen", "report", "--output-dir", str(tmp_path / "r")]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stderr.count("warning:") == 1
    said = " ".join(out.stderr.split())
    assert "SWEGREEN_MAX_ROW (did you mean SWEGREEN_MAX_ROWS?)" in said
    assert "SWEGREEN_TEST_TMP_X" in said


def test_the_resume_hint_of_a_predictions_run_runs_as_printed(
    tmp_path: Path, session_cache: Path, sample: SampleBenchmark
) -> None:
    """A run left unfinished (here: its record marked so) lists the command that resumes
    it; that command, run as printed, finishes it with the same predictions file and rows."""
    preds = tmp_path / "my preds.jsonl"
    preds.write_text(sample.crafted.read_text())
    first = cli(
        "run", "--sample", "--patches", str(preds), "--max-rows", "2", "--run-id", "hint",
        "--no-progress", cwd=tmp_path, cache=session_cache,
    )  # fmt: skip
    assert first.returncode in (0, 3), first.stderr
    db = tmp_path / "results" / "swegreen.sqlite"
    with sqlite3.connect(db) as conn:
        (record,) = conn.execute("SELECT record FROM runs WHERE run_id = 'hint'").fetchone()
        data = json.loads(record)
        data["state"] = "running"
        conn.execute("UPDATE runs SET record = ? WHERE run_id = 'hint'", (json.dumps(data),))
    listing = cli("report", cwd=tmp_path, cache=session_cache).stdout
    line = " ".join(listing.split())
    hint = line.split("resume: ", 1)[1].split(" (with", 1)[0]
    argv = shlex.split(hint)
    assert argv == ["swegreen", "run", "--run-id", "hint"]
    again = cli(*argv[1:], "--no-progress", cwd=tmp_path, cache=session_cache)
    assert again.returncode in (0, 3), again.stdout + again.stderr
    said = " ".join(again.stdout.split())
    assert "Run hint: 2 instance(s) of " in said and f"with predictions:{preds.name}" in said
    nothing = cli("run", "--run-id", "nosuch", cwd=tmp_path, cache=session_cache)
    assert nothing.returncode == 2 and "no run 'nosuch'" in nothing.stdout
    assert "start it with --patches" in " ".join(nothing.stdout.split())


def test_an_error_row_s_line_says_to_fix_only_what_the_evaluator_can() -> None:
    from swegreen.core.classify import Status
    from swegreen.core.results import InstanceResult
    from swegreen.reports.console import error_fixes

    def row(iid: str, reason: str, detail: str, kind: str) -> InstanceResult:
        return InstanceResult(
            instance_id=iid, repo="o/r", status=Status.ERROR, reason=reason, detail=detail,
            error_kind=kind,
        )  # fmt: skip

    rows = [
        row("a", "repo_unavailable", "no commit X\n--- log tail ---\nnoise", "infrastructure"),
        row("b", "test_timeout", "the eval script ran past its 40 s time limit", "evaluation"),
    ]
    assert error_fixes(rows) == [
        ("to fix:", "repo_unavailable (1: a): no commit X"),
        ("why:", "test_timeout (1: b): the eval script ran past its 40 s time limit"),
    ]


def test_a_retry_is_advised_only_for_failures_a_retry_can_cure() -> None:
    from swegreen.cli.run import retry_advice
    from swegreen.core.classify import Status
    from swegreen.core.results import InstanceResult

    def row(iid: str, reason: str, may: bool | None) -> InstanceResult:
        return InstanceResult(
            instance_id=iid, repo="o/r", status=Status.ERROR, reason=reason, retry_may_help=may
        )

    missing = row("a", "repo_unavailable", False)  # a commit the source lacks
    crashed = row("b", "sandbox_crashed", True)
    old = row("c", "env_setup_failed", None)  # stored before rows said
    assert retry_advice([missing], "r").startswith("each fails the same way until")
    mixed = retry_advice([missing, crashed, old], "r")
    assert mixed.startswith("2 of them failed for a reason of the moment")
    assert "the other 1 fail the same way" in mixed


def test_an_interrupt_before_the_run_begins_prints_no_traceback(tmp_path: Path) -> None:
    """Ctrl-C while the command still imports and loads: a line and exit 130, no trace."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "swegreen", "run", "--sample", "--patches", "gold",
         "--output-dir", str(tmp_path / "r"), "--cache-dir", str(tmp_path / "c")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as from a terminal: pytest-xdist's workers ignore SIGINT, and children inherit that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    maps = Path(f"/proc/{proc.pid}/maps")

    def importing() -> bool:  # Python is up and loading the project's dependencies
        try:
            return "pydantic_core" in maps.read_text()
        except OSError:
            return False

    assert wait_until(importing, 60)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    # 130, or (now and then, after the message) ended by the signal itself, which a shell
    # reports as 130 too
    assert proc.returncode in (130, -signal.SIGINT), out + err
    assert "Traceback" not in err and "interrupted" in err + out


def test_run_help_describes_the_predictions_format_and_the_exit_codes() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "swegreen", "run", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "80"},
    ).stdout
    for words in ("model_patch", "instance_id", ".jsonl", "exit codes", "130", "--retry-errors"):
        assert words in out, words
    # the codes it documents are the ones the command returns
    from swegreen.cli.common import EXIT_CANNOT_START, EXIT_INTERRUPTED, EXIT_ROWS_ERRORED

    for code in (EXIT_CANNOT_START, EXIT_ROWS_ERRORED, EXIT_INTERRUPTED):
        assert f"\n  {code} " in out, code


def run_in_terminal(argv: list[str], cwd: Path, columns: int = 80) -> str:
    """``argv`` on a pseudo-terminal of ``columns`` x 24: what a person would see."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=follower, stdout=follower, stderr=follower
    )
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 600)
        if not ready:
            proc.kill()
            break
        try:
            data = os.read(leader, 65536)
        except OSError:  # the terminal closed: the command ended
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(leader)
    return b"".join(chunks).decode("utf-8", "replace")


def test_the_progress_bar_keeps_count_rate_and_time_at_80_columns_and_pipes_get_lines(
    tmp_path: Path, session_cache: Path
) -> None:
    import re

    common = [
        sys.executable, "-m", "swegreen", "run", "--sample", "--patches", "empty",
        "--max-rows", "3", "--cache-dir", str(session_cache),
        "--output-dir", str(tmp_path / "results"),
    ]  # fmt: skip
    seen = run_in_terminal([*common, "--run-id", "a-rather-long-run-id-for-the-bar"], tmp_path)
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen)
    bars = [ln for ln in plain.replace("\r", "\n").splitlines() if "3/3" in ln]
    assert bars, plain[-2000:]
    last = bars[-1]
    assert len(last.rstrip()) <= 80, last
    assert re.search(r"\d+\.\d/min", last) and re.search(r"\d:\d\d:\d\d", last), last
    assert "ETA" in last, last
    # piped: one plain line per row, no bar, no line wrapped at 80 columns
    piped = subprocess.run(
        [*common, "--run-id", "piped"], cwd=tmp_path, capture_output=True, text=True,
        env={k: v for k, v in os.environ.items() if k != "COLUMNS"},
    )  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    assert "\x1b[" not in piped.stdout and "━" not in piped.stdout.split("Leaderboard")[0]
    (line,) = [ln for ln in piped.stdout.splitlines() if ln.startswith("results: ")]
    assert Path(line.removeprefix("results: ")).is_file(), line  # whole, however long


def test_a_predictions_file_is_evaluated_whole_and_a_default_limit_says_so(
    tmp_path: Path, session_cache: Path, sample: SampleBenchmark
) -> None:
    """A predictions file's rows are all evaluated unless the run names a limit (as the
    official harness evaluates one); where the default of 3 rows does cut a selection,
    the run line says how many of how many, and how to take them all."""
    lines = sample.crafted.read_text().splitlines()[:4]
    preds = tmp_path / "four.jsonl"
    preds.write_text("\n".join(lines) + "\n")
    ids = sorted(json.loads(line)["instance_id"] for line in lines)
    out = cli(
        "run", "--sample", "--patches", str(preds), "--run-id", "whole", "--no-progress",
        cwd=tmp_path, cache=session_cache,
    )  # fmt: skip
    assert out.returncode in (0, 3), out.stdout + out.stderr
    assert "Run whole: 4 instance(s)" in out.stdout and "--max-rows -1" not in out.stdout
    rows = read_jsonl(tmp_path / "results" / "whole" / "instances.jsonl")
    assert sorted(r["instance_id"] for r in rows) == ids
    gold = cli(
        "run", "--sample", "--patches", "gold", "--run-id", "cut", "--no-progress",
        cwd=tmp_path, cache=session_cache,
    )  # fmt: skip
    assert gold.returncode == 0, gold.stdout + gold.stderr
    assert "(3 of 8 rows: --max-rows -1 for all)" in " ".join(gold.stdout.split())
