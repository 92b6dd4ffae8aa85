#!/usr/bin/env bash
# Makes sure a Go that builds FluxVM is installed; with -print, also says which.
#
#   scripts/go.sh          install Go when go is missing or older than go.mod's go line
#   scripts/go.sh -print   the same, then print the go command to use (the Makefile's GO)
#
# The go on PATH is used when it is at least go.mod's `go` version. Otherwise the
# version of go.mod's `toolchain` line, the one place the project pins Go, is
# installed in $FLUXVM_CACHE_DIR/go/go<version>. The go command ships itself as
# the module golang.org/toolchain, which is how GOTOOLCHAIN switches versions;
# any go can download that module through the Go module proxy, even Debian 12's
# golang-go (Go 1.19, too old to build FluxVM), so that is the bootstrap on a
# machine with no Go at all. Once installed, a run costs a few milliseconds.
#
#   FLUXVM_CACHE_DIR  where the toolchain goes (default /var/cache/fluxvm)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${FLUXVM_CACHE_DIR:-/var/cache/fluxvm}

say() { echo "scripts/go.sh: $*" >&2; }
die() { echo "scripts/go.sh: error: $*" >&2; exit 1; }

PRINT=
case "${1:-}" in
-print) PRINT=1 ;;
"") ;;
*) die "usage: scripts/go.sh [-print]" ;;
esac

NEED=$(sed -n 's/^go \([0-9][0-9.a-z]*\)$/\1/p' "$REPO/go.mod")
WANT=$(sed -n 's/^toolchain go\([0-9][0-9.a-z]*\)$/\1/p' "$REPO/go.mod")
[ -n "$NEED" ] || die "go.mod has no go line"
WANT=${WANT:-$NEED}
GODIR="$CACHE/go/go$WANT"

older() { # older A B: version A is before version B
	[ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$1" ]
}
version_of() { # version_of GO: its own version (1.26.8), not one GOTOOLCHAIN would switch to
	(cd / && GOTOOLCHAIN=local "$1" version 2>/dev/null) | sed -n 's/^go version go\([0-9][0-9.a-z]*\) .*/\1/p'
}
found() {
	[ -z "$PRINT" ] || echo "$1"
	exit 0
}

PATHGO=$(command -v go || true)
PATHVER=
if [ -n "$PATHGO" ]; then
	PATHVER=$(version_of "$PATHGO")
	if [ -n "$PATHVER" ] && ! older "$PATHVER" "$NEED"; then
		found "$PATHGO"
	fi
fi
[ -x "$GODIR/bin/go" ] && found "$GODIR/bin/go"

# --- install go$WANT -----------------------------------------------------------------

case "$(uname -m)" in
x86_64) ARCH=amd64 ;;
aarch64 | arm64) ARCH=arm64 ;;
*) die "no Go toolchain for $(uname -m) here; install Go $NEED or newer and put it on PATH" ;;
esac
MOD="golang.org/toolchain@v0.0.1-go$WANT.linux-$ARCH"

{ mkdir -p "$CACHE/go" 2>/dev/null && [ -w "$CACHE/go" ]; } || die "cannot write to $CACHE/go; run as root (make deps), or set FLUXVM_CACHE_DIR, or install Go $NEED or newer on PATH"
exec 9>"$CACHE/go/.lock"
flock 9 # another make may be installing it right now
[ -x "$GODIR/bin/go" ] && found "$GODIR/bin/go"

BOOT=$PATHGO
if [ -z "$BOOT" ]; then
	# Any go fetches the module; Debian's is the one every Debian machine can install.
	"$REPO/scripts/apt-install.sh" golang-go
	BOOT=$(command -v go) || die "golang-go is installed but go is not on PATH"
fi
say "installing Go $WANT in $GODIR (go.mod needs $NEED; ${PATHVER:+go on PATH is $PATHVER, }fetching $MOD with $BOOT)"

TMP=$(mktemp -d "$CACHE/go/.install.XXXXXX")
# shellcheck disable=SC2317 # run by the trap
cleanup() {
	chmod -R u+w "$TMP" 2>/dev/null || true # the module cache is read-only
	rm -rf "$TMP"
}
trap cleanup EXIT
# A module cache of its own, so the ~250 MB unpacked toolchain is moved, not copied,
# and nothing of it stays behind in the user's; GOFLAGS and GOTOOLCHAIN of the
# caller must not reach this go (a -mod flag, or a GOTOOLCHAIN it does not know).
# Its own go.mod too: go looks for one up the tree, and FLUXVM_CACHE_DIR may be
# inside some module.
echo "module fluxvm-go-download" >"$TMP/go.mod"
if ! (cd "$TMP" && env GOMODCACHE="$TMP/mod" GOWORK=off GOFLAGS= GOTOOLCHAIN=local GO111MODULE=on \
	"$BOOT" mod download -json "$MOD" >"$TMP/download.json" 2>"$TMP/download.err"); then
	cat "$TMP/download.err" >&2
	sed -n 's/^\t"Error": //p' "$TMP/download.json" >&2
	die "could not download $MOD (go said why above) through the Go module proxy,
  GOPROXY=$("$BOOT" env GOPROXY). If it is not reachable from here, set GOPROXY to one
  that is and run make deps again, or install Go $NEED or newer yourself, first on PATH."
fi
DIR=$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' "$TMP/download.json")
[ -f "${DIR:-/nonexistent}/bin/go" ] ||
	die "$MOD downloaded, but holds no bin/go (go mod download said: $(cat "$TMP/download.json"))"

chmod -R u+w "$TMP/mod"
mv "$DIR" "$TMP/go"
# Zip files keep no modes: set the execute bits as cmd/go does after it downloads
# a toolchain (pkg/tool, lib's go_*_exec wrappers, bin).
find "$TMP/go/pkg/tool" "$TMP/go/bin" -type f -exec chmod +x {} +
find "$TMP/go/lib" -type f -name 'go_?*_?*_exec' -exec chmod +x {} + 2>/dev/null || true
GOT=$(version_of "$TMP/go/bin/go")
[ "$GOT" = "$WANT" ] || die "the downloaded toolchain says it is Go '$GOT', not $WANT"
mv "$TMP/go" "$GODIR"
# Toolchains of earlier pins are only a cache: drop them.
for old in "$CACHE"/go/go*; do
	[ "$old" = "$GODIR" ] || [ ! -x "$old/bin/go" ] || rm -rf "$old"
done
say "installed $("$GODIR/bin/go" version) in $GODIR"
found "$GODIR/bin/go"
