#!/usr/bin/env bash
# System packages the sandbox needs (docs/security.md): bubblewrap runs participant code,
# iproute2 shapes the tests' network namespace, util-linux's setpriv drops privileges;
# ccache lets an evaluation reuse what its prepared workspace compiled (compile_cache.py);
# chromium renders the HTML report in its test (tests/test_report_html.py).
# Installs what is missing with apt-get (as root, or through sudo without a password);
# elsewhere it says what to install and exits non-zero.
set -euo pipefail
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
command -v ccache >/dev/null 2>&1 || need+=(ccache)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "missing system packages: ${need[*]} (install them, e.g. apt-get install ${need[*]})" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "missing system packages: ${need[*]}; this script only knows apt-get" >&2
  exit 1
fi
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}"
