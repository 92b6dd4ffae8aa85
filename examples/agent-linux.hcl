# fluxvm-agent node -config /etc/fluxvm/agent-linux.hcl
#
# A Linux host running VMs under QEMU. This file holds bearer tokens: keep it
# mode 0600, owned by the user the agent runs as. Make tokens with
#   openssl rand -hex 32

name      = "linux-node-01" # defaults to the host name
state_dir = "/var/lib/fluxvm"
listen    = "127.0.0.1:7777"

labels = {
  rack = "a1"
  arch = "x86_64"
}

# Third-party plugin binaries; built-in plugins (qemu, sim) need nothing here.
plugin_dir = "/usr/lib/fluxvm/plugins"

tokens {
  # Full access to the node API.
  admin = ["replace-with-64-hex-chars-from-openssl-rand-hex-32-admin"]
  # GET requests only: dashboards, monitoring.
  read_only = ["replace-with-64-hex-chars-from-openssl-rand-hex-32-readonly"]
}

# Capacity the scheduler leaves to the host itself.
reserved {
  vcpus      = 1
  memory_mib = 1024
}

# VM specs may only name images under these directories.
policy {
  allowed_image_dirs = ["/var/cache/fluxvm/images"]
}

plugin "qemu" {
  # Decoded against the plugin's own schema when the agent starts it.
  config {
    accel      = "auto" # probe KVM with a real boot, fall back to TCG
    machine    = "microvm"
    image_dirs = ["/var/cache/fluxvm/images"]
  }
}

# Report to central (`fluxvm-agent central`): a heartbeat every 10 s with this
# node's address, capacity, drivers, labels and VMs. Enroll the node once
# (docs/fleets.md): `fluxctl fleet invite --node` on the operator's machine,
# then `fluxvm-agent node enroll -config THIS-FILE -invite INVITE` here and
# compare the six-digit codes. The credential central hands over lands in
# state_dir; no central token belongs in this file.
# central {
#   url = "https://central.example.net:7799"
# }
