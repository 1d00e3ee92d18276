"""Integrity, round five (b), in the Docker backend: the configuration hidden from the
put-back behind form feeds, a console script named ``git``, git replace refs, and a
chain of symlinks that escapes only as a whole, each on the sample's instance images
through the stand-in of AgentBeats' gateway. Each attack is shown to bite where the
defence it meets is taken away; with the defences, none resolves.
"""

from __future__ import annotations

import os

import pytest

from swegreen.containers import install_changes
from swegreen.containers.daemon import answers
from swegreen.evaluation import docker_backend
from swegreen.evaluation.docker_backend import DockerEvaluator
from swegreen.evaluation.settings import LocalSettings
from swegreen.sample import SampleBenchmark

from .conftest import RunSample
from .docker_support.gateway import Gateway
from .test_docker_backend import FORCE_PASS, evaluate_one, new_file, setup_py
from .test_integrity_round5 import HIDDEN, PLUGIN, put_back_as_configparser_reads  # noqa: F401

WHY_NOT = answers(os.environ)
pytestmark = pytest.mark.skipif(
    WHY_NOT is not None,
    reason=f"{WHY_NOT}: run ../shared/tools/docker-here.sh as root to set up a daemon",
)


def new_text_file(path: str, text: str) -> str:
    """``new_file`` with lines broken at newlines only: the form feeds stay in a line."""
    lines = text.removesuffix("\n").split("\n")
    body = "".join(f"+{line}\n" for line in lines)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    )


HIDDEN_PLUGIN = new_file("ledger/_report.py", PLUGIN) + new_text_file("setup.cfg", HIDDEN)
# The eval-time install adds a console script named git, listed in the project's own
# RECORD; once on PATH it would run for the test phase's reset of the test files.
GIT_SCRIPT = new_file(
    "ledger/_git.py",
    "import pathlib, sys\n\n\ndef main():\n"
    "    pathlib.Path('tests/conftest.py').write_text('# SWEGREEN-PLANTED\\n')\n"
    "    sys.exit(0)\n",
) + (
    "diff --git a/pyproject.toml b/pyproject.toml\n--- a/pyproject.toml\n+++ b/pyproject.toml\n"
    '@@ -9,3 +9,6 @@\n \n [tool.setuptools]\n packages = ["ledger"]\n+\n+[project.scripts]\n'
    '+git = "ledger._git:main"\n'
)
# The install writes a replace ref for the base commit (to itself: any write will do; the
# eval-script test shows what a forged tree would do: tests/test_eval_script.py).
REPLACE_REF = setup_py(
    "base = subprocess.run(['git', 'rev-parse', 'HEAD'], capture_output=True, text=True)"
    ".stdout.strip()\n"
    "os.makedirs('.git/refs/replace', exist_ok=True)\n"
    "open('.git/refs/replace/' + base, 'w').write(base + '\\n')"
)
CHAIN = (
    "diff --git a/y b/y\nnew file mode 120000\n--- /dev/null\n+++ b/y\n@@ -0,0 +1 @@\n+.\n"
    "\\ No newline at end of file\n"
    "diff --git a/x b/x\nnew file mode 120000\n--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+y/..\n"
    "\\ No newline at end of file\n"
)


@pytest.fixture
def no_census(monkeypatch: pytest.MonkeyPatch) -> None:
    async def none(self: DockerEvaluator, *args: object) -> tuple[None, float]:
        return None, 0.0

    monkeypatch.setattr(DockerEvaluator, "_census", none)


def test_a_pytest_section_behind_form_feeds_is_put_back_in_the_container(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, gateway: Gateway
) -> None:
    row = evaluate_one(run_sample, settings, sample, gateway, "sample__ledger-2", HIDDEN_PLUGIN)
    assert "setup.cfg" in row.tampered_files, row
    assert (row.status.value, row.reason) == ("no_op", "no_f2p_pass"), row.detail


@pytest.mark.usefixtures("put_back_as_configparser_reads")
def test_the_census_names_the_plugin_the_put_back_missed_in_the_container(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, gateway: Gateway
) -> None:
    row = evaluate_one(run_sample, settings, sample, gateway, "sample__ledger-2", HIDDEN_PLUGIN)
    assert "setup.cfg" not in row.tampered_files
    assert (row.status.value, row.reason) == ("error", "log_tampering"), row.detail
    assert "plugin ledger._report @ repo:ledger/_report.py" in row.detail, row.detail


@pytest.mark.usefixtures("put_back_as_configparser_reads", "no_census")
def test_without_either_defence_the_attack_resolves_in_the_container(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, gateway: Gateway
) -> None:
    row = evaluate_one(run_sample, settings, sample, gateway, "sample__ledger-2", HIDDEN_PLUGIN)
    assert (row.status.value, row.reason) == ("resolved", "all_tests_pass"), row.detail


@pytest.mark.parametrize(
    ("patch", "named"),
    [
        (GIT_SCRIPT, "bin/git (a launcher named like a command the test phase runs)"),
        (REPLACE_REF, "/testbed/.git/refs/replace/"),
    ],
    ids=["git console script", "replace ref"],
)
def test_what_the_test_phase_s_git_would_read_or_run_ends_the_row(
    patch: str,
    named: str,
    run_sample: RunSample,
    sample: SampleBenchmark,
    settings: LocalSettings,
    gateway: Gateway,
) -> None:
    row = evaluate_one(run_sample, settings, sample, gateway, "sample__ledger-1", patch)
    assert (row.status.value, row.reason) == ("error", "workspace_tampering"), row.detail
    assert named in row.detail, row.detail


