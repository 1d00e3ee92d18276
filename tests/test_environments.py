"""The environment cache: one build under concurrency, private views, failing builds."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from swegreen.core.errors import EnvSetupFailed
from swegreen.core.recipes import Recipe
from swegreen.environments import build as environments
from swegreen.environments.constraints import merge_requirements
from swegreen.environments.environment import transient_failure
from swegreen.environments.interpreters import InterpreterSearch
from swegreen.environments.lock import creation_stage
from swegreen.environments.manager import EnvManager
from swegreen.environments.views import own_tree
from swegreen.sandbox import overlay
from swegreen.sandbox.isolation import Isolation
from swegreen.sandbox.local import LocalSandbox


def manager(root: Path, host_env: dict[str, str]) -> EnvManager:
    return EnvManager(root, InterpreterSearch.from_environ(host_env), host_env)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, host_env_module: dict[str, str]):
    """Three concurrent requests (two managers, as two processes would be) for one recipe."""
    root = tmp_path_factory.mktemp("envs")
    recipe = Recipe(python="host", packages=("iniconfig==2.0.0",), test_cmd="true")

    async def main():
        a, b = manager(root, host_env_module), manager(root, host_env_module)
        return await asyncio.gather(
            a.ensure(recipe, "x"), b.ensure(recipe, "x"), a.ensure(recipe, "x")
        )

    return root, recipe, asyncio.run(main())


@pytest.fixture(scope="module")
def host_env_module() -> dict[str, str]:
    from swegreen.evaluation.settings import host_environment

    return host_environment()


def test_concurrent_requests_build_once(built) -> None:
    root, _, envs = built
    assert sum(not e.reused for e in envs) == 1
    assert len({e.key for e in envs}) == 1
    env_dir = root / envs[0].key
    assert (env_dir / ".complete").exists() and (env_dir / "build.log").exists()
    assert "iniconfig==2.0.0" in (env_dir / "lock.txt").read_text()
    assert "pip==24.2" in (env_dir / "lock.txt").read_text()  # upstream's base tooling


def test_the_environment_is_a_copy_of_the_interpreter_without_host_packages(built) -> None:
    _, _, envs = built
    prefix = envs[0].prefix
    out = subprocess.run(
        [
            str(prefix / "bin" / "python"),
            "-c",
            "import sys, sysconfig, iniconfig; print(sys.prefix); print(iniconfig.__file__);"
            "print(sysconfig.get_config_var('LIBDIR'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out[0] == str(prefix) and out[1].startswith(str(prefix))
    # extensions link against the copy (the sandbox shows no other tree): Python <= 3.7
    # links them against libpython, from LIBDIR
    assert out[2] == str(prefix / "lib")
    assert not list((prefix / "bin").glob("aws*"))  # host-installed scripts stay out
    # CPython's regression suite as conda-forge ships it: test.support only, importable
    (regression,) = (prefix / "lib").glob("python*/test")
    assert sorted(p.name for p in regression.iterdir()) == ["__init__.py", "support"]
    support = [str(prefix / "bin" / "python"), "-c", "import test.support"]
    assert subprocess.run(support, capture_output=True).returncode == 0


def test_views_keep_installs_private(built, tmp_path: Path, host_env_module) -> None:
    root, _, envs = built
    mgr = manager(root, host_env_module)
    pkg = tmp_path / "pkg"
    (pkg / "leaky").mkdir(parents=True)
    (pkg / "leaky" / "__init__.py").write_text("X = 1\n")
    (pkg / "setup.py").write_text(
        "from setuptools import setup\nsetup(name='leaky', packages=['leaky'])\n"
    )

    first = asyncio.run(mgr.view(envs[0], tmp_path / "view1"))
    second = asyncio.run(mgr.view(envs[0], tmp_path / "view2"))
    subprocess.run(
        [
            str(first.python),
            "-m",
            "pip",
            "install",
            "--no-index",
            "--no-build-isolation",
            "-q",
            "-e",
            str(pkg),
        ],
        check=True,
        capture_output=True,
    )
    probe = ["-c", "import leaky, sys; print(sys.prefix)"]
    assert subprocess.run(
        [str(first.python), *probe], capture_output=True, text=True
    ).stdout.strip() == str(tmp_path / "view1")
    for other in (second.python, envs[0].python):
        assert subprocess.run([str(other), *probe], capture_output=True).returncode != 0
    site = next((envs[0].prefix / "lib").glob("python*/site-packages"))
    assert not [p for p in site.iterdir() if "leaky" in p.name]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another uid needs root")
def test_a_view_made_for_the_sandbox_is_the_view_lent_to_it_afterwards(
    built, tmp_path: Path, host_env_module
) -> None:
    """``owner`` gives the view's entries to the sandbox as they are made, instead of a
    second walk (``LocalSandbox.lend``): the same tree, modes, owners and hard links."""
    root, _, envs = built
    mgr = manager(root, host_env_module)
    uid = 2_000_123
    rewrite = {"/nowhere": "/elsewhere"}
    lent = asyncio.run(mgr.view(envs[0], tmp_path / "lent", rewrite))
    LocalSandbox(Isolation(sandbox_uid=uid)).lend([lent.prefix])
    made = asyncio.run(mgr.view(envs[0], tmp_path / "made", rewrite, owner=uid))

    def shape(prefix: Path) -> dict[str, tuple[object, ...]]:
        (site,) = (prefix / "lib").glob("python*/site-packages")
        out: dict[str, tuple[object, ...]] = {}
        for path in [prefix, *prefix.rglob("*")]:
            st = path.lstat()
            target = os.readlink(path).replace(str(prefix), "") if path.is_symlink() else None
            linked = st.st_nlink > 1 and not path.is_dir()
            # a directory of the source's, linked into the view, keeps its times
            kept = st.st_mtime_ns if path.is_dir() and site in path.parents else None
            out[str(path.relative_to(prefix))] = (
                st.st_mode, st.st_uid, st.st_gid, target, linked,
                st.st_ino if linked else None, kept,
            )  # fmt: skip
        return out

    want, got = shape(lent.prefix), shape(made.prefix)
    assert got == want
    assert len(want) > 100 and any(v[1] == uid for v in want.values())  # a real view, lent
    assert any(v[4] for v in want.values())  # with hard links into the build


def view_shape(prefix: Path) -> dict[str, tuple[object, ...]]:
    """What the sandbox sees of a view: every entry's mode, owner, link target, whether
    it is the build's file (its inode) and, for a private file, its bytes (the view's own
    path taken out)."""
    out: dict[str, tuple[object, ...]] = {}
    for path in [prefix, *prefix.rglob("*")]:
        st = path.lstat()
        link = os.readlink(path).replace(str(prefix), "") if path.is_symlink() else None
        shared = stat.S_ISREG(st.st_mode) and st.st_nlink > 1
        data = None
        if stat.S_ISREG(st.st_mode) and not shared:
            data = path.read_bytes().replace(str(prefix).encode(), b"")
        out[str(path.relative_to(prefix))] = (
            st.st_mode, st.st_uid, st.st_gid, link, st.st_ino if shared else None, data,
        )  # fmt: skip
    return out


@pytest.mark.skipif(not overlay.can_mount(), reason="mounting needs a root engine")
def test_a_view_mounted_copy_on_write_is_the_view_of_links(
    built, tmp_path: Path, host_env_module
) -> None:
    """A prepared workspace's environment, its directories given to the sandbox
    (``own_tree``), under an evaluation's view mounted over it: what the sandbox sees is
    what a view of hard links shows it, and what it writes there stays in the view."""
    root, _, envs = built
    mgr = manager(root, host_env_module)
    uid = 2_000_123
    source = asyncio.run(mgr.view(envs[0], tmp_path / "prepared-env"))
    own_tree(source.prefix, uid)
    rewrite = {"/nowhere": "/elsewhere"}
    linked = asyncio.run(mgr.view(source, tmp_path / "linked", rewrite, owner=uid))
    layers = tmp_path / "layers"
    mounted = asyncio.run(
        mgr.view(
            source,
            tmp_path / "mounted",
            rewrite,
            owner=uid,
            mount_copy=lambda lower, target: overlay.mount(lower, layers, target),
        )
    )
    (site,) = (mounted.prefix / "lib").glob("python*/site-packages")
    try:
        assert overlay.is_mounted(site)
        want, got = view_shape(linked.prefix), view_shape(mounted.prefix)
        assert got == want
        assert len(want) > 100 and any(v[1] == uid for v in want.values())
        assert any(v[4] for v in want.values()) and any(v[5] for v in want.values())
        (site / "written.pth").write_text("/nowhere\n")
        pip = next(site.glob("pip"))
        (pip / "__init__.py").unlink()  # a file of the build's, replaced
        (pip / "__init__.py").write_text("FORGED = 1\n")
        source_site = next((source.prefix / "lib").glob("python*/site-packages"))
        assert not (source_site / "written.pth").exists()
        assert "FORGED" not in (source_site / "pip" / "__init__.py").read_text()
    finally:
        overlay.unmount(site)


def test_a_missing_interpreter_fails_fast_after_one_try(tmp_path: Path, host_env_module) -> None:
    mgr = manager(tmp_path / "envs", host_env_module)
    broken = Recipe(python="9.9", test_cmd="true")

    async def main() -> list[EnvSetupFailed]:
        failures = []
        for _ in range(3):
            try:
                await mgr.ensure(broken, "broken/repo 1.0")
            except EnvSetupFailed as exc:
                failures.append(exc)
        return failures

    failures = asyncio.run(main())
    assert len(failures) == 3 and all(f.permanent for f in failures)
    assert "Python 9.9" in str(failures[0])
    assert "failed 1 time(s) in this run" in str(failures[2])
    key = broken.env_key("")
    assert (tmp_path / "envs" / f"{key}.failed.log").exists()
    # the machine may get the interpreter: not remembered beyond this process
    assert not mgr.failure_path(key).exists()


def test_a_recipe_that_cannot_build_is_remembered_until_a_rebuild_is_asked(
    tmp_path: Path, host_env_module, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built once; a later process (another run, another task) fails fast with the same
    reason and the log's path, without building; --rebuild-envs builds it once more."""
    root = tmp_path / "envs"
    broken = Recipe(
        python="host", packages=("this-package-does-not-exist-swegreen==0.0.1",), test_cmd="true"
    )
    key = broken.env_key("")

    def attempt(mgr: EnvManager) -> EnvSetupFailed:
        with pytest.raises(EnvSetupFailed) as info:
            asyncio.run(mgr.ensure(broken, "broken/repo 1.0"))
        return info.value

    first = attempt(manager(root, host_env_module))
    assert first.permanent and "installing the recipe's packages" in str(first)
    remembered = json.loads(manager(root, host_env_module).failure_path(key).read_text())
    assert remembered["reason"] == "env_setup_failed"
    assert "this-package-does-not-exist" in remembered["log_tail"]

    builds: list[str] = []
    real_run = environments._Build.run

    async def counting_run(self: environments._Build) -> None:
        builds.append(self.key)
        await real_run(self)

    monkeypatch.setattr(environments._Build, "run", counting_run)
    later = attempt(manager(root, host_env_module))
    assert builds == [] and later.permanent
    assert "remembered from" in str(later) and "--rebuild-envs" in str(later)
    assert f"{key}.failed.log" in str(later)
    assert "this-package-does-not-exist" in later.log_tail

    rebuilding = EnvManager(
        root, InterpreterSearch.from_environ(host_env_module), host_env_module, rebuild_failed=True
    )
    attempt(rebuilding)
    attempt(rebuilding)  # the rebuild is tried once per process, then fails fast again
    assert builds == [key]
    assert rebuilding.failure_path(key).exists()


