#!/usr/bin/env bash
# Writes container/requirements.lock: every package the image installs, pinned (one uv
# among them: the engine's), resolved for the image's Python 3.11 on x86_64 Linux from
# pyproject.toml's dependencies and the `aws` extra. Run it after changing pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
{
  echo "# The image's dependencies, pinned: scripts/container_lock.sh writes this file."
  .venv/bin/uv pip compile pyproject.toml --extra aws --python-version 3.11 \
    --python-platform x86_64-unknown-linux-gnu --no-header
} > container/requirements.lock.tmp
mv container/requirements.lock.tmp container/requirements.lock
