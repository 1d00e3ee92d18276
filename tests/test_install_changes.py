"""The Docker backend's judge of what an install phase changed (install_changes.py), on
change lists as the daemon gives them: an honest editable install passes; a changed
system, a start-up module, a .pth that runs code, a pytest plugin, a launcher named like
the test command, another distribution's file or a finder that is not setuptools' do not."""

from __future__ import annotations

import inspect

from setuptools.command import editable_wheel

from swegreen.containers import install_changes as ic
from swegreen.containers.install_changes import (
    FINDER_TEMPLATE_AT,
    EnvChanges,
    gitconfig_added,
    leaves,
    outside,
    parse,
)

ENV = "/opt/miniconda3/envs/testbed"
SITE = f"{ENV}/lib/python3.11/site-packages"
META = f"{SITE}/ledger-2.0.dist-info"
FINDER = f"{SITE}/__editable___ledger_2_0_finder.py"
EDITABLE_PTH = f"{SITE}/__editable__.ledger-2.0.pth"
RECORD = (
    "__editable__.ledger-2.0.pth,sha256=x,10\n"
    "__editable___ledger_2_0_finder.py,sha256=y,20\n"
    "ledger-2.0.dist-info/METADATA,,\nledger-2.0.dist-info/RECORD,,\n"
)
SETUPTOOLS = inspect.getsource(editable_wheel)
COMMANDS = frozenset({"pytest"})


def finder_text(mapping: dict[str, str]) -> str:
    return editable_wheel._FINDER_TEMPLATE.format(
        name="__editable___ledger_2_0_finder", mapping=mapping, namespaces={}
    )


def daemon(*entries: tuple[str, int]) -> list:
    """A change list as the daemon gives it, parents of each path included."""
    seen: dict[str, int] = {}
    for path, kind in entries:
        parts = path.split("/")
        for i in range(2, len(parts)):
            seen.setdefault("/".join(parts[:i]), 0)
        seen[path] = kind
    return parse([{"Path": p, "Kind": k} for p, k in seen.items()])


HONEST = [
    ("/testbed/ledger.egg-info/PKG-INFO", 1),
    ("/root/.cache/pip/http/x", 1),
    (f"{META}/METADATA", 1),
    (f"{META}/RECORD", 1),
    (EDITABLE_PTH, 1),
    (FINDER, 1),
    (f"{SITE}/setuptools/__pycache__/dist.cpython-311.pyc", 1),
    ("/eval_prepare.sh", 1),
]


def judge(
    changes: list,
    now: dict | None = None,
    before: dict | None = None,
    same: frozenset = frozenset(),
) -> list[str]:
    env = EnvChanges.of(changes, ENV)
    now_paths, before_paths = env.wanted()
    texts = {
        f"{META}/RECORD": RECORD,
        EDITABLE_PTH: "import __editable___ledger_2_0_finder; "
        "__editable___ledger_2_0_finder.install()\n",
        FINDER: finder_text({"ledger": "/testbed/ledger"}),
        **(now or {}),
    }
    old = {f"{SITE}/{FINDER_TEMPLATE_AT}": SETUPTOOLS, **(before or {})}
    found = env.violations(
        {p: texts.get(p) for p in now_paths}, {p: old.get(p) for p in before_paths}, COMMANDS, same
    )
    return [f"{path} ({why})" for path, why in found]


def test_an_honest_editable_install_passes_and_its_bytecode_is_dropped() -> None:
    changes = daemon(*HONEST)
    assert outside(changes, ENV, "/testbed", ["/eval_prepare.sh"]) == []
    assert judge(changes) == []
    assert EnvChanges.of(changes, ENV).bytecode() == [
        f"{SITE}/setuptools/__pycache__/dist.cpython-311.pyc"
    ]
    # the parents the daemon lists are not changes of their own
    assert {c.path for c in leaves(changes)} >= {
        f"{META}/RECORD",
        "/testbed/ledger.egg-info/PKG-INFO",
    }
    assert ENV not in {c.path for c in leaves(changes)}