def test_an_object_missing_at_the_setup_commit_is_remembered_with_its_own_reason(
    tmp_path: Path, host_env_module
) -> None:
    """astropy 5.1's environment_setup_commit references a blob the public snapshot lacks:
    every row of that environment failed the same way, each after a new checkout. Now
    the first failure is remembered, as repo_unavailable (the source's fault, not the
    recipe's), and later builds of the key fail without trying."""
    from swegreen.core.errors import RepoUnavailable

    recipe = Recipe(
        python="host",
        install="python -m pip install -e .",
        test_cmd="true",
        exclude_newer="2024-01-01",
    )
    checkouts: list[Path] = []

    async def checkout(dest: Path) -> None:
        checkouts.append(dest)
        raise RepoUnavailable("unable to read sha1 file of big/data (4a48cb8)", permanent=True)

    def attempt(mgr: EnvManager) -> RepoUnavailable:
        with pytest.raises(RepoUnavailable) as info:
            asyncio.run(mgr.ensure(recipe, "o/r 5.1", "c" * 40, lambda _p: None, checkout))
        return info.value

    root = tmp_path / "envs"
    first = attempt(manager(root, host_env_module))
    assert first.permanent and len(checkouts) == 1
    later = attempt(manager(root, host_env_module))  # another run
    assert later.permanent and "remembered from" in str(later) and "sha1 file" in str(later)
    assert len(checkouts) == 1


