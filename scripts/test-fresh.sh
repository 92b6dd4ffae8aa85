#!/usr/bin/env bash
# make test-fresh: the README's two commands on a Debian 12 that has never seen
# FluxVM nor Go. It makes a new root with debootstrap (minbase, plus only git,
# make and ca-certificates), clones this repository's last commit into it, and
# in it, as root: runs `make dev` until central answers at the URL its banner
# prints, launches a VM and runs a command in it with fluxctl and the demo
# tenant's token from that banner, stops make dev, times a second `make deps`,
# then runs `make test`. Each phase prints how long it took. Everything else that the two commands need they
# must install themselves (scripts/deps.sh), which is what this proves.
#
# Slow (it installs everything and compiles everything) and needs root and the
# network to Debian's mirror and the Go module proxy; not part of make test.
# On a shared machine: nice -n 10 make test-fresh.
#
#   FLUXVM_FRESH_DIR   the new root (default: a new directory under /var/tmp); must not exist
#   FLUXVM_FRESH_KEEP  1 keeps the root afterwards, for a look inside (mounts are undone anyway)
#   FLUXVM_FRESH_DEV_TIMEOUT  seconds make dev may take to print its banner (default 3600)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SUITE=bookworm
DEV_TIMEOUT=${FLUXVM_FRESH_DEV_TIMEOUT:-3600}

say() { echo "test-fresh: $*"; }
die() { echo "test-fresh: error: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mounts); run: sudo make test-fresh"
command -v debootstrap >/dev/null 2>&1 || "$REPO/scripts/apt-install.sh" debootstrap
command -v unshare >/dev/null 2>&1 || die "unshare not found; install util-linux"

# The mirror this machine's apt uses for Debian 12 itself (not -updates or -security).
# shellcheck disable=SC2016 # apt's own $(FIELD) syntax
MIRROR=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(TARGET_OF)' 2>/dev/null |
	awk -v s="$SUITE" '$2 == s && $3 == "deb" {print $1; exit}')
[ -n "$MIRROR" ] || die "this machine's apt sources name no $SUITE repository to take the mirror from (apt-get indextargets)"

if [ -n "${FLUXVM_FRESH_DIR:-}" ]; then
	[ ! -e "$FLUXVM_FRESH_DIR" ] || die "$FLUXVM_FRESH_DIR exists; the root must be new"
	mkdir -p "$FLUXVM_FRESH_DIR"
	ROOT=$(cd "$FLUXVM_FRESH_DIR" && pwd)
else
	ROOT=$(mktemp -d /var/tmp/fluxvm-fresh.XXXXXX)
fi