def test_a_changed_system_is_named() -> None:
    changes = daemon(*HONEST, ("/usr/bin/git", 0), ("/etc/ld.so.preload", 1), ("/bin/sh", 2))
    assert outside(changes, ENV, "/testbed", ["/eval_prepare.sh"]) == [
        "/bin/sh",
        "/etc/ld.so.preload",
        "/usr/bin/git",
    ]


def test_what_no_install_of_the_project_writes_is_named() -> None:
    cases = {
        f"{SITE}/sitecustomize.py": ((1,), {}, "every interpreter start"),
        f"{SITE}/evil.pth": (
            (1,),
            {f"{SITE}/evil.pth": "import os; os.system('x')\n"},
            "runs code",
        ),
        f"{SITE}/_pytest/python.py": ((0,), {}, "another distribution's file changed"),
        f"{SITE}/pluggy/__init__.py": ((2,), {}, "another distribution's file removed"),
        f"{ENV}/bin/pytest": ((0,), {}, "named like a command the test phase runs"),
        f"{ENV}/lib/python3.11/os.py": ((0,), {}, "outside site-packages and bin/"),
        f"{SITE}/planted.py": ((1,), {}, "no reinstalled distribution's record lists it"),
        f"{META}/entry_points.txt": (
            (1,),
            {f"{META}/entry_points.txt": "[pytest11]\nforce = ledger.planted\n"},
            "a new pytest plugin entry point",
        ),
    }
    for path, ((kind,), texts, why) in cases.items():
        found = judge(daemon(*HONEST, (path, kind)), texts)
        assert len(found) == 1 and path in found[0] and why in found[0], (path, found)


def test_a_finder_is_setuptools_own_code_with_its_packages_in_the_checkout() -> None:
    evil = finder_text({"ledger": "/testbed/ledger"}) + "\nimport os\nos.system('x')\n"
    outside_checkout = finder_text({"ledger": "/tmp/ledger"})
    for text in (evil, outside_checkout):
        found = judge(daemon(*HONEST), {FINDER: text})
        assert found and "not setuptools'" in found[0], found
    # without the image's setuptools to compare with, no finder is taken on trust
    found = judge(daemon(*HONEST), before={f"{SITE}/{FINDER_TEMPLATE_AT}": None})
    assert found and "not setuptools'" in found[0]


def test_the_global_git_configuration_may_gain_only_safe_directories() -> None:
    before = "[user]\n\tname = x\n"
    honest = before + "[safe]\n\tdirectory = /testbed\n"
    assert gitconfig_added(honest, before) == []
    assert gitconfig_added("[safe]\n\tdirectory = /testbed\n", None) == []
    hostile = honest + "[core]\n\tfsmonitor = /tmp/x\n[alias]\n\tst = !sh\n"
    assert gitconfig_added(hostile, before) == ["alias.st = !sh", "core.fsmonitor = /tmp/x"]


def test_a_develop_reinstall_and_a_plain_reinstall_pass() -> None:
    """``setup.py develop`` (scikit-learn's install) writes its egg-link and launchers
    again with the same bytes; ``pip install .`` (requests') removes the old copy its
    record lists and writes the new one."""
    link, launcher = f"{SITE}/scikit_learn.egg-link", f"{ENV}/bin/skl-tool"
    develop = daemon((link, 0), (f"{SITE}/easy-install.pth", 0), (launcher, 0))
    assert (
        judge(develop, {f"{SITE}/easy-install.pth": "/testbed\n"}, same=frozenset({launcher})) == []
    )
    found = judge(develop, {f"{SITE}/easy-install.pth": "/testbed\n"})
    assert [f.split(" (")[0] for f in found] == [launcher]  # unless its bytes are the image's
    assert EnvChanges.of(develop, ENV).changed([launcher, link]) == [launcher, link]

    meta = f"{SITE}/requests-2.0.dist-info"
    record = "requests/__init__.py,sha256=a,1\nrequests-2.0.dist-info/RECORD,,\n"
    plain = daemon(
        (f"{SITE}/requests/__init__.py", 0),
        (f"{SITE}/requests/old.py", 2),
        (f"{meta}/RECORD", 0),
        (f"{meta}/direct_url.json", 1),
    )
    env = EnvChanges.of(plain, ENV)
    assert env.reinstalled() == {meta: "C"}
    now_paths, before_paths = env.wanted()
    assert f"{meta}/RECORD" in now_paths and f"{meta}/RECORD" in before_paths
    old_record = record + "requests/old.py,sha256=b,1\n"
    found = env.violations({f"{meta}/RECORD": record}, {f"{meta}/RECORD": old_record}, COMMANDS)
    assert found == []