@pytest.mark.parametrize(
    ("output", "transient"),
    [
        ("ERROR: No matching distribution found for nope==1", False),
        ("error: command 'gcc' failed with exit status 1", False),
        ("Retrying ... NewConnectionError: Temporary failure in name resolution", True),
        ("ERROR: Could not install packages due to an OSError: No space left on device", True),
        ("error: Failed to fetch: `https://pypi.org/simple/numpy/`", True),
    ],
)
def test_failures_of_the_moment_are_told_from_failures_of_the_recipe(
    output: str, transient: bool
) -> None:
    assert transient_failure(output) is transient


def test_project_installs_are_recognised_for_locking() -> None:
    """sphinx 3.x regression: `pip install -e .[test]` pulled today's docutils, which sphinx
    cannot import; recipes that pip-install the project lock its dependencies too."""
    from swegreen.core.recipes import project_extras

    assert project_extras("python -m pip install -e .[test]") == "[test]"
    assert (
        project_extras("python -m pip install -v --no-use-pep517 --no-build-isolation -e .") == ""
    )
    assert project_extras("python -m pip install .") == ""
    assert project_extras("python setup.py install") is None
    assert project_extras(None) is None
    with_install = Recipe(
        python="3.9", test_cmd="t", install="pip install -e .", exclude_newer="2024-08-01"
    )
    assert with_install.env_key("c1") != with_install.env_key("c2")  # locked at the setup commit


