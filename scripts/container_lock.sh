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
target=(--python-version 3.11 --python-platform x86_64-unknown-linux-gnu --no-header)
{
  echo "# The image's dependencies, pinned: scripts/container_lock.sh writes this file."
  "$UV" pip compile pyproject.toml --extra aws "${target[@]}"
} > container/requirements.lock.tmp
mv container/requirements.lock.tmp container/requirements.lock
{
  echo "# green-docker.Dockerfile's dependencies, pinned: scripts/container_lock.sh writes this file."
  "$UV" pip compile container/requirements-docker.in --constraint container/requirements.lock \
    --override container/requirements-docker.exclude "${target[@]}"
} > container/requirements-docker.lock.tmp
mv container/requirements-docker.lock.tmp container/requirements-docker.lock
