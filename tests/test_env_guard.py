"""The environment guard on a view the test builds: what an install may and may not leave
in an environment, put back without ever following a link it made."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swegreen.sandbox import overlay
from swegreen.sandbox.env_guard import EnvGuard

from .helpers import wheel_bytes

SITE = "lib/python3.11/site-packages"


def record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def make_view(tmp_path: Path) -> tuple[Path, Path]:
    """An environment (``source``) and a view of it: hardlinks, and a private .pth."""
    source, view = tmp_path / "source", tmp_path / "view"
    for root in (source, view):
        (root / SITE / "_pytest").mkdir(parents=True)
        (root / "bin").mkdir()
    for rel, text in [(f"{SITE}/_pytest/runner.py", "RUN = 1\n"), (f"{SITE}/six.py", "S = 1\n")]:
        (source / rel).write_text(text)
        os.link(source / rel, view / rel)
    (view / SITE / "distutils-precedence.pth").write_text("import os; os.environ.get('x')\n")
    meta = view / SITE / "proj-1.0.dist-info"
    meta.mkdir()
    (meta / "RECORD").write_text("proj-1.0.dist-info/RECORD,,\n")
    return source, view


def test_an_honest_install_of_the_project_is_left_alone(tmp_path: Path) -> None:
    source, view = make_view(tmp_path)
    guard = EnvGuard(view, tmp_path / "backup", source, frozenset({"proj"}))
    guard.snapshot()
    # what pip does for the project: a new version's metadata, a path .pth, a script
    (view / SITE / "proj-1.0.dist-info" / "RECORD").unlink()
    (view / SITE / "proj-1.0.dist-info").rmdir()
    meta = view / SITE / "proj-1.1.dist-info"
    meta.mkdir()
    pth, script = b"/work/repo\n", b"#!/bin/python\nimport proj\n"
    (view / SITE / "__editable__.proj-1.1.pth").write_bytes(pth)
    (view / "bin" / "proj").write_bytes(script)
    (meta / "RECORD").write_text(
        f"__editable__.proj-1.1.pth,{record_hash(pth)},11\n"
        f"../../../bin/proj,{record_hash(script)},26\nproj-1.1.dist-info/RECORD,,\n"
    )
    # and rewrites setuptools' own .pth with the same bytes
    precedence = view / SITE / "distutils-precedence.pth"
    text = precedence.read_bytes()
    precedence.unlink()
    precedence.write_bytes(text)
    assert guard.put_back() == []
    assert (view / SITE / "__editable__.proj-1.1.pth").read_bytes() == pth


def test_what_is_not_the_projects_is_put_back_through_no_link(tmp_path: Path) -> None:
    source, view = make_view(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "runner.py").write_text("host file\n")
    guard = EnvGuard(view, tmp_path / "backup", source, frozenset({"proj"}))
    guard.snapshot()
    # pytest's package replaced by a link elsewhere, a .pth that runs code, a linked .pth
    runner = view / SITE / "_pytest" / "runner.py"
    runner.unlink()
    (view / SITE / "_pytest").rmdir()
    (view / SITE / "_pytest").symlink_to(outside)
    (view / SITE / "zz.pth").write_text("import evil\n")
    (tmp_path / "evil.pth").write_text("import evil\n")
    (view / SITE / "linked.pth").symlink_to(tmp_path / "evil.pth")
    (view / SITE / "six.py").unlink()
    (view / SITE / "six.py").write_text("S = 'forced'\n")
    put_back = guard.put_back()
    assert put_back == [
        f"env:{SITE}/_pytest",
        f"env:{SITE}/_pytest/runner.py",
        f"env:{SITE}/linked.pth",
        f"env:{SITE}/six.py",
        f"env:{SITE}/zz.pth",
    ]
    assert (outside / "runner.py").read_text() == "host file\n"  # never reached through
    assert not (view / SITE / "_pytest").is_symlink()
    assert runner.read_text() == "RUN = 1\n"
    assert runner.stat().st_ino == (source / SITE / "_pytest" / "runner.py").stat().st_ino
    assert (view / SITE / "six.py").read_text() == "S = 1\n"
    assert not (view / SITE / "zz.pth").exists() and not (view / SITE / "linked.pth").exists()


FINDER = """from __future__ import annotations
import sys

MAPPING: dict[str, str] = {mapping!r}
NAMESPACES: dict[str, list[str]] = {{}}
PATH_PLACEHOLDER = '__editable__.proj-1.0.finder' + ".__path_hook__"


def install():
    if not any(finder == _EditableFinder for finder in sys.meta_path):
        sys.meta_path.append(_EditableFinder)
{extra}

class _EditableFinder:
    pass
