#!/usr/bin/env bash
# Installs what FluxVM's build and tests need, only when something is missing,
# so a second run costs a few milliseconds: Debian packages, then a Go as new as
# go.mod asks (scripts/go.sh), then the test servers tests start as real
# processes (scripts/tools.sh: stripe-mock, mailpit).
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
  [ssh]=openssh-client
  [rsync]=rsync
  [chromium]=chromium   # the console's browser tests (central/console)
  # building the guest kernel (scripts/guest-kernel.sh)
  [gcc]=gcc
  [make]=make
  [flex]=flex
  [bison]=bison
  [bc]=bc
  [perl]=perl
)
missing=()
for cmd in "${!need[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${need[$cmd]}")
done
# busybox must be the static build: it runs inside the guest.
if command -v busybox >/dev/null 2>&1 && ! dpkg -s busybox-static >/dev/null 2>&1; then
  missing+=(busybox-static)
fi
# The guest kernel's source, and libelf's headers for the kernel's objtool.
[ -f /usr/src/linux-source-6.1.tar.xz ] || missing+=(linux-source-6.1)
[ -f /usr/include/gelf.h ] || missing+=(libelf-dev)
"$(dirname "$0")"/apt-install.sh "${missing[@]}"
# Go next: on a machine without one, go.sh bootstraps it from Debian's golang-go;
# tools.sh builds its servers with that Go.
"$(dirname "$0")"/go.sh
exec "$(dirname "$0")"/tools.sh
