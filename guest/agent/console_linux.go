package agent

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// printkFile holds the kernel's console log level as its first field.
const printkFile = "/proc/sys/kernel/printk"

// quietLevel is the console log level of the kernel's "quiet": errors and worse reach
// the console (KERN_ERR is 3, and a message shows when its level is below this).
const quietLevel = 4

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
