package base

import "syscall"

// dieWithParent makes the plugin die with its agent: a new agent starts new
// plugins, and an old one still holding a VM's QMP connection would lock
// them out.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
