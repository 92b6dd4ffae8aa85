#!/usr/bin/env bash
# Builds the minimal Linux guest image bundle FluxVM boots: an uncompressed vmlinux
# (PVH entry, fast under TCG): by default FluxVM's own kernel (scripts/guest-kernel.sh,
# everything built in), or Debian's stock kernel with its virtio modules, a small uncompressed initramfs whose /init is the
# fluxvm-guest agent, the same initramfs with the display drivers added for VMs with a
# display, an empty qcow2 data disk and fluxvm-image.json. The initramfs carries
# Debian's OpenSSH server (sshd and sftp-server, with the shared libraries they load),
# which the agent starts once the guest's drivers are in.
#
# Idempotent: when the manifest matches the kernel package and the agent sources it
# exits at once; when only the agent changed it rebuilds only the initramfs. Every
# output is built in a temporary directory and renamed into place.
#
#   FLUXVM_GUEST_KERNEL  fluxvm (default): our kernel, built from linux-source-6.1 and
#                        guest/kernel/config-6.1; debian: the kernel linux-image-amd64
#                        points at, with its modules in the initramfs
#   FLUXVM_IMAGE_DIR  output (default /var/cache/fluxvm/images/debian-minimal, or
#                     debian-minimal-stock for FLUXVM_GUEST_KERNEL=debian)
#   FLUXVM_CACHE_DIR  downloads and extracted kernels (default /var/cache/fluxvm)
set -euo pipefail

KERNEL_KIND=${FLUXVM_GUEST_KERNEL:-fluxvm}
case "$KERNEL_KIND" in
fluxvm) NAME=debian-minimal ;;
debian) NAME=debian-minimal-stock ;;
*)
	echo "guest-image: error: FLUXVM_GUEST_KERNEL=$KERNEL_KIND; want fluxvm (our kernel, the default) or debian (the stock kernel)" >&2
	exit 1
	;;
esac
OUT=${FLUXVM_IMAGE_DIR:-/var/cache/fluxvm/images/$NAME}
CACHE=${FLUXVM_CACHE_DIR:-/var/cache/fluxvm}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CMDLINE="console=ttyS0 quiet panic=-1"
# The modules below are the stock kernel's (FLUXVM_GUEST_KERNEL=debian); our kernel has
# all of them built in and the image loads none.
# In load order; dependencies found in the modules' own metadata are added first.
# PORT_MODULES are what the agent's virtio-serial port needs (both machine types'
# transports): /init loads them before it announces itself. virtio_console comes
# before the PCI transport so that on microvm (virtio-mmio) the port's set-up, which
# the kernel finishes asynchronously, overlaps with loading virtio_pci. LATE_MODULES
# (disk, network) /init loads right after; commands wait for them (docs/guest-image.md).
# DISPLAY_MODULES /init loads only in a VM with a display (fluxvm.display=1 on the
# kernel command line), after the late ones: DRM drivers for the display devices QEMU
# gives such a VM (virtio-gpu on microvm, the standard VGA on pc, through bochs), whose
# fbdev emulation the built-in fbcon draws the console on, and virtio_input for the
# keyboard and tablet of microvm (pc's PS/2 keyboard is built in).
PORT_MODULES="virtio_ring virtio virtio_mmio virtio_console virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci"
LATE_MODULES="virtio_blk failover net_failover virtio_net"
DISPLAY_MODULES="virtio_gpu bochs virtio_input"
MODULES="$PORT_MODULES $LATE_MODULES $DISPLAY_MODULES"
# The SSH server (and rsync, for rsync -e ssh): Debian's packages, unpacked into the
# cache; the libraries they load come from this host (a Debian 12 like the guest's
# packages) except those in SSH_LIB_PKGS, which a host without them may lack. The cache
# directory is named after openssh-server's version and these lists.
SSH_PKGS="openssh-server openssh-sftp-server rsync"
SSH_LIB_PKGS="libwrap0 libnsl2 libtirpc3 libtirpc-common libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2 libpopt0 libxxhash0"
SSH_LIST_HASH=$(echo "$SSH_PKGS $SSH_LIB_PKGS" | sha256sum | cut -c1-12)

