#!/usr/bin/env bash
# The README's first command as a new user meets it: `make demo` from a fresh clone in a
# bare Debian 12 container (the debian:bookworm-slim that ../shared/tools/docker-here.sh
# makes with debootstrap, or any), default Docker security (its seccomp profile refuses
# user namespaces: bubblewrap cannot run), host network. Only git and make are added
# first, as the README's prerequisites say; then, per --python:
#   none     no Python at all (a slim container)
#   python3  python3 without python3-venv (Debian's and Ubuntu's cloud images)
#   venv     python3 and python3-venv
# --as root|user: as root, or as a user with password-less sudo.
# Exits 0 when `make demo` ended 0 with every sample verdict as expected.
#
#   scripts/first-contact.sh [--python none|python3|venv] [--as root|user]
#                            [--image debian:bookworm-slim] [--trust-ca FILE]
#
# --trust-ca FILE: a CA bundle for HTTPS to PyPI where the network intercepts TLS (this
# project's development machine does); a user's network needs none.
set -euo pipefail
python=none
as=root
image=debian:bookworm-slim
ca=""
while [ $# -gt 0 ]; do
  case $1 in
    --python) python=$2; shift 2 ;;
    --as) as=$2; shift 2 ;;
    --image) image=$2; shift 2 ;;
    --trust-ca) ca=$2; shift 2 ;;
    *) echo "unknown argument: $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
case $python in none) extra="" ;; python3) extra=python3 ;; venv) extra="python3 python3-venv" ;;
  *) echo "--python none, python3 or venv" >&2; exit 2 ;; esac
case $as in root) sudo_pkg="" ;; user) sudo_pkg=sudo ;; *) echo "--as root or user" >&2; exit 2 ;; esac
repo=$(cd "$(dirname "$0")/.." && pwd)
mounts=(-v "$repo:/src:ro")
envs=()
if [ -n "$ca" ]; then
  mounts+=(-v "$(readlink -f "$ca"):/trusted-ca.crt:ro")
  envs+=(-e SSL_CERT_FILE=/trusted-ca.crt -e PIP_CERT=/trusted-ca.crt)
fi
# What the person typed, in order: the prerequisites, a clone, `make demo`.
inside=$(cat <<EOF
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends git make $extra $sudo_pkg >/dev/null
git clone -q /src /work/repo
if [ "$as" = user ]; then
  useradd -m person
  echo 'person ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/person
  mv /work/repo /home/person/repo
  chown -R person:person /home/person/repo
  cd /home/person/repo
  exec sudo -u person --preserve-env=SSL_CERT_FILE,PIP_CERT env HOME=/home/person make demo
fi
cd /work/repo
exec make demo
EOF
)
log=$(mktemp)
set +e
docker run --rm --network host "${mounts[@]}" "${envs[@]}" "$image" bash -c "$inside" \
  2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
if [ "$status" -eq 0 ] && grep -q "All sample verdicts are as expected" "$log"; then
  echo "first contact (--python $python --as $as, $image): make demo ended 0, verdicts as expected"
  rm -f "$log"
  exit 0
fi
echo "first contact (--python $python --as $as, $image): FAILED (exit $status; log $log)" >&2
exit 1