START=$SECONDS
TIMES=()
mounts_under_root() { # deepest first
	awk -v r="$ROOT/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r
}
cleanup() {
	local rc=$? m
	trap - EXIT INT TERM
	for m in $(mounts_under_root); do umount -l "$m" 2>/dev/null || true; done
	if [ -n "$(mounts_under_root)" ]; then
		echo "test-fresh: still mounted, so $ROOT is left as it is:" >&2
		mounts_under_root >&2
	elif [ "${FLUXVM_FRESH_KEEP:-}" = 1 ]; then
		say "kept $ROOT"
	else
		# --one-file-system: should a mount have come back, never delete through it.
		rm -rf --one-file-system "$ROOT"
	fi
	echo
	say "timings:"
	for m in "${TIMES[@]}"; do echo "  $m"; done
	echo "  total                $(((SECONDS - START) / 60))m$(((SECONDS - START) % 60))s"
	if [ "$rc" = 0 ]; then say "passed"; else say "FAILED (exit $rc)"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

phase() { # phase NAME COMMAND...: runs it and records how long it took
	local name=$1 t=$SECONDS rc=0
	shift
	say "== $name"
	"$@" || rc=$?
	local took=$((SECONDS - t))
	TIMES+=("$(printf '%-20s %dm%02ds%s' "$name" $((took / 60)) $((took % 60)) "$([ $rc = 0 ] || echo "  FAILED (exit $rc)")")")
	return $rc
}

# In the root, with the environment of a fresh login: none of this machine's Go
# settings (GOTOOLCHAIN, GOFLAGS, its PATH) get in, only its proxy settings. Each
# run gets its own PID namespace and /proc: the VMs that make dev leaves running,
# as it should, end with the run instead of outliving the root.
in_root() {
	local pass=() v
	for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY GOPROXY GOSUMDB GONOSUMDB GOPRIVATE GONOPROXY; do
		[ -z "${!v:-}" ] || pass+=("$v=${!v}")
	done
	unshare --pid --fork --kill-child --mount-proc="$ROOT/proc" \
		chroot "$ROOT" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb "${pass[@]}" \
		PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}

make_root() {
	say "debootstrap --variant=minbase $SUITE into $ROOT, from this machine's apt mirror"
	local out
	out=$(debootstrap --variant=minbase --include=git,make,ca-certificates "$SUITE" "$ROOT" "$MIRROR" 2>&1) || {
		tail -20 <<<"$out" >&2
		return 1
	}
	# This machine's apt sources and the Acquire settings that reach its mirror
	# (proxies, a snapshot's expired Valid-Until), so the root's apt-get reaches
	# what this machine's does; and its name service.
	cp /etc/apt/sources.list "$ROOT/etc/apt/" 2>/dev/null || : >"$ROOT/etc/apt/sources.list"
	find /etc/apt/sources.list.d -maxdepth 1 \( -name '*.list' -o -name '*.sources' \) \
		-exec cp {} "$ROOT/etc/apt/sources.list.d/" \;
	apt-config dump | grep -E '^Acquire::(Check-Valid-Until|Check-Date|https?::[Pp]roxy[^ ]*|ForceIPv[46]) ' \
		>"$ROOT/etc/apt/apt.conf.d/99host-acquire" || true
	cp /etc/resolv.conf /etc/hosts "$ROOT/etc/"
	# The certificate authorities this machine trusts beyond Debian's (a TLS-inspecting
	# proxy's, say), added the Debian way so that the root's update-ca-certificates keeps them.
	local extra=$ROOT/usr/local/share/ca-certificates/fluxvm-test-fresh
	mkdir -p "$extra"
	awk -v known="$ROOT/etc/ssl/certs/ca-certificates.crt" -v out="$extra/host-" '
		BEGIN { while ((getline l < known) > 0) { b = b l "\n"; if (l ~ /^-----END/) { have[b] = 1; b = "" } } }
		{ c = c $0 "\n" }
		/^-----END CERTIFICATE-----/ { if (!(c in have)) { n++; printf "%s", c > (out n ".crt"); close(out n ".crt") } c = "" }
	' /etc/ssl/certs/ca-certificates.crt
	if [ -n "$(find "$extra" -type f)" ]; then
		say "adding $(find "$extra" -type f | wc -l) certificate authorities this machine trusts beyond Debian's"
		chroot "$ROOT" update-ca-certificates >/dev/null 2>&1 || { echo "update-ca-certificates failed in $ROOT" >&2; return 1; }
	else
		rmdir "$extra"
	fi
	# /dev with /dev/kvm, /dev/pts and /dev/shm; /sys (Go reads its cgroup limits)
	local d
	for d in dev sys; do
		mount --rbind "/$d" "$ROOT/$d"
		mount --make-rslave "$ROOT/$d"
	done
}

copy_repo() {
	if [ -n "$(git -C "$REPO" status --porcelain)" ]; then
		say "note: uncommitted changes in $REPO are not tested; the root gets its last commit"
	fi
	git clone -q --no-hardlinks "$REPO" "$ROOT/root/fluxvm"
	say "testing $(git -C "$ROOT/root/fluxvm" log -1 --format='%h %s')"
}

# README command 1, then the quickstart's launch and run with what make dev printed.
write_dev_script() {
	cat >"$ROOT/root/fresh-dev.sh" <<'EOF'
set -euo pipefail
cd /root/fluxvm
timeout=$1
port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# This root shares the machine's network: if something there holds make dev's
# ports already, give it others.
flags=
if port_taken 7799 || port_taken 7777; then
	p=17799
	while port_taken $p || port_taken $((p + 1)); do p=$((p + 2)); done
	flags="-listen 127.0.0.1:$p -node-listen 127.0.0.1:$((p + 1))"
	echo "ports 7799 or 7777 are taken on this machine: make dev DEV_FLAGS='$flags'"
fi
t=$SECONDS
setsid make dev ${flags:+DEV_FLAGS="$flags"} > >(tee /root/make-dev.log) 2>&1 &
dev=$!
until grep -q '^Ctrl-C stops FluxVM' /root/make-dev.log 2>/dev/null; do
	kill -0 $dev 2>/dev/null || { echo "make dev ended before it printed its banner"; exit 1; }
	[ $((SECONDS - t)) -lt "$timeout" ] || { echo "make dev printed no banner in ${timeout}s"; exit 1; }
	sleep 2
done
echo "### make dev printed its banner after $((SECONDS - t))s"
url=$(sed -n 's/^  central URL  *//p' /root/make-dev.log)
token=$(sed -n 's/^  tenant token  *\([^ ]*\).*/\1/p' /root/make-dev.log)
[ -n "$url" ] && [ -n "$token" ] || { echo "no central URL or tenant token in the banner"; exit 1; }
echo "### $url/healthz answers: $(curl -sS --fail-with-body "$url/healthz")"

export PATH=$PWD/bin:$PATH CENTRAL_URL=$url FLUXVM_AGENT_TOKEN=$token
t=$SECONDS
fluxctl fleet launch --image debian-minimal --wait -o table | tee /root/launch.out
name=$(sed -n 's/^.*Launched \([^ ]*\) on .*/\1/p' /root/launch.out)
[ -n "$name" ] || { echo "fluxctl fleet launch named no VM"; exit 1; }
echo "### launched $name in $((SECONDS - t))s"
t=$SECONDS
fluxctl fleet run "$name" -- uname -a
echo "### fluxctl fleet run took $((SECONDS - t))s"
fluxctl fleet rm "$name" -y

kill -INT -- -$dev
wait $dev || true
grep -q '^FluxVM dev stopped' /root/make-dev.log || { echo "make dev did not say it stopped"; exit 1; }
EOF
}

phase "debootstrap" make_root
phase "clone" copy_repo
write_dev_script
phase "make dev, VM run" in_root /bin/bash /root/fresh-dev.sh "$DEV_TIMEOUT"
# Now that everything is installed, what each make dev and make test pays for it.
phase "make deps again" in_root /bin/bash -c 'cd /root/fluxvm && time make deps'
phase "make test" in_root /bin/bash -c 'cd /root/fluxvm && make test'