def test_a_record_may_place_data_files_but_no_code_outside_site_packages() -> None:
    data, activate = f"{ENV}/share/ledger/x.json", f"{ENV}/etc/conda/activate.d/x.sh"
    stdlib = f"{ENV}/lib/python3.11/os.py"
    record = RECORD + "".join(
        f"{p.replace(SITE + '/', '')},,\n"
        for p in (
            "../../../share/ledger/x.json",
            "../../../etc/conda/activate.d/x.sh",
            "../os.py",
        )
    )
    changes = daemon(*HONEST, (data, 1), (activate, 1), (stdlib, 0))
    found = judge(changes, {f"{META}/RECORD": record})
    named = sorted(f.split(" (")[0] for f in found)
    assert named == [activate, stdlib], found


def test_a_setup_py_install_rewrites_its_own_egg_but_adds_no_other() -> None:
    """django's eval script runs ``python setup.py install``: the image's egg gets the
    patched code, its launcher the same bytes; a new egg of another name (which an old
    ``easy-install.pth`` would put before pytest) is not the project's."""
    egg = f"{SITE}/Django-3.0-py3.6.egg"
    launcher = f"{ENV}/bin/django-admin"
    install = [
        ("/testbed/Django.egg-info/SOURCES.txt", 0),
        (f"{egg}/django/db/models/query.py", 0),
        (f"{egg}/EGG-INFO/SOURCES.txt", 0),
        (f"{SITE}/easy-install.pth", 0),
        (launcher, 0),
    ]
    pth = {f"{SITE}/easy-install.pth": "./Django-3.0-py3.6.egg\n"}
    assert judge(daemon(*install), pth, same=frozenset({launcher})) == []
    fake = f"{SITE}/pytest-9.0-py3.6.egg"
    new_egg = daemon(*install, (fake, 1), (f"{fake}/pytest.py", 1))  # the daemon: A for both
    found = judge(new_egg, pth, same=frozenset({launcher}))
    why = "a new egg that is not the project's"
    assert found == [f"{fake} ({why})", f"{fake}/pytest.py ({why})"], found


def test_every_write_to_git_but_the_index_is_named() -> None:
    """A replace ref has the test files put back from another tree; configuration and
    hooks name programs; grafts and alternates change history and objects: no install
    writes them. The index git's own status refreshes."""
    changes = ic.parse(
        [
            {"Path": "/testbed/.git", "Kind": 0},
            {"Path": "/testbed/.git/index", "Kind": 0},
            {"Path": "/testbed/.git/refs", "Kind": 0},
            {"Path": "/testbed/.git/refs/replace", "Kind": 1},
            {"Path": "/testbed/.git/refs/replace/" + "a" * 40, "Kind": 1},
            {"Path": "/testbed/.git/packed-refs", "Kind": 0},
            {"Path": "/testbed/.git/objects/info/alternates", "Kind": 1},
            {"Path": "/testbed/.git/config", "Kind": 0},
            {"Path": "/testbed/setup.py", "Kind": 0},
        ]
    )
    assert ic.git_changes(changes, "/testbed") == [
        "/testbed/.git/config",
        "/testbed/.git/objects/info/alternates",
        "/testbed/.git/packed-refs",
        "/testbed/.git/refs/replace",  # a new directory is a write too
        "/testbed/.git/refs/replace/" + "a" * 40,
    ]
    assert ic.git_changes(ic.parse([{"Path": "/testbed/.git/index", "Kind": 0}]), "/testbed") == []