def test_a_project_requirement_overrides_a_clashing_recipe_pin() -> None:
    """sphinx 3.x: the recipe pins Jinja2==3.0.3, then setup.py (after pre_install) asks
    Jinja2<3.0; upstream's install step downgrades it, so the frozen resolve must too,
    keeping every other pin."""
    from swegreen.environments.constraints import clashing_pins, yield_pins

    uv_says = (
        "Because only sphinx[test]==3.2.0 is available and sphinx==3.2.0 depends on "
        "jinja2<3.0, we can conclude that all versions of sphinx[test] depend on jinja2<3.0.\n"
        "And because you require jinja2==3.0.3 and sphinx[test], we can conclude that your "
        "requirements are unsatisfiable."
    )
    pins = ["tox==4.16.0", "tox-current-env==0.0.11", "Jinja2==3.0.3"]
    assert clashing_pins(pins, uv_says) == {"jinja2"}
    assert clashing_pins(["pluggy==0.11.0", "py"], "you require pluggy==0.11.0 and pytest") == {
        "pluggy"
    }
    assert yield_pins(pins, {"jinja2"}) == ["tox==4.16.0", "tox-current-env==0.0.11", "Jinja2"]
    assert yield_pins(["a[x]>=1; python_version<'3.8'", "b==2"], {"a"}) == [
        "a[x]; python_version<'3.8'",
        "b==2",
    ]


