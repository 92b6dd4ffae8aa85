# fluxvm-agent node -config "/Library/Application Support/FluxVM/agent-mac.hcl"
#
# A Mac rented whole or shared: up to two macOS guests at once (Apple's
# licence), through Virtualization.framework. This file holds bearer tokens:
# keep it mode 0600. Make tokens with
#   openssl rand -hex 32

name      = "mac-mini-01"
state_dir = "/Library/Application Support/FluxVM/state"
listen    = "0.0.0.0:7777"

labels = {
  rack  = "m3"
  model = "Macmini9,1"
  arch  = "arm64"
}

tokens {
  admin     = ["replace-with-64-hex-chars-from-openssl-rand-hex-32-admin"]
  read_only = ["replace-with-64-hex-chars-from-openssl-rand-hex-32-readonly"]
}

# macOS itself keeps two cores and 4 GiB.
reserved {
  vcpus      = 2
  memory_mib = 4096
}

policy {
  allowed_image_dirs = ["/Library/Application Support/FluxVM/images"]
}

plugin "vz" {
  config {
    # macOS guests that may run at once; Apple's licence allows at most 2.
    macos_slots = 2
  }
}

# Heartbeats to central every 10 s. Central calls this Mac back with the same
# fleet token: list it in tokens.admin above too.
central {
  url       = "https://central.example.net:7799"
  token     = "replace-with-central's-fleet-token"
  advertise = "http://mac-mini-01.example.net:7777" # how central reaches this node's API
}
