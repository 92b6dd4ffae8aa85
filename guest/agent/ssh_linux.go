package agent

import (
	"os"
	"os/exec"
	"time"
)

// sshdRestart is the pause before starting an SSH server that exited again.
const sshdRestart = 2 * time.Second

// runSSHD gives the guest a host key and keeps the image's SSH server running on port
// 22 (it listens on every address, so interfaces configured later are covered). Its
// log is /var/log/sshd.log. An image without sshd is left alone.
func runSSHD(reaper *Reaper, logf func(string, ...any)) {
	if _, err := os.Stat(SSHDPath); err != nil {
		return
	}
	if err := WriteHostKey(SSHHostKeyPath); err != nil {
		logf("%v; no SSH server", err)
		return
	}
	// Privilege separation's directory; /run is a fresh tmpfs.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		logf("ssh server: %v", err)
		return
	}
	_ = os.MkdirAll("/var/log", 0o755)
	for {
		log, err := os.OpenFile("/var/log/sshd.log", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			logf("ssh server: %v", err)
			return
		}
		// -D: stay in the foreground, a child the reaper reports to us; -e: log to
		// stderr, the file.
		cmd := exec.Command(SSHDPath, "-D", "-e")
		cmd.Stdout, cmd.Stderr = log, log
		ch, err := reaper.Start(cmd)
		log.Close()
		if err != nil {
			logf("start ssh server: %v", err)
			return
		}
		ws := <-ch
		logf("ssh server exited (%v); restarting it (see /var/log/sshd.log)", ws)
		time.Sleep(sshdRestart)
	}
}
