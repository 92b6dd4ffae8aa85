#!/usr/bin/env bash
# Installs the test servers that FluxVM's tests start as real processes, each
# pinned here and built with go install into $FLUXVM_CACHE_DIR/tools/<name>@<version>/,
# only when missing, so a second run costs a few milliseconds:
#
#   stripe-mock  the Stripe API's fake server from Stripe itself (central/payments)
#   mailpit      an SMTP server with an HTTP API to read what it got (central/signup)
#
#   scripts/tools.sh              install what is missing
#   scripts/tools.sh -print NAME  the same, then print NAME's binary
#
# Tests find them in the same place (FLUXVM_CACHE_DIR, default /var/cache/fluxvm)
# and fail with "make deps" when they are not there.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${FLUXVM_CACHE_DIR:-/var/cache/fluxvm}

# name → module@version (the one place these are pinned; the tests' helper
# internal/testservers names the same versions)
declare -A tools=(
  [stripe-mock]=github.com/stripe/stripe-mock@v0.203.0
  [mailpit]=github.com/axllent/mailpit@v1.33.1
)

say() { echo "scripts/tools.sh: $*" >&2; }
die() { echo "scripts/tools.sh: error: $*" >&2; exit 1; }

PRINT=
case "${1:-}" in
-print) PRINT=${2:-}; [ -n "${tools[$PRINT]:-}" ] || die "usage: scripts/tools.sh [-print stripe-mock|mailpit]" ;;
"") ;;
*) die "usage: scripts/tools.sh [-print NAME]" ;;
esac

dir_of() { echo "$CACHE/tools/$1@${tools[$1]##*@}"; }

GO=
for name in "${!tools[@]}"; do
	dir=$(dir_of "$name")
	[ -x "$dir/$name" ] && continue
	{ mkdir -p "$CACHE/tools" 2>/dev/null && [ -w "$CACHE/tools" ]; } ||
		die "cannot write to $CACHE/tools; run as root (make deps), or set FLUXVM_CACHE_DIR"
	exec 9>"$CACHE/tools/.lock"
	flock 9 # another make may be installing it right now
	[ -x "$dir/$name" ] && continue
	GO=${GO:-$("$REPO/scripts/go.sh" -print)}
	say "installing ${tools[$name]} in $dir"
	tmp=$(mktemp -d "$CACHE/tools/.install.XXXXXX")
	# The caller's GOFLAGS (a -mod flag) must not reach an install outside the module.
	if ! (cd "$tmp" && env GOBIN="$tmp" GOFLAGS= GOWORK=off "$GO" install "${tools[$name]}"); then
		rm -rf "$tmp"
		die "go install ${tools[$name]} failed (go said why above); check GOPROXY ($("$GO" env GOPROXY))"
	fi
	chmod 755 "$tmp" # mktemp made it 0700: tests may run as another user
	rm -rf "$dir"
	mv "$tmp" "$dir"
	say "installed $dir/$name"
done
[ -z "$PRINT" ] || echo "$(dir_of "$PRINT")/$PRINT"
