"""The green agent as AgentBeats runs it, on this machine: the image built from a clean
clone, started under Amber's security context with the framework.docker socket made the
way Amber makes it, given a real assessment, its verdicts checked.

    .venv/bin/python scripts/platform_check.py [--docker] [--target T] [--no-build] [--rows N]
                                               [--publish] [--gateway DIR]

What it does (docs/agentbeats-platform.md, "Checked as the platform runs it"):
1. builds the image from a clean clone of HEAD (uncommitted changes are not in it), by the
   image workflow's recipe (.github/workflows/green-image.yml): `green-docker`
   (container/green-docker.Dockerfile; the dataset from ../shared/data, as the hub is out
   of reach here) or `green-agent` (container/Dockerfile; its Python 3.11 from conda
   packages of a channel on 127.0.0.1 that stands in for conda's: this machine's CPython
   packaged as conda packages it, tests/conda_channel.py); this machine's CA certificates in;
2. starts it as Amber's Compose backend does: `--cap-drop ALL`, `no-new-privileges`, the
   image's own (non-root) user, Docker's default seccomp profile, and a cleared
   environment: the manifest's `program.env` plus PATH, HOME and TMPDIR, then its
   `program.entrypoint`; `--network host` only (this machine's rule: no bridge). Before the
   program, a stand-in of Amber's helper (tests/docker_support/amber_helper.py), as the
   image's user inside the container, binds the framework.docker socket at the manifest's
   mount path and forwards it over TCP to a stand-in of Amber's Docker gateway
   (tests/docker_support/gateway.py); a path the user cannot bind ends it, no card;
   With --publish the image is first pushed to a registry on 127.0.0.1 (Debian's
   docker-registry), every local name of it dropped, the manifest rendered with its digest
   as the workflow renders it, and the image pulled back by that digest: what starts is
   what the manifest names;
3. times its agent card (the gateway gives 30 s; the aim is 5);
4. serves five public participants' contracts (tests/a2a/contracts.py, a2a-sdk 0.3,
   text-only cards) on 127.0.0.1 and runs one assessment of the bundled sample with the
   shipped defaults: through the real AgentBeats gateway when --gateway (or
   $AGENTBEATS_GATEWAY) names a checkout of RDI-Foundation/agentbeats-gateway (kept out
   of this repository), else with an a2a-sdk 0.3 client as the gateway's;
5. checks that the task completed and every participant resolved every row, and prints a
   table for the docs. Exit 0 when all holds.

With --docker, rows are graded in the sample's instance images (built here like the
official ones) through the gateway stand-in; without it, the green-agent image builds the
environments itself under Landlock. Needs a Docker daemon (../shared/tools/docker-here.sh
makes one here) and the a2a-sdk 0.3 interpreter the tests use (.venv-a2a03; made if missing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import json5

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.a2a.venv03 import a2a03_python  # noqa: E402  (the tests' own 0.3 interpreter)

IMAGES = {"green-docker": "swegreen-green-docker:check", "green-agent": "swegreen-green:check"}
HELPER = ROOT / "tests" / "docker_support" / "amber_helper.py"
DATASET = ROOT.parent / "shared" / "data" / "swebench_verified.jsonl"
CONTAINER = "swegreen-platform-check"
CONTRACTS = ("mini", "purple", "tagged", "agentswe", "pro")
HOST_CAS = Path("/usr/local/share/ca-certificates")


def say(text: str) -> None:
    print(f"platform-check: {text}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, text=True, check=True, **kw)


def wait_for_card(url: str, timeout: float, proc: subprocess.Popen[Any] | None = None) -> float:
    """Seconds until the agent card answers (polled every 50 ms)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{url}: the process ended with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}.well-known/agent-card.json", timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - start
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"no agent card at {url} within {timeout:g} s")


