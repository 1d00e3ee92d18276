"""The local stand-ins for network services (services.py): old requests suites call
httpbin.org, which the test command's network namespace cannot reach; a private httpbin,
from an environment the engine builds, answers on its loopback instead."""

from __future__ import annotations

import asyncio
from pathlib import Path

from swegreen.core.eval_script import sandboxed
from swegreen.core.recipes import Recipe
from swegreen.evaluation.engine import LocalSettings, build_testbeds
from swegreen.sample import SampleBenchmark
from swegreen.sandbox.environ import sandbox_env
from swegreen.sandbox.isolation import Isolation, Mounts, SandboxPolicy

from .conftest import sample_config

PROBE = (
    "python3 -c 'import json, os, urllib.request;"
    ' answer = urllib.request.urlopen(os.environ["HTTPBIN_URL"] + "get?probe=1", timeout=30);'
    ' print("args", json.load(answer)["args"])\''
)


def test_a_recipes_httpbin_answers_the_tests_inside_their_network_namespace(
    settings: LocalSettings,
    sample: SampleBenchmark,
    host_env: dict[str, str],
    isolation: Isolation,
    tmp_path: Path,
) -> None:
    """As a requests 2.3 row's tests see it: HTTPBIN_URL set, the service up before the
    test command starts, on a loopback no other run shares, and no other network."""
    testbeds = build_testbeds(settings, sample_config(sample), host_env, isolation=isolation)
    try:
        recipe = Recipe(python="host", test_cmd="true", services=("httpbin",))
        policy = SandboxPolicy(timeout=300)
        assert testbeds.sandbox.isolates(policy)  # the test command's own network namespace
        snippets = asyncio.run(testbeds._services(recipe, policy))
        wrapper = testbeds.sandbox.test_wrapper(policy, snippets)
        work = tmp_path / "work"
        work.mkdir()
        script = tmp_path / "eval.sh"
        outside = (
            "python3 -c 'import urllib.request;"
            ' urllib.request.urlopen("http://1.1.1.1", timeout=5)\''
        )
        script.write_text(
            f"{wrapper.setup or ':'}\n"
            f"{sandboxed(PROBE, wrapper.prefix)}\n"
            f"{sandboxed(outside + ' && echo internet', wrapper.prefix)} || echo no-internet\n"
        )
        testbeds.sandbox.lend([work])
        env = sandbox_env(bin_dirs=[], virtual_env=None, scratch=work, host_env={})
        result = asyncio.run(
            testbeds.sandbox.run_script(
                script,
                cwd=work,
                env=env,
                policy=policy,
                log_path=tmp_path / "log.txt",
                mounts=Mounts(writable=(work,), readonly=(testbeds.envs.root,)),
            )
        )
        assert "args {'probe': '1'}" in result.output, result.output
        assert "no-internet" in result.output and "\ninternet" not in result.output
    finally:
        testbeds.close()
