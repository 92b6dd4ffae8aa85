#!/usr/bin/env bash
# Builds FluxVM's own guest kernel from Debian's linux-source-6.1 package and the
# configuration in guest/kernel/config-6.1 (merged over `make tinyconfig`), and prints
# the cache directory holding it: vmlinux (uncompressed, with a PVH entry), release
# (uname -r), config (the full .config) and done.
#
# The kernel is cached per hash of the configuration and the source package's
# version (plus RECIPE below, raised when the build steps change): when neither
# changed it prints the directory at once. The source tree is unpacked and built in a
# temporary directory under the cache and removed afterwards.
#
#   scripts/guest-kernel.sh        build when not cached; print the directory
#   scripts/guest-kernel.sh -key   print only the cache key (no build)
#
#   FLUXVM_CACHE_DIR  cache (default /var/cache/fluxvm); the kernel goes to
#                     kernels/fluxvm-6.1_<key>/
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${FLUXVM_CACHE_DIR:-/var/cache/fluxvm}
CONFIG=$REPO/guest/kernel/config-6.1
SRCPKG=linux-source-6.1
TARBALL=/usr/src/linux-source-6.1.tar.xz
RECIPE=1

say() { echo "guest-kernel: $*" >&2; }
die() { echo "guest-kernel: error: $*" >&2; exit 1; }
need() { # need COMMAND PACKAGE
	command -v "$1" >/dev/null 2>&1 || die "$1 not found; install it: apt-get install $2 (make deps does)"
}

[ -f "$CONFIG" ] || die "$CONFIG is missing"
SRCVER=$(dpkg-query -W -f='${Version}' "$SRCPKG" 2>/dev/null || true)
[ -n "$SRCVER" ] && [ -f "$TARBALL" ] || die "$SRCPKG is not installed; install it: apt-get install $SRCPKG (make deps does)"
KEY=$({ cat "$CONFIG"; echo "$SRCPKG $SRCVER recipe $RECIPE"; } | sha256sum | cut -c1-16)
if [ "${1:-}" = -key ]; then
	echo "$KEY"
	exit 0
fi
KDIR=$CACHE/kernels/fluxvm-6.1_$KEY
if [ -f "$KDIR/done" ]; then
	echo "$KDIR"
	exit 0
fi

for c in gcc:gcc make:make flex:flex bison:bison bc:bc perl:perl xz:xz-utils; do need "${c%%:*}" "${c#*:}"; done
[ -f /usr/include/gelf.h ] || die "libelf's headers are missing (the kernel's objtool needs them); install them: apt-get install libelf-dev (make deps does)"

mkdir -p "$CACHE/kernels"
WORK=$(mktemp -d "$CACHE/.guest-kernel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
start=$(date +%s)
say "building the guest kernel from $SRCPKG $SRCVER and guest/kernel/config-6.1 (key $KEY)"
tar -xJf "$TARBALL" -C "$WORK"
SRC=$WORK/linux-source-6.1
[ -f "$SRC/Makefile" ] || die "$TARBALL holds no linux-source-6.1/Makefile"
# Reproducible-ish: the build's user, host and time are fixed rather than this machine's.
export KBUILD_BUILD_USER=fluxvm KBUILD_BUILD_HOST=fluxvm KBUILD_BUILD_TIMESTAMP="$SRCPKG $SRCVER"
K=(make -C "$SRC" -s ARCH=x86_64)
"${K[@]}" tinyconfig >"$WORK/config.log" 2>&1 || { cat "$WORK/config.log" >&2; die "make tinyconfig failed"; }
(cd "$SRC" && scripts/kconfig/merge_config.sh -m -O "$SRC" "$SRC/.config" "$CONFIG") >>"$WORK/config.log" 2>&1 || { cat "$WORK/config.log" >&2; die "merging guest/kernel/config-6.1 failed"; }
"${K[@]}" olddefconfig >>"$WORK/config.log" 2>&1 || { cat "$WORK/config.log" >&2; die "make olddefconfig failed"; }
# An option whose dependencies are unmet is dropped without a word: every one the
# fragment asks for must be in the result.
bad=$(while IFS= read -r line; do
	case "$line" in
	CONFIG_*=*) grep -qxF "$line" "$SRC/.config" || echo "$line" ;;
	"# CONFIG_"*" is not set")
		opt=${line#\# }
		opt=${opt%% *}
		! grep -q "^$opt=" "$SRC/.config" || echo "$line"
		;;
	esac
done <"$CONFIG")
[ -z "$bad" ] || die "guest/kernel/config-6.1 asks for options the kernel's configuration dropped (unmet dependencies?): $(echo "$bad" | paste -sd' ')"
say "compiling (make -j$(nproc) vmlinux)"
if ! "${K[@]}" -j"$(nproc)" vmlinux >"$WORK/build.log" 2>&1; then
	tail -30 "$WORK/build.log" >&2
	die "the kernel build failed (the end of its log is above)"
fi
KD=$WORK/out
mkdir -p "$KD"
cp "$SRC/vmlinux" "$KD/vmlinux"
cp "$SRC/.config" "$KD/config"
"${K[@]}" kernelrelease >"$KD/release"
echo "$SRCPKG $SRCVER" >"$KD/source"
# No modules: everything the image needs is built in (the image script reads these).
: >"$KD/modules.list"
mkdir "$KD/modules"
touch "$KD/done"
rm -rf "$KDIR"
mv "$KD" "$KDIR"
say "built $(cat "$KDIR/release") in $(($(date +%s) - start)) s: $KDIR/vmlinux ($(du -h "$KDIR/vmlinux" | cut -f1))"
echo "$KDIR"
