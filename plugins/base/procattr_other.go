//go:build !linux

package base

import "syscall"

// dieWithParent has no portable equivalent outside Linux; there the plugin
// notices its agent is gone when go-plugin's connection closes.
func dieWithParent(*syscall.SysProcAttr) {}