say() { echo "guest-image: $*"; }
die() { echo "guest-image: error: $*" >&2; exit 1; }

need() { # need COMMAND PACKAGE
	command -v "$1" >/dev/null 2>&1 || die "$1 not found; install it: apt-get install $2"
}
need busybox busybox-static
need cpio cpio
need qemu-img qemu-utils
need apt-cache apt
need dpkg-deb dpkg
need xz xz-utils
need zstd zstd
need sha256sum coreutils
need ldd libc-bin
[ -x /bin/busybox ] || die "/bin/busybox is missing; install it: apt-get install busybox-static"
if command -v file >/dev/null 2>&1 && ! file -L /bin/busybox | grep -q 'statically linked'; then
	die "/bin/busybox is not statically linked; install busybox-static (not busybox)"
fi
# The Go the Makefile builds with (scripts/go.sh installs it when go is missing or
# older than go.mod asks), first on PATH for every go below.
GO=$("$REPO/scripts/go.sh" -print) || die "no Go to build the guest agent with (scripts/go.sh said why above)"
PATH=$(dirname "$GO"):$PATH

# --- what should be built ----------------------------------------------------------

# The agent's sources and go.mod (the versions of what it imports, golang.org/x/sys).
agent_hash() {
	(cd "$REPO" && { find guest cmd/fluxvm-guest -name '*.go' ! -name '*_test.go' -type f; echo go.mod; } | LC_ALL=C sort |
		xargs sha256sum | sha256sum | cut -d' ' -f1)
}
AGENT_HASH=$(agent_hash)
SCRIPT_HASH=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)

BUSYBOX_VER=$(dpkg-query -W -f='${Version}' busybox-static)
# Our kernel's cache key: its configuration and linux-source-6.1's version.
KERNEL_KEY=
if [ "$KERNEL_KIND" = fluxvm ]; then
	KERNEL_KEY=$("$REPO/scripts/guest-kernel.sh" -key)
fi
GOVER=$(cd "$REPO" && go env GOVERSION)

manifest_field() { # manifest_field FILE KEY -> value of a string field
	sed -n "s/^ *\"$2\": *\"\([^\"]*\)\".*/\\1/p" "$1" | head -n1
}

M="$OUT/fluxvm-image.json"
image_matches() { # everything but the kernel package matches the manifest
	[ -f "$M" ] && [ -f "$OUT/vmlinux" ] && [ -f "$OUT/initrd.cpio" ] && [ -f "$OUT/initrd-display.cpio" ] && [ -f "$OUT/disk.qcow2" ] &&
		[ "$(manifest_field "$M" agent_source_sha256)" = "$AGENT_HASH" ] &&
		[ "$(manifest_field "$M" script_sha256)" = "$SCRIPT_HASH" ] &&
		[ "$(manifest_field "$M" busybox_version)" = "$BUSYBOX_VER" ] &&
		[ "$(manifest_field "$M" go_version)" = "$GOVER" ] &&
		[ "$(manifest_field "$M" guest_kernel)" = "$KERNEL_KIND" ] &&
		[ "$(manifest_field "$M" kernel_build_key)" = "$KERNEL_KEY" ] &&
		[ -n "$(manifest_field "$M" openssh_version)" ] &&
		[ -f "$CACHE/ssh/$(manifest_field "$M" openssh_version)_$SSH_LIST_HASH/done" ]
}
# apt-cache takes about a second here (no binary package cache), so skip it while the
# apt lists are older than the manifest: the kernel it resolves cannot have changed.
if image_matches && [ -z "$(find /var/lib/apt/lists -maxdepth 1 -type f -newer "$M" -print -quit 2>/dev/null)" ]; then
	echo "guest image up to date: $OUT"
	exit 0
fi