def test_an_exempt_package_is_resolved_past_the_freeze_date(tmp_path: Path) -> None:
    """xarray's recipes exempt eccodes from the freeze date; uv refused the old far-future
    cap, which silently dropped the whole lock (sparse 0.17 then broke a P2P test). Runs the
    real uv against the package index."""
    from swegreen.environments.constraints import compile_command, find_uv

    uv = find_uv(os.environ["PATH"])
    assert uv is not None
    req = tmp_path / "r.in"
    req.write_text("six\npackaging\n")
    out = tmp_path / "r.txt"
    argv = compile_command(uv, req, out, "3.10", "2024-08-01", ["six"], None)
    result = subprocess.run(argv, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    pins = dict(line.split("==") for line in out.read_text().splitlines() if "==" in line)
    assert pins["packaging"] == "24.1"  # the latest release before 2024-08-01
    assert tuple(map(int, pins["six"].split("."))) >= (1, 17)  # 1.17.0 came out in Dec 2024


def test_a_conda_pin_that_satisfies_the_later_pip_request_stays() -> None:
    """Upstream: conda creates with numpy==1.19.2, then `pip install numpy` leaves it."""
    assert merge_requirements(
        ["numpy==1.19.2", "scipy", "cython==0.29"], ["numpy", "scipy==1.5.2", "cython>=3"]
    ) == ["numpy==1.19.2", "scipy==1.5.2", "cython>=3"]


def test_the_creation_stage_takes_the_recipe_pins_and_the_lock_for_the_rest() -> None:
    lock = [
        "flake8==7.1.0",
        "    # via -r requirements.in",
        "mpmath==1.3.0",
        "pycodestyle==2.12.0",
        "setuptools==68.0.0",
    ]
    specs, constraints = creation_stage(["setuptools==38.2.4", "flake8", "mpmath"], lock)
    assert specs == ["setuptools==38.2.4", "flake8==7.1.0", "mpmath==1.3.0"]
    assert constraints == ["pycodestyle==2.12.0"]


def test_creation_packages_are_in_place_before_anything_is_built(
    tmp_path: Path, host_env_module
) -> None:
    """A legacy project that builds only against the setuptools the environment is
    created with (astropy 1.3's MarkupSafe==1.0 and setuptools==38.2.4): installed in one
    step with that pin, it would be built against the newer setuptools already there."""
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "setup.py").write_text(
        "import setuptools\n"
        "assert setuptools.__version__ == '68.2.2', 'built with ' + setuptools.__version__\n"
        "setuptools.setup(name='probe', version='1')\n"
    )
    recipe = Recipe(
        python="host",
        packages=("setuptools==68.2.2",),
        pip_packages=(f"probe @ file://{probe}",),
        test_cmd="true",
    )
    env = asyncio.run(manager(tmp_path / "envs", host_env_module).ensure(recipe, "staged 1.0"))
    lock = (env.root / "lock.txt").read_text()
    assert "setuptools==68.2.2" in lock and "probe" in lock
    log = (env.root / "build.log").read_text()
    assert log.index("setuptools==68.2.2") < log.index("probe @ file://")


def test_a_dated_recipe_builds_through_the_dated_index(tmp_path: Path, host_env_module) -> None:
    """Every pip of the build (and of its build environments) gets the index as of the
    recipe's date; here iniconfig 2.x (2023) does not exist yet in 2021."""
    from swegreen.environments.dated_index import DatedIndex, index_env

    index = DatedIndex(env=index_env(host_env_module))
    mgr = EnvManager(
        tmp_path / "envs",
        InterpreterSearch.from_environ(host_env_module),
        host_env_module,
        dated_index=index,
    )
    recipe = Recipe(
        python="host", packages=("iniconfig",), exclude_newer="2021-01-01", test_cmd="true"
    )
    try:
        env = asyncio.run(mgr.ensure(recipe, "dated 1.0"))
    finally:
        index.close()
    assert "iniconfig==1.1.1" in (env.root / "lock.txt").read_text()
    log = (env.root / "build.log").read_text()
    assert "# pip sees the index as of 2021-01-01: http://127.0.0.1:" in log
    info = json.loads((env.root / "env.json").read_text())
    assert (info["frozen_as_of"], info["frozen_by"]) == ("2021-01-01", "lock")


