package vz

// Platform is what this host offers the driver, found once at start
// (hostPlatform, per build).
type Platform struct {
	// Usable is false when this binary cannot run VMs with the framework;
	// Why then says why, for people (fingerprint, errors).
	Usable bool
	Why    string
	// OSVersion is the host's macOS version ("14.5"), "" elsewhere.
	OSVersion string
	// SaveRestore is whether the framework can save and restore a VM's
	// memory (macOS 14 or later).
	SaveRestore bool
	// Volumes is whether extra disks can carry their volume id as the
	// disk's serial (block device identifiers: macOS 12.3 or later).
	Volumes bool
	// CPUs and MemoryMiB are the host's, offered to VMs.
	CPUs      int64
	MemoryMiB int64
}