def build(image: str, target: str) -> dict[str, Any]:
    """The workflow's recipe, from a clean clone of HEAD."""
    if run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True).stdout.strip():
        say("note: uncommitted changes are not in the image (it is built from HEAD)")
    clone = Path(tempfile.mkdtemp(prefix="swegreen-clone-"))
    stack = contextlib.ExitStack()
    try:
        run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)])
        for crt in HOST_CAS.glob("*.crt"):
            shutil.copy(crt, clone / "container" / "ca-certificates" / crt.name)
        argv = ["docker", "build", "--network", "host", "-t", image]
        if target == "green-docker":
            # the workflow reads the hub at DATASET_REVISION; this machine cannot reach it
            shutil.copy(DATASET, clone / "container" / "dataset" / "swebench_verified.jsonl")
            argv += ["-f", "container/green-docker.Dockerfile"]
            argv += ["--build-arg", "DATASET_SOURCE=context"]
        else:
            argv += ["-f", "container/Dockerfile", "--target", target]
            # conda's channels are out of reach here: a channel of this machine's CPython
            # 3.11 packaged as conda packages it (tests/conda_channel.py) stands in
            channel = stack.enter_context(local_conda_channel(clone.parent / f"{clone.name}-ch"))
            argv += ["--build-arg", f"PYTHON_CHANNELS={channel}"]
            argv += ["--build-arg", "PYTHON_VERSIONS=3.11"]
        say(f"building {image} ({target}) from a clean clone (classic builder, host network)")
        t0 = time.monotonic()
        run([*argv, "."], cwd=clone, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    finally:
        stack.close()
        shutil.rmtree(clone, ignore_errors=True)
    size = run(["docker", "image", "inspect", "-f", "{{.Size}}", image], capture_output=True)
    return {"build_seconds": round(time.monotonic() - t0), "image_mb": int(size.stdout) >> 20}


@contextlib.contextmanager
def local_conda_channel(root: Path) -> Any:
    """A conda channel of this machine's CPython 3.11 on 127.0.0.1 (the build's network is
    the host's); yields its URL."""
    from tests.conda_channel import index, package_python, pyenv_tree, served

    tree = pyenv_tree("3.11")
    if tree is None:
        raise SystemExit("no CPython 3.11 in pyenv here to stand in for conda's channel")
    try:
        package_python(tree, root)
        index(root)
        with served(root) as url:
            yield url
    finally:
        shutil.rmtree(root, ignore_errors=True)


def amber_command(
    manifest: dict[str, Any],
    port: int,
    proxy: str | None,
    gateway: str,
    overrides: dict[str, str],
) -> list[str]:
    """The manifest's program as Amber starts it: its helper first (binding the
    framework.docker socket at the mount's path, as the image's user), then the program
    with a cleared environment of program.env (its `when` entries only where their
    condition holds) plus PATH, HOME, TMPDIR, then the entry point."""
    program = manifest["program"]
    env: dict[str, str] = {"PATH": "/opt/swegreen/venv/bin:/usr/local/bin:/usr/bin:/bin"}
    env.update(HOME="/home/swegreen", TMPDIR="/tmp")
    for name, value in program["env"].items():
        if isinstance(value, dict):
            if value["when"] == "slots.proxy.url" and proxy:
                env[name] = proxy
            continue  # a config value nobody set
        env[name] = value
    env.update(overrides)
    [mount] = [m["path"] for m in program["mounts"] if m["from"] == "framework.docker"]
    entry = [*program["entrypoint"].split(), "--port", str(port)]
    helper = ["/opt/swegreen/venv/bin/python", "/amber/helper.py", "--docker-mount", mount]
    return [
        "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()),
        *helper, "--gateway", gateway.removeprefix("tcp://"), "--", *entry,
    ]  # fmt: skip


def start_green(
    manifest: dict[str, Any],
    image: str,
    port: int,
    proxy: str | None,
    gateway: str,
    overrides: dict[str, str],
) -> dict[str, Any]:
    subprocess.run(["docker", "rm", "-f", CONTAINER], capture_output=True)
    argv = [
        "docker", "run", "-d", "--name", CONTAINER, "--network", "host",
        "--cap-drop", "ALL", "--security-opt", "no-new-privileges:true",
        "-v", f"{HELPER}:/amber/helper.py:ro", "--entrypoint", "/usr/bin/env", image,
    ]  # fmt: skip
    command = amber_command(manifest, port, proxy, gateway, overrides)
    t0 = time.monotonic()
    run([*argv, *command[1:]], capture_output=True)
    try:
        wait_for_card(f"http://127.0.0.1:{port}/", 30)
    except SystemExit:
        logs = subprocess.run(["docker", "logs", CONTAINER], capture_output=True, text=True)
        say(f"the green's output:\n{logs.stdout}{logs.stderr}")
        raise
    card = time.monotonic() - t0  # from `docker run` to the card
    user = run(["docker", "exec", CONTAINER, "id", "-u"], capture_output=True).stdout.strip()
    caps = run(
        ["docker", "exec", CONTAINER, "grep", "CapEff", "/proc/1/status"], capture_output=True
    ).stdout.split()[-1]
    return {
        "card_seconds": round(card, 2),
        "uid": user,
        "effective_caps": caps,
    }


def start_participants(
    work: Path, gold: dict[str, str], image_template: str | None
) -> dict[str, tuple[str, Any]]:
    """The five contracts; with ``image_template`` each checks that its task names the
    image the green agent grades in (tests/a2a/contracts.py, ``expected_image``)."""
    python = a2a03_python()
    env = dict(os.environ)
    if image_template:
        env["CONTRACT_IMAGE_TEMPLATE"] = image_template
    (work / "gold.json").write_text(json.dumps(gold))
    script = ROOT / "tests" / "a2a" / "participant_v03.py"
    running = {}
    for name in CONTRACTS:
        port = free_port()
        log = (work / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            [str(python), str(script), str(port), name, str(work / "gold.json"), str(work)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        running[name] = (f"http://127.0.0.1:{port}/", proc)
    for url, proc in running.values():
        wait_for_card(url, 60, proc)
    return running


def through_gateway(
    gateway: Path, green: str, participants: dict[str, str], config: dict[str, Any], work: Path
) -> tuple[dict[str, Any], str]:
    """The gateway's own program (src/main.py) with the environment Amber gives it."""
    proxy_port, results_port = free_port(), free_port()
    # Amber's slot URLs have no trailing slash; the gateway appends "/<path>" to them
    urls = [url.rstrip("/") for url in participants.values()]
    slots = {"green": green.rstrip("/")} | {f"purple{i}": url for i, url in enumerate(urls, 1)}
    roles = {"green": "green"} | {f"purple{i}": r for i, r in enumerate(participants, 1)}
    env = {
        **os.environ,
        "SERVICE_URLS": json.dumps(slots),
        "PARTICIPANT_ROLES": json.dumps(roles),
        "ASSESSMENT_CONFIG": json.dumps(config),
    }
    log_path = work / f"gateway-{'-'.join(participants)}.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [str(a2a03_python()), "src/main.py", "--proxy-port", str(proxy_port), "--results-port",
         str(results_port)],
        cwd=gateway, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(
                    f"the gateway ended with {proc.returncode}: see {work}/gateway.log"
                )
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{results_port}/", timeout=5) as r:
                    body = json.loads(r.read())
                if body.get("status") != "running":
                    # the results hold no reason; the gateway printed the green's last status
                    said = log_path.read_text(errors="replace").rpartition("[Status: ")[2]
                    body["statuses"] = [" ".join(said.split("\n\n")[0].split())[:600]]
                    return body, "the AgentBeats gateway"
            except OSError:
                pass
            time.sleep(2)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def direct(
    green: str, participants: dict[str, str], config: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    out = run(
        [str(a2a03_python()), str(ROOT / "tests" / "a2a" / "client_v03.py"), green,
         json.dumps({"participants": participants, "config": config})],
        capture_output=True,
    )  # fmt: skip
    result = json.loads(out.stdout)
    outcome = {"status": result["state"], "results": result["results"]}
    return outcome | {"statuses": result["statuses"]}, "an a2a-sdk 0.3 client"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--target",
        choices=sorted(IMAGES),
        default="green-docker",
        help="green-docker (the manifest's image: needs --docker) or green-agent (builds "
        "environments itself under Landlock)",
    )
    parser.add_argument("--image", help="the image's tag (default: one per target)")
    parser.add_argument("--no-build", action="store_true", help="use the image as it is")
    parser.add_argument("--rows", type=int, default=-1, help="sample rows (-1: all eight)")
    parser.add_argument("--gateway", type=Path, default=os.environ.get("AGENTBEATS_GATEWAY"))
    parser.add_argument("--keep", action="store_true", help="leave the container running")
    parser.add_argument(
        "--publish",
        action="store_true",
        help="push the image to a registry on 127.0.0.1 (Debian's docker-registry), render the "
        "manifest with its digest as the image workflow does, and run what that pulls",
    )
    parser.add_argument(
        "--docker",
        action="store_true",
        help="hand the green a Docker engine as framework.docker does, behind a stand-in of "
        "Amber's Docker gateway (tests/docker_support/gateway.py): rows are graded in the sample's "
        "instance images (tests/docker_support/sample_images.py, built here)",
    )
    args = parser.parse_args()
    args.image = args.image or IMAGES[args.target]
    if args.target == "green-docker" and not args.docker:
        parser.error("green-docker grades rows only in their instance images: add --docker")
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        say("no Docker daemon answers: run ../shared/tools/docker-here.sh (as root) first")
        return 2
    t_start = time.monotonic()
    report: dict[str, Any] = {}
    if not args.no_build:
        report.update(build(args.image, args.target))
    sys.path.insert(0, str(ROOT / "shared"))
    from swegreen.core.dataset import load_dataset
    from swegreen.sample import build_sample

    work = Path(tempfile.mkdtemp(prefix="swegreen-platform-"))
    sample = build_sample(work / "sample")  # the participants' own copy, at the same commits
    instances = load_dataset(str(sample.dataset)).instances
    gold = {i.instance_id: i.patch for i in instances}
    running: dict[str, tuple[str, Any]] = {}
    stack = contextlib.ExitStack()
    try:
        # the platform mounts framework.docker whatever the request: the gateway is there
        gateway = docker_handed_in(stack, sample, instances, build_images=args.docker)
        from tests.docker_support.sample_images import TEMPLATE

        running = start_participants(work, gold, TEMPLATE if args.docker else None)
        port = free_port()
        overrides = {}
        if not args.docker:  # the green-agent image's own way: environments built here
            overrides = {
                "SWEGREEN_ENVIRONMENTS": "engine",
                "SWEGREEN_ISOLATION": "landlock",
                # the image's interpreters (Amber clears the image's ENV: declared again)
                "SWEGREEN_PYTHONS_DIR": "/opt/swegreen/pythons",
                "SWEGREEN_PYTHON_DOWNLOADS": "0",
            }
        image = args.image
        manifest = json5.loads((ROOT / "agentbeats" / "amber-manifest.json5").read_text())
        if args.publish:
            image = publish(args.image, local_registry(stack, work), args.target)
            manifest = rendered_manifest(image, work)
            report["image"] = manifest["program"]["image"]
            say(f"published and pulled back as {image}")
        started = start_green(manifest, image, port, None, gateway.listen, overrides)
        report.update(started)
        say(f"green agent up as uid {started['uid']}, card in {started['card_seconds']} s")
        config = {
            "dataset": "swegreen:sample",
            "max_rows": args.rows,
            "max_concurrent_rows": 2,
            "participant_timeout": 600,
            # where the participants clone from: their own copy (the green's is in its image)
            "participant_repo_url_template": str(
                sample.root / "participant-repos" / "{instance_id}.git"
            ),
        }
        if args.docker:
            config["docker_images"] = TEMPLATE
        green = f"http://127.0.0.1:{port}/"
        rows = len(instances) if args.rows < 0 else args.rows
        failures, report["verdicts"], report["assessment_seconds"] = [], {}, {}
        for name, (url, _) in running.items():  # one participant a submission, as on the platform
            t0 = time.monotonic()
            if args.gateway:
                outcome, how = through_gateway(Path(args.gateway), green, {name: url}, config, work)
            else:
                outcome, how = direct(green, {name: url}, config)
            report["assessment_seconds"][name] = round(time.monotonic() - t0)
            report["driven_by"] = how
            failures += check(name, outcome, rows, report)
            say(f"{name}: {report['verdicts'][name]}")
        if args.docker:
            report["docker_calls_refused"] = sorted(set(gateway.refused))
            report["docker_calls"] = len(gateway.allowed)
            left = docker_lib().DockerClient(base_url=gateway.listen)
            report["containers_left"] = len(left.containers.list(all=True))
            left.close()
            if gateway.refused or report["containers_left"]:
                failures.append(
                    f"docker: refused {gateway.refused}, {report['containers_left']} left"
                )
    finally:
        stack.close()
        logs = subprocess.run(["docker", "logs", CONTAINER], capture_output=True, text=True)
        (work / "green.log").write_text(logs.stdout + logs.stderr)
        if not args.keep:
            subprocess.run(["docker", "rm", "-f", CONTAINER], capture_output=True)
        for _, proc in running.values():
            proc.terminate()
    report["total_seconds"] = round(time.monotonic() - t_start)
    print(json.dumps(report, indent=2))
    for line in failures:
        say(f"FAILED: {line}")
    say(f"logs in {work}")
    return 1 if failures else 0


def docker_lib() -> Any:
    import docker

    return docker


def docker_handed_in(
    stack: contextlib.ExitStack, sample: Any, instances: Any, build_images: bool
) -> Any:
    """The gateway stand-in on a TCP port of 127.0.0.1, as Amber's Docker gateway listens
    for the helper of each component (the helper makes the socket in the container); with
    ``build_images``, the sample's instance images built first."""
    from tests.docker_support.gateway import running as gateway_running
    from tests.docker_support.sample_images import build_instances

    if build_images:
        t0 = time.monotonic()
        client = docker_lib().from_env()
        build_instances(client, sample.repos_dir, instances)
        client.close()
        say(f"sample images ready in {time.monotonic() - t0:.0f} s")
    return stack.enter_context(gateway_running("unix:///var/run/docker.sock", "tcp://127.0.0.1:0"))


def local_registry(stack: contextlib.ExitStack, work: Path) -> str:
    """Debian's docker-registry (distribution 2.8) on a free port of 127.0.0.1, for as long
    as the check runs: the image is pushed there and pulled back by its digest, as the
    platform pulls the published one. Docker trusts 127.0.0.0/8 registries without TLS."""
    exe = shutil.which("docker-registry")
    if exe is None:
        raise SystemExit(
            "--publish needs Debian's docker-registry: apt-get install docker-registry "
            "(only its binary is used; no service is started)"
        )
    port = free_port()
    config = work / "registry.yml"
    config.write_text(
        "version: 0.1\n"
        f"storage:\n  filesystem:\n    rootdirectory: {work / 'registry'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    log = (work / "registry.log").open("wb")
    proc = subprocess.Popen([exe, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    stack.callback(proc.wait, 30)
    stack.callback(proc.terminate)
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2):
                return f"127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the registry did not start: see {work}/registry.log") from None
            time.sleep(0.1)


def publish(image: str, registry: str, target: str) -> str:
    """Pushes ``image``, drops every local name of it and pulls it back by its digest:
    what runs is what a registry serves under that digest."""
    repo = f"{registry}/swegreen-{target}"
    run(["docker", "tag", image, f"{repo}:check"])
    run(["docker", "push", "--quiet", f"{repo}:check"], capture_output=True)
    digests = run(
        ["docker", "image", "inspect", "-f", "{{range .RepoDigests}}{{.}} {{end}}", image],
        capture_output=True,
    ).stdout.split()
    [ref] = [d for d in digests if d.startswith(f"{repo}@sha256:")]
    run(["docker", "rmi", f"{repo}:check", image], capture_output=True)
    run(["docker", "pull", "--quiet", ref], capture_output=True)
    run(["docker", "tag", ref, image])  # its local name again, for a later --no-build
    return ref


def rendered_manifest(image: str, work: Path) -> dict[str, Any]:
    """The manifest as the image workflow writes it (scripts/render_manifest.py)."""
    out = work / "amber-manifest.json5"
    run(
        [sys.executable, str(ROOT / "scripts" / "render_manifest.py"), "--image", image,
         "--out", str(out)],
        capture_output=True,
    )  # fmt: skip
    return json5.loads(out.read_text())


def check(name: str, outcome: dict[str, Any], rows: int, report: dict[str, Any]) -> list[str]:
    """Every row of ``name`` resolved, from the universal message; else what went wrong."""
    if outcome.get("status") != "completed":
        said = outcome.get("error") or outcome.get("statuses", [""])[-1:] or outcome
        report["verdicts"][name] = f"assessment {outcome.get('status')}"
        return [f"{name}: the assessment ended {outcome.get('status')}: {said}"]
    [row] = [r for r in outcome["results"] if r.get("participant") == name]
    verdicts = [(i["status"], i["reason"]) for i in row["instances"]]
    resolved = sum(s == "resolved" for s, _ in verdicts)
    report["verdicts"][name] = f"{resolved}/{len(verdicts)} resolved"
    report["sandbox"] = row["provenance"]["sandbox"]
    failures = []
    if resolved != rows or len(verdicts) != rows:
        failures.append(f"{name}: {verdicts}")
    dialects = {(i.get("conversation") or {}).get("dialect") for i in row["instances"]}
    if dialects != {"universal"}:
        failures.append(f"{name}: dialects {dialects}")
    return failures


if __name__ == "__main__":
    raise SystemExit(main())
