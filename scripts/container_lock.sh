#!/usr/bin/env bash
# Writes the images' locks, resolved for Python 3.11 on x86_64 Linux:
#   container/requirements.lock         every package container/Dockerfile installs (one uv
#                                       among them: the engine's), from pyproject.toml's
#                                       dependencies and the `aws` extra;
#   container/requirements-docker.lock  what green-docker.Dockerfile installs
#                                       (container/requirements-docker.in, less
#                                       container/requirements-docker.exclude), at the first
#                                       lock's versions: one set of versions for both images.
# Run it after changing pyproject.toml or either input.
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-.venv/bin/uv}
target=(--python-version 3.11 --python-platform x86_64-unknown-linux-gnu --no-header --quiet)
# each lock written by uv itself (-o): the versions it already pins are kept where they
# still satisfy the inputs, so that adding a dependency moves nothing else
lock() {
  local out=$1 header=$2
  shift 2
  "$UV" pip compile "$@" "${target[@]}" -o "$out"
  sed -i "1i # $header" "$out"
}
lock container/requirements.lock \
  "The image's dependencies, pinned: scripts/container_lock.sh writes this file." \
  pyproject.toml --extra aws
lock container/requirements-docker.lock \
  "green-docker.Dockerfile's dependencies, pinned: scripts/container_lock.sh writes this file." \
  container/requirements-docker.in --constraint container/requirements.lock \
  --override container/requirements-docker.exclude