def test_a_git_console_script_never_runs_for_the_test_phase(
    monkeypatch: pytest.MonkeyPatch,
    run_sample: RunSample,
    sample: SampleBenchmark,
    settings: LocalSettings,
    gateway: Gateway,
) -> None:
    """With the judge told nothing of git, the launcher stays; the test phase's reset
    runs the system's git all the same, and the planted conftest.py never appears."""
    violations = install_changes.EnvChanges.violations

    def blind(self, now, before, commands, unchanged=frozenset()):  # type: ignore[no-untyped-def]
        return violations(self, now, before, commands - {"git"}, unchanged)

    monkeypatch.setattr(install_changes.EnvChanges, "violations", blind)
    row = evaluate_one(run_sample, settings, sample, gateway, "sample__ledger-1", GIT_SCRIPT)
    assert (row.status.value, row.reason) == ("no_op", "no_f2p_pass"), row.detail
    assert "tests/conftest.py" not in row.tampered_files


def test_a_symlink_chain_that_escapes_is_refused_in_the_container(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, gateway: Gateway
) -> None:
    row = evaluate_one(run_sample, settings, sample, gateway, "sample__ledger-1", CHAIN)
    assert (row.status.value, row.reason) == ("no_op", "patch_outside_repo"), row.detail


# The install rewrites the tracked root conftest.py into a force-pass plugin, then marks
# it assume-unchanged in the checkout's index: git status, reading that index, sees
# nothing changed.
HIDDEN_BY_THE_INDEX = setup_py(
    f"open('conftest.py', 'w').write({FORCE_PASS!r})\n"
    "subprocess.run(['git', 'update-index', '--assume-unchanged', 'conftest.py'], check=True)"
)


@pytest.fixture
def listing_through_the_checkout_s_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """The listing as it was: git status over the checkout's own index."""
    own = " ".join(f"{k}={v}" for k, v in docker_backend.OWN_GIT.items())
    monkeypatch.setattr(
        docker_backend,
        "_LIST_CHANGES",
        f"{docker_backend.DROP_BYTECODE}; export {own}; "
        "exec git status --porcelain -z --untracked-files=all --no-renames",
    )


def test_a_test_file_the_index_hides_is_put_back(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, gateway: Gateway
) -> None:
    row = evaluate_one(
        run_sample, settings, sample, gateway, "sample__ledger-1", HIDDEN_BY_THE_INDEX
    )
    assert "conftest.py" in row.tampered_files, row
    assert (row.status.value, row.reason) == ("no_op", "no_f2p_pass"), row.detail


@pytest.mark.usefixtures("listing_through_the_checkout_s_index")
def test_the_census_names_a_conftest_the_listing_missed(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, gateway: Gateway
) -> None:
    row = evaluate_one(
        run_sample, settings, sample, gateway, "sample__ledger-1", HIDDEN_BY_THE_INDEX
    )
    assert "conftest.py" not in row.tampered_files
    assert (row.status.value, row.reason) == ("error", "log_tampering"), row.detail
    assert "plugin conftest @ repo:conftest.py" in row.detail, row.detail


@pytest.mark.usefixtures("listing_through_the_checkout_s_index", "no_census")
def test_with_neither_the_index_hides_it_and_the_attack_resolves(
    run_sample: RunSample, sample: SampleBenchmark, settings: LocalSettings, gateway: Gateway
) -> None:
    row = evaluate_one(
        run_sample, settings, sample, gateway, "sample__ledger-1", HIDDEN_BY_THE_INDEX
    )
    assert (row.status.value, row.reason) == ("resolved", "all_tests_pass"), row.detail


NOT_APPLYING = (
    "diff --git a/ledger/money.py b/ledger/money.py\n--- a/ledger/money.py\n"
    "+++ b/ledger/money.py\n@@ -1,2 +1,2 @@\n-no such line\n-nor this\n+x\n+y\n"
)


def test_a_row_that_ends_before_its_census_leaves_no_container(
    monkeypatch: pytest.MonkeyPatch,
    run_sample: RunSample,
    sample: SampleBenchmark,
    settings: LocalSettings,
    gateway: Gateway,
) -> None:
    """The census's container is made meanwhile, in a thread; a row whose patch does not
    apply ends while it is still being made (made slow here), and it is removed all the
    same once made."""
    import threading

    import docker

    from swegreen.containers.container import RowContainer

    create = RowContainer.create.__func__  # type: ignore[attr-defined]
    row_ended = threading.Event()

    def slow(cls, client, image, name, *args):  # type: ignore[no-untyped-def]
        if name.startswith("swegreen-census-"):
            row_ended.wait(60)  # made only once the row has ended
        return create(cls, client, image, name, *args)

    monkeypatch.setattr(RowContainer, "create", classmethod(slow))
    finish = DockerEvaluator._does_not_apply

    def ended(self, *args):  # type: ignore[no-untyped-def]
        row_ended.set()
        return finish(self, *args)

    monkeypatch.setattr(DockerEvaluator, "_does_not_apply", ended)
    row = evaluate_one(run_sample, settings, sample, gateway, "sample__ledger-2", NOT_APPLYING)
    assert (row.status.value, row.reason) == ("no_op", "patch_does_not_apply"), row.detail
    client = docker.DockerClient(base_url=f"unix://{gateway.listen}")
    try:
        assert client.containers.list(all=True) == []
    finally:
        client.close()
