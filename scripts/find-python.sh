#!/usr/bin/env bash
# The Python `make` builds the project's virtual environment with: the newest 3.11+ on
# PATH whose venv can bootstrap pip (Debian and Ubuntu ship that part apart, in
# python3-venv). Prints its path; exits 1, printing nothing, when there is none
# (scripts/install-system-deps.sh installs one, the Makefile asks after it ran).
set -uo pipefail
for name in python3.13 python3.12 python3.11 python3; do
  path=$(command -v "$name" 2>/dev/null) || continue
  if "$path" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' \
      >/dev/null 2>&1; then
    echo "$path"
    exit 0
  fi
done
exit 1
