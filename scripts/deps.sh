#!/usr/bin/env bash
# Installs the Debian packages FluxVM's build and tests need, only when
# something is missing, so a second run costs a few milliseconds.
set -euo pipefail

# command → Debian package that provides it
declare -A need=(
  [qemu-system-x86_64]=qemu-system-x86
  [qemu-img]=qemu-utils
  [busybox]=busybox-static
  [cpio]=cpio
  [protoc]=protobuf-compiler
  [zstd]=zstd
  [xz]=xz-utils
  [as]=binutils
  [curl]=curl
)
missing=()
for cmd in "${!need[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${need[$cmd]}")
done
# busybox must be the static build: it runs inside the guest.
if command -v busybox >/dev/null 2>&1 && ! dpkg -s busybox-static >/dev/null 2>&1; then
  missing+=(busybox-static)
fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "deps: missing packages: ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/fluxvm-apt.log 2>&1; then
  apt-get update >/tmp/fluxvm-apt-update.log 2>&1
  apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/fluxvm-apt.log 2>&1 || {
    echo "deps: apt-get install failed; see /tmp/fluxvm-apt.log" >&2
    tail -20 /tmp/fluxvm-apt.log >&2
    exit 1
  }
fi