def test_commits_whose_requirements_read_the_same_share_one_environment(
    tmp_path: Path, host_env_module: dict[str, str]
) -> None:
    """Keyed by the text of what the build reads (includes too), not by the commit: two
    commits with equal requirements share a build; a build made earlier under a commit's
    key is taken for its content instead of being built again; the index says who shares."""
    recipe = Recipe(python="host", requirements=("requirements.txt",), test_cmd="true")
    same = {"requirements.txt": "-r reqs/base.txt\n", "reqs/base.txt": "iniconfig==2.0.0\n"}
    other = {"requirements.txt": "iniconfig==1.1.1\n"}
    tree = {"a" * 40: same, "b" * 40: dict(same), "d" * 40: other, "e" * 40: dict(other)}
    root = tmp_path / "envs"
    by_commit = EnvManager(
        root, InterpreterSearch.from_environ(host_env_module), host_env_module, content_keys=False
    )
    by_content = manager(root, host_env_module)

    async def main() -> list[Any]:
        older = await by_commit.ensure(recipe, "o/r 1.0", "d" * 40, tree["d" * 40].get)
        later = [
            await by_content.ensure(recipe, "o/r 1.0", c, tree[c].get, row=f"o__r-{c[0]}")
            for c in ("a" * 40, "b" * 40, "d" * 40, "e" * 40)
        ]
        return [older, *later]

    older, a, b, d, e = asyncio.run(main())
    assert older.key == recipe.env_key("d" * 40)  # the commit's key, as before
    assert a.key == b.key == recipe.content_env_key(same) != recipe.env_key("a" * 40)
    assert (not a.reused, b.reused) == (True, True)
    # the older build of commit d is its content's now, and commit e's with it
    assert (d.key, d.root, d.reused) == (older.key, older.root, True)
    assert (e.key, e.root, e.reused) == (older.key, older.root, True)
    assert (root / recipe.content_env_key(other)).resolve() == older.root.resolve()
    shared = by_content.shared()
    assert [x["row"] for x in shared[a.key]] == ["o__r-a", "o__r-b"]
    assert [x["files_read_at"] for x in shared[a.key]] == ["a" * 40, "b" * 40]
    assert [x["row"] for x in shared[recipe.content_env_key(other)]] == ["o__r-d", "o__r-e"]
    assert "iniconfig==2.0.0" in (root / a.key / "lock.txt").read_text()


def test_the_engine_loads_the_build_machinery_only_when_it_builds() -> None:
    """Every command that evaluates imports the engine; a row on a prepared workspace never
    builds, so the build's machinery (packaging, yaml, the lock) costs it nothing."""
    probe = (
        "import sys, swegreen.evaluation.engine\n"
        "print(sorted(m for m in ('yaml', 'packaging', 'swegreen.environments.build',"
        " 'swegreen.environments.lock', 'swegreen.evaluation.docker_backend')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_commits_whose_requirements_lock_the_same_share_one_environment(
    tmp_path: Path, host_env_module: dict[str, str]
) -> None:
    """Keyed by commit (as the AWS pipeline keys them, or a recipe that locks the
    project's dependencies): a second commit whose requirements resolve to the same lock
    stops its build at the lock and uses the first one's environment; the index says so."""
    recipe = Recipe(
        python="host",
        requirements=("requirements.txt",),
        exclude_newer="2024-01-01",
        test_cmd="true",
    )
    tree = {"a" * 40: {"requirements.txt": "iniconfig==2.0.0\n"}}
    tree["b" * 40] = dict(tree["a" * 40])
    root = tmp_path / "envs"
    mgr = EnvManager(
        root, InterpreterSearch.from_environ(host_env_module), host_env_module, content_keys=False
    )

    async def main() -> list[Any]:
        return [
            await mgr.ensure(recipe, "o/r 1.0", c, tree[c].get, row=f"o__r-{c[0]}")
            for c in ("a" * 40, "b" * 40)
        ]

    a, b = asyncio.run(main())
    assert not a.reused and a.key == recipe.env_key("a" * 40)
    assert b.key == a.key and b.root.resolve() == a.root.resolve()
    assert (root / recipe.env_key("b" * 40)).resolve() == a.root.resolve()  # named by both
    assert (root / recipe.env_key("b" * 40)).is_symlink()  # no second build was kept
    assert len(list((root / "by-lock").iterdir())) == 1  # one lock, made once
    [entry] = [e for e in mgr.shared()[a.key] if e.get("same_lock")]
    assert (entry["commit_key"], entry["row"]) == (recipe.env_key("b" * 40), "o__r-b")
