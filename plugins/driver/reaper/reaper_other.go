//go:build !linux

package reaper

// Start does nothing outside Linux: there is no child subreaper, and launchd
// (PID 1 on macOS) reaps orphans.
func Start() error { return nil }

// ReapAdopted reaps nothing outside Linux.
func ReapAdopted() []int { return nil }