KPKG=
KVER_PKG=
if [ "$KERNEL_KIND" = fluxvm ]; then
	# Our kernel follows linux-source-6.1 as the stock image follows linux-image-amd64:
	# a newer package in the apt lists (Debian's kernel updates) is installed, which
	# changes the kernel's cache key and so rebuilds it.
	SRC_CAND=$(apt-cache policy linux-source-6.1 2>/dev/null | awk '/Candidate:/ {print $2; exit}')
	SRC_INST=$(dpkg-query -W -f='${Version}' linux-source-6.1 2>/dev/null || true)
	if [ -n "$SRC_CAND" ] && [ "$SRC_CAND" != "(none)" ] && [ "$SRC_CAND" != "$SRC_INST" ]; then
		say "installing linux-source-6.1 $SRC_CAND (was ${SRC_INST:-not installed})"
		"$REPO/scripts/apt-install.sh" linux-source-6.1 || die "installing linux-source-6.1 failed (see above)"
		KERNEL_KEY=$("$REPO/scripts/guest-kernel.sh" -key)
	fi
else
	KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
	[ -n "$KPKG" ] || die "cannot resolve the kernel package of linux-image-amd64 (apt-cache depends); run apt-get update"
	KVER_PKG=$(apt-cache show --no-all-versions "$KPKG" 2>/dev/null | awk '/^Version:/ {print $2; exit}')
	[ -n "$KVER_PKG" ] || die "apt-cache show $KPKG gave no version; run apt-get update"
fi