"""


def claim(view: Path, files: dict[str, bytes]) -> None:
    """What a participant's build step can do: write files and list them in the project's
    RECORD with their true hashes."""
    meta = view / SITE / "proj-1.0.dist-info"
    rows = ["proj-1.0.dist-info/RECORD,,"]
    for rel, data in files.items():
        path = view / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        path.write_bytes(data)
        rows.append(f"{os.path.relpath(view / rel, view / SITE)},{record_hash(data)},{len(data)}")
    (meta / "RECORD").write_text("\n".join(rows) + "\n")


def finder_view(tmp_path: Path, repo: Path) -> tuple[Path, Path]:
    source, view = make_view(tmp_path)
    prepared = FINDER.format(mapping={"proj": str(tmp_path / "prepared" / "proj")}, extra="")
    claim(view, {f"{SITE}/__editable___proj_1_0_finder.py": prepared.encode()})
    (view / "bin" / "pytest").write_text("#!/bin/python\nfrom pytest import console_main\n")
    return source, view


def test_a_record_never_claims_what_another_distribution_had(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    source, view = finder_view(tmp_path, repo)
    guard = EnvGuard(
        view, tmp_path / "backup", source, frozenset({"proj"}), (repo,), frozenset({"pytest"})
    )
    guard.snapshot()
    launcher = (view / "bin" / "pytest").read_bytes()
    claim(
        view,
        {
            "bin/pytest": b"#!/bin/sh\necho PASSED\n",  # the test runner's launcher
            f"{SITE}/_pytest/evil.py": b"X = 1\n",  # a new module of pytest's package
            f"{SITE}/six.py": b"S = 'mine'\n",  # another distribution's module
            "bin/proj-cli": b"#!/bin/python\nimport proj\n",  # the project's own: kept
        },
    )
    put_back = guard.put_back()
    assert put_back == ["env:bin/pytest", f"env:{SITE}/_pytest/evil.py", f"env:{SITE}/six.py"]
    assert (view / "bin" / "pytest").read_bytes() == launcher
    assert (view / SITE / "six.py").read_text() == "S = 1\n"
    assert not (view / SITE / "_pytest" / "evil.py").exists()
    assert (view / "bin" / "proj-cli").exists()


def test_a_new_launcher_named_like_the_test_command_is_not_the_projects(tmp_path: Path) -> None:
    source, view = make_view(tmp_path)
    guard = EnvGuard(
        view, tmp_path / "backup", source, frozenset({"proj"}), (), frozenset({"tox", "pytest"})
    )
    guard.snapshot()
    claim(view, {"bin/tox": b"#!/bin/sh\necho ok\n", "bin/proj": b"#!/bin/sh\n"})
    assert guard.put_back() == ["env:bin/tox"]
    assert not (view / "bin" / "tox").exists() and (view / "bin" / "proj").exists()


def test_the_editable_finder_keeps_the_prepared_code(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    name = f"{SITE}/__editable___proj_1_0_finder.py"
    honest = FINDER.format(mapping={"proj": str(repo / "proj")}, extra="").encode()
    outside = FINDER.format(mapping={"proj": "/tmp/elsewhere/proj"}, extra="").encode()
    appended = FINDER.format(
        mapping={"proj": str(repo / "proj")}, extra="    import os; os.system('id')\n"
    ).encode()
    computed = honest.replace(b"MAPPING: dict[str, str] = {", b"MAPPING = dict(**{")
    for finder, kept in ((honest, True), (outside, False), (appended, False), (computed, False)):
        case = tmp_path / f"case-{len(finder)}-{kept}-{hash(finder) % 1000}"
        source, view = finder_view(case, repo)
        prepared = (view / name).read_bytes()
        guard = EnvGuard(view, case / "backup", source, frozenset({"proj"}), (repo,))
        guard.snapshot()
        claim(view, {name: finder})
        put_back = guard.put_back()
        assert put_back == ([] if kept else [f"env:{name}"]), finder
        assert (view / name).read_bytes() == (finder if kept else prepared)


def test_what_the_patched_project_newly_requires_stays_installed(tmp_path: Path) -> None:
    """pylint-4661's gold patch adds ``appdirs`` to setup.cfg; upstream's eval-time install
    fetches it, and the tests import it. Real pip, a real environment: the new dependency
    (and what it requires) stays, but a required distribution still may not plug into
    pytest, take a name the checkout or the environment had, and nothing unasked stays."""
    wheels, repo, view = tmp_path / "wheels", tmp_path / "repo", tmp_path / "view"
    wheels.mkdir()
    (repo / "tests").mkdir(parents=True)
    builds = {
        ("proj", "1.0"): ({"proj/__init__.py": "V = 1\n"}, ()),
        ("oldlib", "1.0"): ({"oldlib.py": "WHO = 'oldlib'\n"}, ()),
        ("proj", "1.1"): ({"proj/__init__.py": "V = 2\n"}, ("tinydep>=1", "sneaky (>=1.0)")),
        ("tinydep", "1.0"): ({"tinydep/__init__.py": "from deeper import D\n"}, ("Deeper",)),
        ("deeper", "1.0"): ({"deeper.py": "D = 'deep'\n"}, ()),
        ("sneaky", "1.0"): (
            {
                "sneaky.py": "S = 1\n",
                "oldlib/__init__.py": "WHO = 'sneaky'\n",  # stands in for oldlib.py
                "tests/__init__.py": "",  # stands in for the checkout's tests
                "sneaky-1.0.dist-info/entry_points.txt": "[pytest11]\nforce = sneaky\n",
                "usercustomize/__init__.py": "import sneaky\n",  # would run at every start
            },
            (),
        ),
        ("unasked", "1.0"): ({"unasked.py": "U = 1\n"}, ()),
    }
    for (name, version), (files, requires) in builds.items():
        wheel = wheels / f"{name}-{version}-py3-none-any.whl"
        wheel.write_bytes(wheel_bytes(name, version, files, requires))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(view)], check=True)
    python = view / "bin" / "python"

    def pip(*specs: str) -> None:
        offline = ["--no-index", "--find-links", str(wheels), "--disable-pip-version-check"]
        command = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
        subprocess.run([*command, *offline, *specs], check=True)

    pip("proj==1.0", "oldlib")  # the prepared environment
    guard = EnvGuard(view, tmp_path / "backup", None, frozenset({"proj"}), (repo,))
    guard.snapshot()
    pip("proj==1.1", "unasked")  # the patched project's install, and one thing more
    put_back = guard.put_back()
    assert guard.dependencies() == {"tinydep", "deeper", "sneaky"}
    site = next(view.glob("lib/python*/site-packages")).relative_to(view)
    assert f"env:{site}/unasked.py" in put_back
    assert f"env:{site}/sneaky-1.0.dist-info/entry_points.txt" in put_back
    assert f"env:{site}/oldlib/__init__.py" in put_back
    assert f"env:{site}/tests/__init__.py" in put_back
    assert f"env:{site}/usercustomize/__init__.py" in put_back
    assert not (view / site / "usercustomize").exists()
    assert not any("tinydep" in p or "deeper" in p or "proj" in p for p in put_back), put_back
    probe = (
        "import importlib.metadata as m, importlib.util as u, oldlib, proj, sneaky, tinydep\n"
        "print(proj.V, tinydep.D, oldlib.WHO, u.find_spec('unasked'), u.find_spec('tests'),"
        " [e.name for e in m.entry_points(group='pytest11')])\n"
    )
    out = subprocess.run(
        [python, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["2", "deep", "oldlib", "None", "None", "[]"]


def test_a_new_package_stays_with_its_files_but_never_as_a_start_up_module(
    tmp_path: Path,
) -> None:
    """A project installed as a copy brings a new package directory: it stays with the
    files its RECORD lists. A package named ``sitecustomize`` would run at every
    interpreter start, as the module would: it goes, directory and all."""
    source, view = make_view(tmp_path)
    guard = EnvGuard(view, tmp_path / "backup", source, frozenset({"proj"}))
    guard.snapshot()
    claim(
        view,
        {
            f"{SITE}/proj/__init__.py": b"V = 1\n",
            f"{SITE}/proj/sub/core.py": b"C = 1\n",
            f"{SITE}/sitecustomize/__init__.py": b"import os\n",
        },
    )
    assert guard.put_back() == [
        f"env:{SITE}/sitecustomize",
        f"env:{SITE}/sitecustomize/__init__.py",
    ]
    assert (view / SITE / "proj" / "sub" / "core.py").read_text() == "C = 1\n"
    assert not (view / SITE / "sitecustomize").exists()


def test_a_private_file_rewritten_in_place_with_its_size_and_time_is_put_back(
    tmp_path: Path,
) -> None:
    """The view's private copies (a .pth that runs at every start) are the sandbox's to
    write: same inode, same size, the old mtime set back. Its change time still moved."""
    source, view = make_view(tmp_path)
    guard = EnvGuard(view, tmp_path / "backup", source, frozenset({"proj"}))
    pth = view / SITE / "distutils-precedence.pth"
    before = pth.stat()
    guard.snapshot()
    forged = b"import evil; evil.force('ok') \n"
    assert len(forged) == before.st_size
    with pth.open("r+b") as fh:  # in place: the inode stays
        fh.write(forged)
    os.utime(pth, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = pth.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
    assert guard.put_back() == [f"env:{SITE}/distutils-precedence.pth"]
    assert pth.read_text() == "import os; os.environ.get('x')\n"


@pytest.mark.skipif(not overlay.can_mount(), reason="mounting needs a root engine")
def test_a_file_of_the_build_is_put_back_in_a_view_mounted_copy_on_write(
    tmp_path: Path,
) -> None:
    """Over a mounted view the build's file cannot be linked back (another device): its
    bytes are, with its mode, and the build's own file is never touched."""
    source, linked = make_view(tmp_path)  # the prepared environment, as links
    view = tmp_path / "mounted"
    assert overlay.mount(linked, tmp_path / "layers", view)
    try:
        guard = EnvGuard(view, tmp_path / "backup", source, frozenset({"proj"}))
        guard.snapshot()
        (view / SITE / "six.py").unlink()
        (view / SITE / "six.py").write_text("S = 'forced'\n")
        assert guard.put_back() == [f"env:{SITE}/six.py"]
        assert (view / SITE / "six.py").read_text() == "S = 1\n"
        assert (source / SITE / "six.py").read_text() == "S = 1\n"
        assert (linked / SITE / "six.py").read_text() == "S = 1\n"
    finally:
        overlay.unmount(view)
