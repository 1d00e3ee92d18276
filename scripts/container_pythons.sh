#!/usr/bin/env bash
# Fills container/pythons/<X.Y.Z>/ with the interpreters the image carries
# (container/Dockerfile copies them to /opt/pyenv/versions and makes them relocatable).
#
#   scripts/container_pythons.sh [--from-pyenv DIR | --download] [VERSION ...]
#
# --from-pyenv DIR  copy DIR/versions/<X.Y>.* (default: $(pyenv root), else ~/.pyenv): for
#                   machines that reach only PyPI and Debian's packages (this one: 3.6-3.13)
# --download        `uv python install` (uv from PyPI; needs the internet): 3.8 and later;
#                   uv has no build of 3.5, 3.6 or 3.7 to offer
# VERSION           X.Y; default: every version the Verified recipes ask for
#                   (3.5 3.6 3.7 3.8 3.9 3.10 3.11). The green agent's own is 3.11.
#
# A version that cannot be had is left out with a note: the rows whose recipe asks for it
# then end error/interpreter_not_found (Verified: 3.5 -> 2 rows, 3.6 -> 140, 3.7 -> 1,
# 3.8 -> 42, 3.9 -> 241, 3.10 -> 22, 3.11 -> 52). Site-packages and the test suites are
# not copied (environments are venvs of their own). Nothing here is committed.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=container/pythons
mode=pyenv
src="${PYENV_ROOT:-$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")}"
case "${1:-}" in
  --from-pyenv) src=$2; shift 2 ;;
  --download) mode=download; shift ;;
esac
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(3.5 3.6 3.7 3.8 3.9 3.10 3.11)
mkdir -p "$OUT"
missing=()
for v in "${versions[@]}"; do
  if [ "$mode" = download ]; then
    tmp=$(mktemp -d)
    if python3 -m uv python install --install-dir "$tmp" "$v" >/dev/null 2>&1 \
        || uv python install --install-dir "$tmp" "$v" >/dev/null 2>&1; then
      dir=$(find "$tmp" -maxdepth 1 -type d -name "cpython-$v.*" | head -n1)
      full=$(basename "$dir" | sed -E 's/^cpython-([0-9.]+)-.*/\1/')
      rm -rf "${OUT:?}/$full" && mv "$dir" "$OUT/$full"
    else
      missing+=("$v")
    fi
    rm -rf "$tmp"
    continue
  fi
  dir=$(find "$src/versions" -maxdepth 1 -type d -name "$v.*" 2>/dev/null | sort -V | tail -n1)
  if [ -z "$dir" ] || [ ! -x "$dir/bin/python$v" ]; then
    missing+=("$v")
    continue
  fi
  full=$(basename "$dir")
  rm -rf "${OUT:?}/$full"
  mkdir -p "$OUT/$full"
  tar -C "$dir" -cf - \
    --exclude="lib/python$v/site-packages/*" --exclude="lib/python$v/test" \
    --exclude="lib/python$v/*/tests" --exclude='__pycache__' . | tar -C "$OUT/$full" -xf -
  echo "container_pythons: $full from $dir ($(du -sh "$OUT/$full" | cut -f1))"
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "container_pythons: not available: ${missing[*]}; rows whose recipe asks for them end" \
       "error/interpreter_not_found (see the counts at the top of this script)" >&2
fi
ls "$OUT" | grep -q '^3\.11\.' || { echo "container_pythons: 3.11 (the green agent's own) is required" >&2; exit 1; }
