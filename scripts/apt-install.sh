#!/usr/bin/env bash
# apt-install.sh PACKAGE...: installs Debian packages for deps.sh and go.sh, with
# apt-get update only when the install fails (a fresh machine has no package
# lists, a long-lived one stale ones). The caller decides what is missing.
set -euo pipefail

[ $# -gt 0 ] || exit 0
if [ "$(id -u)" != 0 ]; then
  echo "deps: missing packages: $*; run as root or: sudo apt-get install $*" >&2
  exit 1
fi
echo "deps: installing $*" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends "$@" >/tmp/fluxvm-apt.log 2>&1; then
  apt-get update >/tmp/fluxvm-apt-update.log 2>&1 || {
    echo "deps: apt-get update failed (is Debian's package mirror reachable?); see /tmp/fluxvm-apt-update.log" >&2
    tail -5 /tmp/fluxvm-apt-update.log >&2
    exit 1
  }
  apt-get install -y --no-install-recommends "$@" >/tmp/fluxvm-apt.log 2>&1 || {
    echo "deps: apt-get install $* failed; see /tmp/fluxvm-apt.log" >&2
    tail -20 /tmp/fluxvm-apt.log >&2
    exit 1
  }
fi
