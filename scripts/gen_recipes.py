"""Generate shared/swegreen/data/swebench_recipes.json from the official specs.

The facts come from swebench 4.1.0 on PyPI (``MAP_REPO_VERSION_TO_SPECS_PY`` and the
requirement/environment file paths), the last release that still carries per-repo
environment specs. Conda parts are translated to pip; what cannot be translated is
recorded in each recipe's ``notes``; deliberate changes are the OVERRIDES table below,
each with its reason.

    python scripts/gen_recipes.py            # downloads swebench==4.1.0 into a temp dir
    python scripts/gen_recipes.py --check    # fail if the committed file is out of date
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shlex
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "shared"))

from swegreen.core.recipes import Recipe  # noqa: E402
from swegreen.environments.requirements import translate_specs  # noqa: E402

OUT = ROOT / "shared" / "swegreen" / "data" / "swebench_recipes.json"
UPSTREAM = "swebench==4.1.0"
FREEZE_DATE = "2024-08-01"  # near the official images' build; see docs/environments.md

# The 12 repositories of SWE-bench Verified and their official log parsers (swebench 5.x names).
LOG_PARSERS = {
    "astropy/astropy": "parse_log_astropy",
    "django/django": "parse_log_django",
    "matplotlib/matplotlib": "parse_log_matplotlib",
    "mwaskom/seaborn": "parse_log_seaborn",
    "pallets/flask": "parse_log_flask",
    "psf/requests": "parse_log_requests",
    "pydata/xarray": "parse_log_xarray",
    "pylint-dev/pylint": "parse_log_pylint",
    "pytest-dev/pytest": "parse_log_pytest",
    "scikit-learn/scikit-learn": "parse_log_scikit",
    "sphinx-doc/sphinx": "parse_log_sphinx",
    "sympy/sympy": "parse_log_sympy",
}

# Deliberate departures from a plain translation: (repo, versions or "*", changes, reason).
OVERRIDES: list[tuple[str, Any, dict[str, Any], str]] = [
    (
        "pydata/xarray",
        "*",
        {"exclude_newer_exempt": ["eccodes", "findlibs"]},
        "wheels of eccodes/findlibs from before the freeze date lack the eccodes C library "
        "that conda supplied; newer wheels bundle it",
    ),
    (
        "psf/requests",
        [
            "0.7",
            "0.8",
            "0.9",
            "0.11",
            "0.13",
            "0.14",
            "1.1",
            "1.2",
            "2.0",
            "2.2",
            "2.3",
            "2.4",
            "2.5",
            "2.7",
            "2.8",
        ],
        {"services": ["httpbin"]},
        "these suites call httpbin.org (HTTPBIN_URL); a local httpbin on the sandbox's own "
        "loopback stands in for it (from 2.9 the suites start pytest-httpbin themselves)",
    ),
    (
        "scikit-learn/scikit-learn",
        ["0.20", "0.21", "0.22"],
        {"constraints": ["cython<3", "pytest<7"]},
        "upstream's conda environment for Python 3.6 gets conda's last builds for 3.6: "
        "Cython 0.29 (Cython 3 was never built for it there; PyPI's 3.0.10 installs on 3.6 "
        "but cannot compile these versions' .pyx files) and pytest 6.2 (the dataset's test "
        "ids show it: scikit-learn-14983's P2P names test_shufflesplit_errors[None-train_size3], "
        "the id pytest 6 gives a complex parameter; PyPI's pytest 7.0.1 for 3.6 names it "
        "[None-1j], so the test would count as missing)",
    ),
]

_APT_INSTALL = re.compile(r"apt-get\s+(?:-\S+\s+)*install\s+(.*?)(?:&&|;|$)")
_LOCALE_GEN = re.compile(r"locale-gen\s*([A-Za-z_]+\.UTF-8)?")


def load_upstream() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", UPSTREAM, "-d", tmp],
            check=True,
        )
        wheel = next(Path(tmp).glob("swebench-4.1.0-*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            source = zf.read("swebench/harness/constants/python.py").decode()
        path = Path(tmp) / "python_specs.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location("python_specs", path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return {
            "specs": module.MAP_REPO_VERSION_TO_SPECS_PY,
            "reqs_paths": module.MAP_REPO_TO_REQS_PATHS,
            "env_yml_paths": module.MAP_REPO_TO_ENV_YML_PATHS,
        }


def translate(repo: str, version: str, spec: dict[str, Any], up: dict[str, Any]) -> dict[str, Any]:
    notes: list[str] = []
    out: dict[str, Any] = {"python": spec["python"], "exclude_newer": FREEZE_DATE}
    packages = spec.get("packages", "")
    if packages == "requirements.txt":
        out["requirements"] = up["reqs_paths"][repo]
    elif packages == "environment.yml":
        out["requirements"] = up["env_yml_paths"][repo]
        out["requirements_kind"] = "conda_env"
        notes.append(
            "environment.yml: conda dependencies and its pip list are installed with "
            "pip in one resolve, conda names mapped to PyPI names"
        )
    elif packages:
        tr = translate_specs(shlex.split(packages))
        out["packages"] = tr.requirements
        if tr.dropped:
            notes.append(f"conda-only packages not installed by pip: {', '.join(tr.dropped)}")
    if spec.get("pip_packages"):
        out["pip_packages"] = list(spec["pip_packages"])
    pre, system, locales = [], [], []
    for cmd in spec.get("eval_commands", []):
        m = _LOCALE_GEN.search(cmd)
        if m:
            locales.append(m.group(1) or "en_US.UTF-8")
    for step in spec.get("pre_install", []):
        installs = _APT_INSTALL.findall(step)
        if installs:
            for group in installs:
                system += [p for p in group.split() if not p.startswith("-")]
            continue
        if step.startswith(("apt-get", "echo 'en_US UTF-8' > /etc/locale.gen")):
            continue  # apt-get update/upgrade; the locale list (locales handles it)
        m = _LOCALE_GEN.search(step)
        if m:
            locales.append(m.group(1) or "en_US.UTF-8")
            continue
        pre.append(step.replace("/testbed", "$SWEGREEN_REPO"))
    if locales:
        system = [p for p in system if p != "locales"]  # localedef replaces the package
    if system:
        out["system_packages"] = sorted(set(system))
        notes.append(
            "apt-get install: Debian packages are downloaded and unpacked into the "
            "environment's sysroot (PATH/LD_LIBRARY_PATH point at it), no root needed"
        )
    if any("qhull.org" in p for p in pre):
        notes.append(
            "qhull is downloaded from qhull.org before the build, as upstream does; "
            "a machine without that host cannot build these versions"
        )
    if pre:
        out["pre_install"] = pre
    evals = [c for c in spec.get("eval_commands", []) if not _LOCALE_GEN.search(c)]
    if locales:
        out["locales"] = sorted(set(locales))
        notes.append(
            "locale-gen needs root: the locale is compiled into the environment with "
            "localedef and found through LOCPATH"
        )
    if evals:
        out["eval_commands"] = evals
    if evals != spec.get("eval_commands", []):
        # The instance images run upstream's own (the Docker backend's eval script).
        out["upstream_eval_commands"] = spec["eval_commands"]
    if spec.get("install"):
        out["install"] = spec["install"]
    out["test_cmd"] = spec["test_cmd"]
    out["log_parser"] = LOG_PARSERS[repo]
    if repo == "django/django":
        out["directive_style"] = "django"
    if "nano_cpus" in spec:
        out["cpus"] = spec["nano_cpus"] / 1e9
        notes.append(
            f"upstream limits this image to {out['cpus']:g} CPUs; the test command sees "
            "that CPU quota in its cgroup files, as under Docker (pylint sizes its jobs "
            "and skips its needs_two_cores tests by it)"
        )
    if spec.get("no_use_env"):
        notes.append(
            "upstream creates the conda env before applying environment.yml "
            "(no_use_env); one pip resolve makes that distinction moot"
        )
    for o_repo, versions, changes, reason in OVERRIDES:
        if o_repo == repo and (versions == "*" or version in versions):
            out.update(changes)
            notes.append(f"override: {reason}")
    out["notes"] = notes
    Recipe.model_validate(out)  # everything generated must be a valid recipe
    return out


def generate() -> dict[str, Any]:
    up = load_upstream()
    recipes = {
        repo: {
            version: translate(repo, version, spec, up)
            for version, spec in sorted(up["specs"][repo].items())
        }
        for repo in sorted(LOG_PARSERS)
    }
    return {
        "source": f"{UPSTREAM} MAP_REPO_VERSION_TO_SPECS_PY, translated by scripts/gen_recipes.py",
        "freeze_date": FREEZE_DATE,
        "recipes": recipes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = json.dumps(generate(), indent=1, sort_keys=True) + "\n"
    if args.check:
        if OUT.read_text() != text:
            print(f"{OUT} is out of date: run python scripts/gen_recipes.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