SSH_VER=$(apt-cache show --no-all-versions openssh-server 2>/dev/null | awk '/^Version:/ {print $2; exit}')
[ -n "$SSH_VER" ] || die "apt-cache show openssh-server gave no version; run apt-get update"
SSH_VER=${SSH_VER#*:} # the epoch (1:) does not belong in a file name

if image_matches && [ "$(manifest_field "$M" kernel_package)" = "$KPKG" ] &&
	[ "$(manifest_field "$M" kernel_package_version)" = "$KVER_PKG" ] &&
	[ "$(manifest_field "$M" openssh_version)" = "$SSH_VER" ]; then
	touch "$M"
	echo "guest image up to date: $OUT"
	exit 0
fi

mkdir -p "$CACHE/debs" "$CACHE/kernels" "$(dirname "$OUT")"
WORK=$(mktemp -d "$CACHE/.guest-image.XXXXXX")
NEW=
trap 'rm -rf "$WORK" ${NEW:+"$NEW"}' EXIT

# --- kernel: vmlinux + the modules we need, cached per package version ----------------

if [ "$KERNEL_KIND" = fluxvm ]; then
	# Ours: built (minutes) only when its configuration or source version changed.
	KCACHE=$("$REPO/scripts/guest-kernel.sh") || die "building the guest kernel failed (scripts/guest-kernel.sh said why above)"
else
	KCACHE="$CACHE/kernels/${KPKG}_${KVER_PKG}"
fi
# The cache holds the modules of one MODULES list: another list means extracting again.
if [ "$KERNEL_KIND" = debian ] && { [ ! -f "$KCACHE/done" ] || [ "$(cat "$KCACHE/modules.wanted" 2>/dev/null)" != "$MODULES" ]; }; then
	DEB="$CACHE/debs/${KPKG}_${KVER_PKG}_amd64.deb"
	if [ ! -f "$DEB" ]; then
		say "downloading $KPKG $KVER_PKG"
		[ "$(id -u)" = 0 ] || die "downloading the kernel package needs root (apt); run as root"
		if ! (cd "$WORK" && apt-get download -q "$KPKG=$KVER_PKG" >/dev/null 2>&1); then
			say "download failed; running apt-get update"
			apt-get update -q >/dev/null || die "apt-get update failed"
			(cd "$WORK" && apt-get download -q "$KPKG=$KVER_PKG" >/dev/null) || die "apt-get download $KPKG failed"
		fi
		mv "$WORK"/"${KPKG}"_*.deb "$DEB.tmp"
		mv "$DEB.tmp" "$DEB"
	fi
	say "extracting $KPKG"
	dpkg-deb -x "$DEB" "$WORK/pkg"
	KREL=$(ls "$WORK/pkg/lib/modules" | head -n1)
	[ -n "$KREL" ] || die "$DEB has no /lib/modules/<version>"
	VMLINUZ="$WORK/pkg/boot/vmlinuz-$KREL"
	[ -f "$VMLINUZ" ] || die "$DEB has no /boot/vmlinuz-$KREL"

	KC="$WORK/kcache"
	mkdir -p "$KC/modules"
	# Like the kernel's scripts/extract-vmlinux: find a compressed payload by its magic
	# and unpack from there, ignoring what trails it; keep the first result that is ELF.
	say "unpacking vmlinux"
	try_unpack() { # try_unpack MAGIC-REGEX COMMAND...
		local magic=$1
		shift
		local off
		for off in $(LC_ALL=C grep -obUaP "$magic" "$VMLINUZ" 2>/dev/null | cut -d: -f1 | head -n 5); do
			tail -c +$((off + 1)) "$VMLINUZ" | "$@" >"$KC/vmlinux" 2>/dev/null || true
			if [ "$(head -c 4 "$KC/vmlinux" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; then
				return 0
			fi
		done
		return 1
	}
	try_unpack '\xFD7zXZ\x00' xz -dc --single-stream ||
		try_unpack '\x28\xb5\x2f\xfd' zstd -dc ||
		try_unpack '\x1f\x8b\x08' gzip -dc ||
		die "could not find an xz, zstd or gzip compressed ELF kernel inside $VMLINUZ"

	# Modules: plain .ko files, plus what they depend on (modules.dep when the package
	# has it, else the depends= field of each module's .modinfo), dependencies first.
	MODROOT="$WORK/pkg/lib/modules/$KREL"
	declare -A FILE=() DONE=()
	while IFS= read -r f; do
		n=$(basename "$f")
		n=${n%.xz}
		n=${n%.zst}
		n=${n%.ko}
		FILE[${n//-/_}]=$f
	done < <(find "$MODROOT/kernel" -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst')
	ORDER=()
	deps_of() {
		local f=${FILE[$1]} rel
		if [ -f "$MODROOT/modules.dep" ]; then
			rel=${f#"$MODROOT"/}
			sed -n "s#^$rel: *##p" "$MODROOT/modules.dep" | tr ' ' '\n' | sed -e 's#.*/##' -e 's/\.ko.*//' -e 's/-/_/g'
			return
		fi
		case "$f" in
		*.xz) xz -dc "$f" ;;
		*.zst) zstd -dc "$f" ;;
		*) cat "$f" ;;
		esac | tr '\0' '\n' | sed -n 's/^depends=//p' | head -n1 | tr ',' '\n' | sed 's/-/_/g'
	}
	add_module() {
		local n=$1 d
		[ -z "${DONE[$n]:-}" ] || return 0
		DONE[$n]=1
		if [ -z "${FILE[$n]:-}" ]; then
			if grep -qE "/${n}\.ko$|/${n//_/-}\.ko$" "$MODROOT/modules.builtin" 2>/dev/null; then
				return 0 # built into the kernel
			fi
			die "module $n is neither in $KPKG nor built in"
		fi
		for d in $(deps_of "$n"); do
			[ -n "$d" ] && add_module "$d"
		done
		ORDER+=("$n")
	}
	for n in $MODULES; do add_module "$n"; done
	for n in "${ORDER[@]}"; do
		f=${FILE[$n]}
		rel=${f#"$MODROOT"/}
		rel=${rel%.xz}
		rel=${rel%.zst}
		mkdir -p "$KC/modules/$(dirname "$rel")"
		case "$f" in
		*.xz) xz -dc "$f" >"$KC/modules/$rel" ;;
		*.zst) zstd -dc "$f" >"$KC/modules/$rel" ;;
		*) cp "$f" "$KC/modules/$rel" ;;
		esac
		echo "$n" >>"$KC/modules.list"
	done
	cp "$MODROOT/modules.builtin" "$KC/modules/" 2>/dev/null || true
	echo "$KREL" >"$KC/release"
	echo "$MODULES" >"$KC/modules.wanted"
	touch "$KC/done"
	rm -rf "$KCACHE"
	mv "$KC" "$KCACHE"
	rm -rf "$WORK/pkg"
fi
KREL=$(cat "$KCACHE/release")

# --- OpenSSH server: the packages unpacked, cached per version -------------------------

SCACHE="$CACHE/ssh/${SSH_VER}_$SSH_LIST_HASH"
if [ ! -f "$SCACHE/done" ]; then
	[ "$(id -u)" = 0 ] || die "downloading the OpenSSH packages needs root (apt); run as root"
	say "downloading $SSH_PKGS $SSH_LIB_PKGS"
	mkdir -p "$WORK/sshdebs"
	if ! (cd "$WORK/sshdebs" && apt-get download -q $SSH_PKGS $SSH_LIB_PKGS >/dev/null 2>&1); then
		say "download failed; running apt-get update"
		apt-get update -q >/dev/null || die "apt-get update failed"
		(cd "$WORK/sshdebs" && apt-get download -q $SSH_PKGS $SSH_LIB_PKGS >/dev/null) || die "apt-get download $SSH_PKGS $SSH_LIB_PKGS failed"
	fi
	SC="$WORK/sshcache"
	mkdir -p "$SC"
	for d in "$WORK"/sshdebs/*.deb; do
		dpkg-deb -x "$d" "$SC/pkg"
		cp "$d" "$CACHE/debs/"
	done
	[ -x "$SC/pkg/usr/sbin/sshd" ] && [ -x "$SC/pkg/usr/lib/openssh/sftp-server" ] && [ -x "$SC/pkg/usr/bin/rsync" ] ||
		die "the packages $SSH_PKGS have no /usr/sbin/sshd, /usr/lib/openssh/sftp-server or /usr/bin/rsync"
	touch "$SC/done"
	mkdir -p "$CACHE/ssh"
	rm -rf "$SCACHE"
	mv "$SC" "$SCACHE"
fi

# --- initramfs ------------------------------------------------------------------------

say "building fluxvm-guest"
(cd "$REPO" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags='-s -w' -o "$WORK/fluxvm-guest" ./cmd/fluxvm-guest)

say "building initrd.cpio and initrd-display.cpio"
R="$WORK/root"
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,etc/fluxvm,dev,proc,sys,tmp,run,root,lib/modules/"$KREL"}
install -m 0755 "$WORK/fluxvm-guest" "$R/init"
install -m 0755 /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do
	case "$a" in busybox | init | linuxrc) continue ;; esac
	[ -e "$R/bin/$a" ] || ln -s busybox "$R/bin/$a"
done
# modules.list is in load order, each module after its dependencies, and follows
# MODULES: everything up to the last port module (built-in ones are not listed) is what
# the port needs, then up to the last late module what is loaded after readiness, and
# the rest (the display modules and what they need) is loaded only with a display.
last_line() { # last_line MODULE... -> line of the last of them in modules.list, 0 for none
	local n i l=0
	for n in "$@"; do
		i=$(grep -nx "$n" "$KCACHE/modules.list" | cut -d: -f1)
		if [ -n "$i" ] && [ "$i" -gt "$l" ]; then l=$i; fi
	done
	echo "$l"
}
P=$(last_line $PORT_MODULES)
L=$(last_line $LATE_MODULES)
[ "$L" -ge "$P" ] || L=$P
awk -v p="$P" 'NR <= p' "$KCACHE/modules.list" >"$R/etc/fluxvm/modules"
awk -v p="$P" -v l="$L" 'NR > p && NR <= l' "$KCACHE/modules.list" >"$R/etc/fluxvm/modules.late"
# The display modules (about 2.3 MB) go into a second archive instead: every byte of
# the initramfs is unpacked, and kept in memory, on every boot, and a headless VM has
# no use for them. initrd-display.cpio is initrd.cpio followed by that archive (the
# kernel unpacks concatenated archives in turn); the QEMU driver boots VMs with a
# display from it.
D="$WORK/display"
mkdir -p "$D/etc/fluxvm" "$D/lib/modules/$KREL"
awk -v l="$L" 'NR > l' "$KCACHE/modules.list" >"$D/etc/fluxvm/modules.display"
while IFS= read -r f; do
	rel=${f#"$KCACHE/modules/"}
	n=$(basename "$rel")
	n=${n%.ko}
	into=$R
	if grep -qx "${n//-/_}" "$D/etc/fluxvm/modules.display"; then into=$D; fi
	mkdir -p "$into/lib/modules/$KREL/$(dirname "$rel")"
	cp -a "$f" "$into/lib/modules/$KREL/$rel"
done < <(find "$KCACHE/modules" -type f)
# sshd, sftp-server, rsync and what they load (ldd: the packages' own libraries first, then
# this host's), at the paths the loader looks in. PAM is off in sshd_config, so no PAM
# modules; sshd still links libpam.
install -D -m 0755 "$SCACHE/pkg/usr/sbin/sshd" "$R/usr/sbin/sshd"
install -D -m 0755 "$SCACHE/pkg/usr/lib/openssh/sftp-server" "$R/usr/lib/openssh/sftp-server"
install -D -m 0755 "$SCACHE/pkg/usr/bin/rsync" "$R/usr/bin/rsync"
SSH_LIBPATH=$(find "$SCACHE/pkg" -name '*.so*' -printf '%h\n' | sort -u | paste -sd:)
for bin in "$R/usr/sbin/sshd" "$R/usr/lib/openssh/sftp-server" "$R/usr/bin/rsync"; do
	missing=$(LD_LIBRARY_PATH=$SSH_LIBPATH ldd "$bin" | awk '/not found/ {print $1}')
	[ -z "$missing" ] || die "$(basename "$bin") needs $missing, which neither this host nor $SSH_LIB_PKGS has; install the package that holds it"
	LD_LIBRARY_PATH=$SSH_LIBPATH ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'
done | sort -u | while IFS= read -r lib; do
	dest=$R/lib/x86_64-linux-gnu/$(basename "$lib")
	case "$lib" in /lib64/*) dest=$R$lib ;; esac
	[ -e "$dest" ] || install -D -m 0644 "$(readlink -f "$lib")" "$dest"
done
chmod 0755 "$R"/lib64/ld-linux-x86-64.so.2
mkdir -p "$R/etc/ssh" "$R/run/sshd" "$R/var/empty" "$R/home" "$R/var/log"
chmod 0755 "$R/run/sshd"
# Host keys are made by the agent at boot (one ed25519 key per VM); users' keys reach
# ~/.ssh/authorized_keys through the agent (fluxvm-guest ssh-keys USER).
cat >"$R/etc/ssh/sshd_config" <<'SSHD'
# FluxVM guest: keys only, written by the guest agent.
HostKey /etc/ssh/ssh_host_ed25519_key
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
PrintMotd no
PrintLastLog no
UseDNS no
X11Forwarding no
AllowTcpForwarding yes
Subsystem sftp /usr/lib/openssh/sftp-server
SSHD
echo "root:x:0:0:root:/root:/bin/sh" >"$R/etc/passwd"
echo "sshd:x:100:65534::/run/sshd:/bin/false" >>"$R/etc/passwd"
echo "nobody:x:65534:65534:nobody:/nonexistent:/bin/false" >>"$R/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$R/etc/group"
printf '/bin/sh\n' >"$R/etc/shells"
echo "fluxvm" >"$R/etc/hostname"
if [ "$KERNEL_KIND" = fluxvm ]; then
	printf 'NAME="FluxVM minimal"\nPRETTY_NAME="FluxVM minimal (FluxVM kernel %s)"\nID=fluxvm-minimal\n' "$KREL" >"$R/etc/os-release"
else
	printf 'NAME="FluxVM minimal"\nPRETTY_NAME="FluxVM minimal (Debian %s kernel)"\nID=fluxvm-minimal\n' "$KREL" >"$R/etc/os-release"
fi
chmod 1777 "$R/tmp"
chmod 0700 "$R/root"
# The kernel hands /dev/console to init before anything is mounted; without the node
# early errors go nowhere. mknod needs root: skip it otherwise.
mknod -m 0600 "$R/dev/console" c 5 1 2>/dev/null || true
REPRO=
cpio --help 2>/dev/null | grep -q -- --reproducible && REPRO=--reproducible
mkcpio() { # mkcpio DIR -> a newc archive of DIR's contents on stdout
	(cd "$1" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet $REPRO)
}
mkcpio "$R" >"$WORK/initrd.cpio"
mkcpio "$D" >"$WORK/display.cpio"
cat "$WORK/initrd.cpio" "$WORK/display.cpio" >"$WORK/initrd-display.cpio"

# --- assemble -------------------------------------------------------------------------

json_list() { sed 's/.*/"&"/' | paste -sd, | sed 's/,/, /g'; }
if [ "$KERNEL_KIND" = fluxvm ]; then
	KERNEL_FROM="\"guest_kernel\": \"fluxvm\",
    \"kernel_source_package\": \"$(cut -d' ' -f1 "$KCACHE/source")\",
    \"kernel_source_version\": \"$(cut -d' ' -f2 "$KCACHE/source")\",
    \"kernel_config_sha256\": \"$(sha256sum "$REPO/guest/kernel/config-6.1" | cut -d' ' -f1)\",
    \"kernel_build_key\": \"$KERNEL_KEY\","
else
	KERNEL_FROM="\"guest_kernel\": \"debian\",
    \"kernel_package\": \"$KPKG\",
    \"kernel_package_version\": \"$KVER_PKG\","
fi
NEW=$(mktemp -d "$(dirname "$OUT")/.$(basename "$OUT").new.XXXXXX")
mv "$WORK/initrd.cpio" "$NEW/initrd.cpio"
mv "$WORK/initrd-display.cpio" "$NEW/initrd-display.cpio"
cp "$KCACHE/vmlinux" "$NEW/vmlinux"
qemu-img create -q -f qcow2 "$NEW/disk.qcow2" 1G
cat >"$NEW/fluxvm-image.json" <<EOF
{
  "format_version": 1,
  "name": "$NAME",
  "guest_os": "linux",
  "arch": "x86_64",
  "kernel": "vmlinux",
  "initrd": "initrd.cpio",
  "display_initrd": "initrd-display.cpio",
  "disk": "disk.qcow2",
  "cmdline": "$CMDLINE",
  "agent": "virtio-serial:org.fluxvm.agent",
  "kernel_version": "$KREL",
  "modules": [$(cat "$R/etc/fluxvm/modules" "$R/etc/fluxvm/modules.late" | json_list)],
  "display_modules": [$(json_list <"$D/etc/fluxvm/modules.display")],
  "ssh_server": "/usr/sbin/sshd",
  "built_from": {
    $KERNEL_FROM
    "busybox_version": "$BUSYBOX_VER",
    "agent_source_sha256": "$AGENT_HASH",
    "script_sha256": "$SCRIPT_HASH",
    "go_version": "$GOVER",
    "openssh_version": "$SSH_VER"
  }
}
EOF
chmod 0755 "$NEW"
if [ -d "$OUT" ]; then
	OLD="$(dirname "$OUT")/.$(basename "$OUT").old.$$"
	mv "$OUT" "$OLD"
	mv "$NEW" "$OUT"
	rm -rf "$OLD"
else
	mv "$NEW" "$OUT"
fi
NEW=
say "built $OUT ($KERNEL_KIND kernel $KREL, initrd $(du -h "$OUT/initrd.cpio" | cut -f1), with a display $(du -h "$OUT/initrd-display.cpio" | cut -f1); modules: $(paste -sd' ' "$KCACHE/modules.list"))"
