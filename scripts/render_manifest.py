"""Writes the green agent's Amber manifest with its image named by digest, and optionally a
scenario that names that manifest, for a leaderboard repository.

    python scripts/render_manifest.py --image ghcr.io/me/swegreen-green-docker@sha256:<64 hex> \
        [--out agentbeats/amber-manifest.json5] \
        [--scenario-out scenario.json5 --manifest-url https://raw.githubusercontent.com/...]

The image workflow (.github/workflows/green-image.yml) runs it after publishing; a
reference that is not ``<registry>/<lower-case path>@sha256:<64 hex>`` is refused, so that
every shard of a submission pulls the same bytes. Comments and layout are kept: only the
``image:`` line (and in the scenario, the green's ``manifest:`` line) changes.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import json5

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "agentbeats" / "amber-manifest.json5"
SCENARIO = ROOT / "agentbeats" / "scenario.json5"
PLACEHOLDER = "IMAGE@DIGEST"
# Docker's reference grammar, restricted to what a published, pinned image looks like.
DIGEST_REF = re.compile(
    r"^(?P<name>[a-z0-9]+(?:[._-][a-z0-9]+)*(?::\d+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)+)"
    r"@sha256:[0-9a-f]{64}$"
)


def check_image(ref: str) -> str:
    if DIGEST_REF.match(ref) is None:
        raise SystemExit(
            f"--image {ref!r} is not a pinned reference: give registry/path@sha256:<64 hex>, "
            "all lower case (Docker refuses upper case; the owner of ghcr.io/<owner> too)"
        )
    return ref


def render_manifest(text: str, image: str) -> str:
    line = re.compile(r'^(\s*image:\s*)"[^"]*"', re.M)
    if len(line.findall(text)) != 1:
        raise SystemExit("the manifest has no single `image:` line to fill in")
    rendered = line.sub(lambda m: f'{m.group(1)}"{check_image(image)}"', text)
    assert json5.loads(rendered)["program"]["image"] == image
    return rendered


def render_scenario(text: str, manifest_url: str) -> str:
    if not manifest_url.startswith("https://"):
        raise SystemExit(f"--manifest-url {manifest_url!r}: give the https URL of the manifest")
    block = re.compile(r'(^\s*green:\s*\{\s*\n\s*manifest:\s*)"[^"]*"', re.M)
    if len(block.findall(text)) != 1:
        raise SystemExit("the scenario has no single `green: { manifest: ... }` to fill in")
    rendered = block.sub(lambda m: f'{m.group(1)}"{manifest_url}"', text)
    assert json5.loads(rendered)["components"]["green"]["manifest"] == manifest_url
    return rendered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", required=True, help="registry/path@sha256:<digest>")
    parser.add_argument("--out", type=Path, default=MANIFEST)
    parser.add_argument("--scenario-out", type=Path)
    parser.add_argument("--manifest-url", help="where the rendered manifest is served")
    args = parser.parse_args(argv)
    args.out.write_text(render_manifest(MANIFEST.read_text(), args.image))
    print(f"{args.out}: image {args.image}")
    if args.scenario_out:
        if not args.manifest_url:
            parser.error("--scenario-out needs --manifest-url")
        args.scenario_out.write_text(render_scenario(SCENARIO.read_text(), args.manifest_url))
        print(f"{args.scenario_out}: green manifest {args.manifest_url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
