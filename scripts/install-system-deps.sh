#!/usr/bin/env bash
# System packages the sandbox needs (docs/security.md): bubblewrap runs participant code,
# iproute2 shapes the tests' network namespace, util-linux's setpriv drops privileges;
# a Python 3.11+ with venv (scripts/find-python.sh), git and CA certificates to build the
# project's environment and the sample; ccache lets an evaluation reuse what its prepared
# workspace compiled (compile_cache.py); chromium renders the HTML report in its test
# (tests/test_report_html.py).
# Installs what is missing with apt-get (as root, or through sudo without a password);
# elsewhere it says what to install and exits non-zero.
set -euo pipefail
if [ "$(uname -s)" = Darwin ]; then
  # The local sandbox is Linux's (namespaces, Landlock, seccomp); on macOS `make setup`
  # installs what deploying to AWS needs (the Python package, the CDK CLI) and no more.
  echo "macOS: the local sandbox needs Linux, so no system package is installed here." >&2
  echo "  To deploy to AWS: node and npm (brew install node), Docker Desktop for cdk deploy." >&2
  echo "  To evaluate locally: a Linux machine or VM (then make setup there)." >&2
  exit 0
fi
# --demo: what `make demo` needs (the sandbox), not the test suite's extras
case ${BASH_SOURCE[0]} in */*) here=${BASH_SOURCE[0]%/*} ;; *) here=. ;; esac
need=()
python=1  # a Python 3.11+ with venv is needed: which package gives one, apt says below
"$BASH" "$here/find-python.sh" >/dev/null && python=0
command -v git >/dev/null 2>&1 || need+=(git)
command -v patch >/dev/null 2>&1 || need+=(patch)  # the official apply chain's last step
[ -e /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
if [ "${1:-}" != --demo ]; then
  command -v ccache >/dev/null 2>&1 || need+=(ccache)
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
fi
[ ${#need[@]} -eq 0 ] && [ $python -eq 0 ] && exit 0
no_python() {  # what to do where no package gives a Python 3.11+ with venv
  echo "no Python 3.11+ with venv here, nor in this system's packages (Ubuntu 22.04 has" \
       "python3.11 in universe). Install one, then run make again:" >&2
  echo "  Ubuntu: sudo add-apt-repository ppa:deadsnakes/ppa && sudo apt-get install" \
       "python3.11 python3.11-venv" >&2
  echo "  anywhere: uv's (curl -LsSf https://astral.sh/uv/install.sh | sh; uv python" \
       "install 3.11), then make PYTHON=\$(uv python find 3.11) ..." >&2
}
if [ $python -eq 1 ]; then
  shown=("${need[@]}" "python3 python3-venv (3.11+; Ubuntu 22.04: python3.11 python3.11-venv)")
else
  shown=("${need[@]}")
fi
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "missing system packages: ${shown[*]}" >&2
  echo "  not root and no password-less sudo: ask for them to be installed, e.g." >&2
  echo "  sudo apt-get install ${need[*]}$([ $python -eq 1 ] && echo ' python3 python3-venv')   (Debian, Ubuntu)" >&2
  echo "  sudo dnf install ${need[*]/iproute2/iproute}$([ $python -eq 1 ] && echo ' python3.11')   (Fedora)" >&2
  echo "  then run make again" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "missing system packages: ${shown[*]}; this script installs with apt-get only:" >&2
  echo "  install them with your distribution's package manager, then run make setup again" >&2
  exit 1
fi
# Another apt (unattended-upgrades on a fresh machine, a second `make`) may hold apt's
# locks: wait for it, up to 10 minutes, rather than fail at once with apt's raw error.
# (DPkg::Lock::Timeout covers install's dpkg lock; update's lists lock is retried here.)
apt_waiting() {
  local deadline=$((SECONDS + 600)) out said=""
  while :; do
    if out=$("${sudo[@]}" "$@" 2>&1); then
      [ -z "$out" ] || printf '%s\n' "$out"
      return 0
    fi
    if [[ $out != *"Could not get lock"* ]] || [ $SECONDS -ge $deadline ]; then
      printf '%s\n' "$out" >&2
      return 1
    fi
    [ -n "$said" ] || echo "another apt holds its lock: waiting for it (up to 10 minutes)" >&2
    said=1
    sleep 5
  done
}
if ! apt_waiting apt-get -o DPkg::Lock::Timeout=600 update -qq; then
  echo "apt-get update failed (above): check the machine's package sources and network," \
       "then run make again" >&2
  exit 1
fi
if [ $python -eq 1 ]; then
  # the newest 3.11+ the sources have, with its venv: Debian 12 python3.11, Ubuntu 24.04
  # python3.12, Ubuntu 22.04 python3.11 (universe)
  found=""
  for v in 3.13 3.12 3.11; do
    if apt-cache show "python$v-venv" >/dev/null 2>&1; then
      found=$v
      break
    fi
  done
  if [ -z "$found" ]; then
    no_python
    exit 1
  fi
  need+=("python$found" "python$found-venv")
fi
apt_waiting env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 \
  install -y -qq --no-install-recommends "${need[@]}"
if [ $python -eq 1 ] && ! "$BASH" "$here/find-python.sh" >/dev/null; then
  echo "python$found and python$found-venv are installed but no Python 3.11+ with venv" \
       "is on PATH" >&2
  no_python
  exit 1
fi
