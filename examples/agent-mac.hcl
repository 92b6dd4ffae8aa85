# fluxvm-agent node -config /usr/local/etc/fluxvm/agent.hcl
#
# A Mac with Apple silicon running macOS and Linux VMs with the vz driver
# (Apple's Virtualization framework). The vz driver has never run on a Mac
# yet: docs/mac.md says how to install, sign and check it, and
# scripts/mac-smoke.sh makes the first report. This file holds bearer
# tokens: keep it mode 0600, owned by the user the agent runs as. Make
# tokens with
#   openssl rand -hex 32

name = "mini-1" # defaults to the host name
# Short on purpose: each VM's socket is <state_dir>/vms/<id>/host.sock, and
# macOS allows unix socket paths of 103 bytes at most.
state_dir = "/usr/local/var/fluxvm"
listen    = "127.0.0.1:7777"

labels = {
  arch = "arm64"
  site = "rack-2"
}

tokens {
  admin     = ["replace-with-64-hex-chars-from-openssl-rand-hex-32-admin"]
  read_only = ["replace-with-64-hex-chars-from-openssl-rand-hex-32-readonly"]
}

# What macOS itself keeps.
reserved {
  vcpus      = 2
  memory_mib = 4096
}

# VM specs may only name images under these directories: a Linux image is a
# raw EFI disk, a macOS image a directory made by `fluxvm-agent vz-install`.
policy {
  allowed_image_dirs = ["/usr/local/var/fluxvm-images"]
}

plugin "vz" {
  config {
    macos_slots = 2 # Apple's licence: at most two macOS VMs at once (0-2)
    vcpus       = 0 # 0: all of the Mac's
    memory_mib  = 0
  }
}

# central {
#   url       = "https://central.example.net:7799"
#   token     = "replace-with-central's-fleet-token"
#   advertise = "http://10.0.0.6:7777"
# }
