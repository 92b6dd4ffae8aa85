#!/usr/bin/env bash
# scripts/mac-smoke.sh: the first run of the vz driver on a real Mac, and every run after.
#
# It drives a node agent that runs the vz driver (examples/agent-mac.hcl, docs/mac.md) through
# the node API: create, exec, disk snapshot, restore, clone, memory snapshot, a kill of the
# agent (the VMs must survive it), delete; and prints a report to paste into an issue. It changes
# nothing but the VMs it makes (all named smoke-*) and, for the kill, the agent's process.
#
# Needs: fluxctl, curl and jq on PATH; the agent running; and
#   FLUXVM_NODE         the node API URL (default http://127.0.0.1:7777)
#   FLUXVM_NODE_TOKEN   an admin token of the node
#   LINUX_IMAGE         a raw EFI disk of a Linux guest whose fluxvm-guest serves -vsock 1024
#   MACOS_IMAGE         optional: a macOS image directory made by `fluxvm-agent vz-install`
#                       (with fluxvm-guest -vsock 1024 installed as a launchd daemon)
#   AGENT_RESTART       optional: how to kill and restart the agent
#                       (default: sudo launchctl kickstart -k system/dev.fluxvm.agent)
set -uo pipefail

NODE=${FLUXVM_NODE:-http://127.0.0.1:7777}
export FLUXVM_NODE=$NODE
: "${FLUXVM_NODE_TOKEN:?set FLUXVM_NODE_TOKEN to an admin token of the node}"
: "${LINUX_IMAGE:?set LINUX_IMAGE to a raw EFI disk of a Linux guest with fluxvm-guest -vsock 1024}"
AGENT_RESTART=${AGENT_RESTART:-sudo launchctl kickstart -k system/dev.fluxvm.agent}
for tool in fluxctl curl jq; do
	command -v "$tool" >/dev/null || { echo "mac-smoke: $tool is not on PATH" >&2; exit 2; }
done

REPORT=()
FAILED=0
# step NAME CMD...: runs CMD, records PASS or FAIL with its time and, on failure, its output.
step() {
	local name=$1
	shift
	local start out rc
	start=$(date +%s)
	out=$("$@" 2>&1)
	rc=$?
	local secs=$(($(date +%s) - start))
	if [ $rc -eq 0 ]; then
		REPORT+=("| $name | PASS | ${secs}s | |")
	else
		FAILED=$((FAILED + 1))
		out=$(printf '%s' "$out" | tail -n 5 | tr '\n|' ' /')
		REPORT+=("| $name | FAIL ($rc) | ${secs}s | \`$out\` |")
	fi
	echo "mac-smoke: $name: rc=$rc (${secs}s)" >&2
	return $rc
}

api() { # api METHOD PATH [JSON]
	curl -fsS -X "$1" -H "Authorization: Bearer $FLUXVM_NODE_TOKEN" -H 'Content-Type: application/json' \
		${3:+--data "$3"} "$NODE$2"
}

# The VM's host process pid, from the node's view of the VM.
host_pid() { fluxctl vm get "$1" -o json | jq -r '.attributes.pid // empty'; }

exec_has() { # exec_has VM WANT CMD...: the command's output contains WANT
	local vm=$1 want=$2
	shift 2
	fluxctl vm exec "$vm" -- "$@" | grep -q -- "$want"
}

vz_healthy() { api GET /v1/health | jq -e '.drivers[] | select(.name == "vz" and .health == "healthy")'; }

memory_cap_matches_os() {
	local claims major
	claims=$(api GET /v1/health | jq -r '.drivers[] | select(.name == "vz") | .capabilities | index("memory_snapshots") != null')
	major=$(sw_vers -productVersion | cut -d. -f1)
	[ "$claims" = "$([ "$major" -ge 14 ] && echo true || echo false)" ]
}

# wait_exec VM: the guest agent answers (after a start, for up to 5 minutes).
wait_exec() {
	for _ in $(seq 60); do
		fluxctl vm exec "$1" -- true >/dev/null 2>&1 && return 0
		sleep 5
	done
	return 1
}

wait_agent() {
	for _ in $(seq 60); do
		api GET /v1/health >/dev/null 2>&1 && return 0
		sleep 1
	done
	return 1
}

cleanup() { fluxctl vm rm -y smoke-linux smoke-clone smoke-macos >/dev/null 2>&1 || true; }
trap cleanup EXIT
cleanup

# --- Linux guest -----------------------------------------------------------------------
step "vz driver healthy" vz_healthy
step "vz claims memory snapshots exactly on macOS 14 or later" memory_cap_matches_os
step "create Linux VM, guest agent ready over vsock" \
	fluxctl vm create smoke-linux --driver vz --guest-os linux --image "$LINUX_IMAGE" --vcpus 2 --memory-mib 2048 --wait --wait-timeout 5m
step "exec in Linux VM" exec_has smoke-linux Linux uname -a
step "disk snapshot of the running VM" api POST /v1/vms/smoke-linux/snapshot '{"tag":"smoke-disk"}'
step "write a file after the snapshot" fluxctl vm exec smoke-linux -- sh -c 'echo after > /root/smoke-marker && sync'
step "stop" fluxctl vm stop smoke-linux
step "restore the disk snapshot into the stopped VM" api POST /v1/vms/smoke-linux/restore '{"tag":"smoke-disk"}'
step "start from the restored disk" fluxctl vm start smoke-linux
step "guest agent answers after the start" wait_exec smoke-linux
step "the file written after the snapshot is gone" fluxctl vm exec smoke-linux -- sh -c '! test -e /root/smoke-marker'
step "clone from the snapshot while the source runs" api POST /v1/vms/smoke-linux/clone '{"name":"smoke-clone","snapshot":"smoke-disk"}'
step "exec in the clone" wait_exec smoke-clone
step "memory snapshot (macOS 14 or later)" api POST /v1/vms/smoke-linux/snapshot '{"tag":"smoke-mem","memory":true}'
step "write a file after the memory snapshot" fluxctl vm exec smoke-linux -- sh -c 'echo after > /tmp/smoke-mem-marker'
step "restore the memory snapshot into the running VM" api POST /v1/vms/smoke-linux/restore '{"tag":"smoke-mem"}'
step "the restored VM runs on without that file, without a boot" fluxctl vm exec smoke-linux -- sh -c '! test -e /tmp/smoke-mem-marker'

# --- macOS guest -----------------------------------------------------------------------
if [ -n "${MACOS_IMAGE:-}" ]; then
	step "create macOS VM, guest agent ready over vsock" \
		fluxctl vm create smoke-macos --driver vz --guest-os macos --image "$MACOS_IMAGE" --vcpus 4 --memory-mib 8192 --display --wait --wait-timeout 15m
	step "exec in macOS VM" exec_has smoke-macos ProductVersion sw_vers
else
	REPORT+=("| macOS guest | NOT RUN | | MACOS_IMAGE not set |")
fi

# --- the agent dies; the VMs do not ------------------------------------------------------
before=$(host_pid smoke-linux)
step "kill and restart the agent ($AGENT_RESTART)" sh -c "$AGENT_RESTART"
step "agent answers again" wait_agent
same_pid() { [ -n "$before" ] && [ "$(host_pid smoke-linux)" = "$before" ]; }
step "the VM's host process survived (same pid $before)" same_pid
step "exec in the recovered VM" exec_has smoke-linux Linux uname -a

# --- delete ------------------------------------------------------------------------------
step "delete every smoke VM" fluxctl vm rm -y smoke-linux smoke-clone ${MACOS_IMAGE:+smoke-macos}
no_host_left() { ! pgrep -f "vz-host -workspace .*/vms/" >/dev/null; }
step "no vz host process is left" no_host_left

# --- report ------------------------------------------------------------------------------
cat <<EOF

### vz driver smoke report

- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)
- host: $(sw_vers -productName 2>/dev/null) $(sw_vers -productVersion 2>/dev/null) ($(sw_vers -buildVersion 2>/dev/null)), $(uname -m), $(sysctl -n machdep.cpu.brand_string 2>/dev/null)
- fluxvm-agent: $(fluxvm-agent version 2>/dev/null || echo "not on PATH")
- entitlement: $(codesign -d --entitlements - "$(command -v fluxvm-agent)" 2>/dev/null | grep -c com.apple.security.virtualization) (1: signed with com.apple.security.virtualization)
- Linux image: $LINUX_IMAGE; macOS image: ${MACOS_IMAGE:-none}

| step | result | time | output (last lines, on failure) |
| --- | --- | --- | --- |
EOF
printf '%s\n' "${REPORT[@]}"
echo
echo "$FAILED step(s) failed."
[ "$FAILED" -eq 0 ]
