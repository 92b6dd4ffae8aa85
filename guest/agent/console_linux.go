package agent

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fluxvm/fluxvm/guest/protocol"
)

// DisplayModulesFile lists the modules PID 1 loads only when the kernel command line
// holds protocol.DisplayParam: the framebuffer drivers of the display devices QEMU
// offers and the virtio input driver. Same format as ModulesFile.
const DisplayModulesFile = "/etc/fluxvm/modules.display"

// printkFile holds the kernel's console log level as its first field.
const printkFile = "/proc/sys/kernel/printk"

// quietLevel is the console log level of the kernel's "quiet": errors and worse reach
// the console (KERN_ERR is 3, and a message shows when its level is below this).
const quietLevel = 4

// displayTTY is the virtual terminal the screen shows at boot.
const displayTTY = "/dev/tty1"

// kernelParam reports whether the kernel command line holds param as a whole word.
func kernelParam(cmdline, param string) bool {
	for _, f := range strings.Fields(cmdline) {
		if f == param {
			return true
		}
	}
	return false
}

// raiseConsoleLevel makes the kernel print messages of KERN_ERR and worse on the
// console from now on, as "quiet" does, if it was booted quieter (the QEMU driver boots
// microvm with loglevel=3, since its kernel's one error there is harmless); a louder
// level is left alone. path is printkFile; it returns the level it found.
func raiseConsoleLevel(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read console log level: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("read console log level: %s is empty", path)
	}
	level, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, fmt.Errorf("read console log level from %s: %w", path, err)
	}
	if level >= quietLevel {
		return level, nil
	}
	// Writing one number sets the first field only.
	if err := os.WriteFile(path, []byte(strconv.Itoa(quietLevel)), 0); err != nil {
		return level, fmt.Errorf("set console log level: %w", err)
	}
	return level, nil
}

// showConsole gives a VM with a display its console: it loads the display drivers
// (fbcon, built into the kernel, takes the framebuffer they register and draws the
// virtual terminals on it) and writes a banner on the terminal the screen shows, so
// the screen says what this guest is rather than staying blank.
func showConsole(mods moduleTree, info *protocol.Info, logf func(string, ...any)) {
	if err := mods.load(DisplayModulesFile); err != nil {
		logf("display: %v", err)
	}
	tty, err := os.OpenFile(displayTTY, os.O_WRONLY|unix.O_NOCTTY, 0)
	if err != nil {
		logf("display: %v", err)
		return
	}
	defer tty.Close()
	if err := writeBanner(tty, info); err != nil {
		logf("display: write banner on %s: %v", displayTTY, err)
	}
}

// writeBanner writes what the screen of a FluxVM guest says: what runs, and that
// commands go through the agent since the console has no login.
func writeBanner(w io.Writer, info *protocol.Info) error {
	_, err := fmt.Fprintf(w, "\n%s\n\n"+
		"  kernel     %s\n"+
		"  hostname   %s\n"+
		"  agent      fluxvm-guest %s\n\n"+
		"This console has no login. Run commands through the guest agent:\n"+
		"  fluxctl vm exec NAME -- COMMAND    (or: fluxctl fleet run VM -- COMMAND)\n\n",
		info.OS, info.Kernel, info.Hostname, info.AgentVersion)
	return err
}
