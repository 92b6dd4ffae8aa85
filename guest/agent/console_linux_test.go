package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/guest/protocol"
)

func TestRaiseConsoleLevelOnlyRaisesToQuiet(t *testing.T) {
	for _, tc := range []struct {
		name, printk string
		found        int
		after        string // the file afterwards
		wantErr      string
	}{
		{"booted quieter than quiet", "3\t4\t1\t7\n", 3, "4", ""},
		{"booted silent", "1\t4\t1\t7\n", 1, "4", ""},
		{"quiet already", "4\t4\t1\t7\n", 4, "4\t4\t1\t7\n", ""},
		{"louder is left alone", "7\t4\t1\t7\n", 7, "7\t4\t1\t7\n", ""},
		{"empty", "", 0, "", "is empty"},
		{"not a number", "x\t4\t1\t7\n", 0, "x\t4\t1\t7\n", "read console log level"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "printk")
			if err := os.WriteFile(path, []byte(tc.printk), 0o644); err != nil {
				t.Fatal(err)
			}
			found, err := raiseConsoleLevel(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err = %v, want one containing %q", err, tc.wantErr)
				}
			} else if err != nil || found != tc.found {
				t.Errorf("raiseConsoleLevel = %d, %v; want %d", found, err, tc.found)
			}
			if b, _ := os.ReadFile(path); string(b) != tc.after {
				t.Errorf("printk file = %q, want %q", b, tc.after)
			}
		})
	}
}

func TestKernelParamMatchesWholeWords(t *testing.T) {
	for cmdline, want := range map[string]bool{
		"console=tty0 console=ttyS0 quiet " + protocol.DisplayParam + " noreplace-smp\n": true,
		protocol.DisplayParam:                                              true,
		"console=ttyS0 quiet":                                              false,
		"console=ttyS0 " + protocol.DisplayParam + "0":                     false,
		"console=ttyS0 x" + protocol.DisplayParam:                          false,
		"console=ttyS0 " + strings.TrimSuffix(protocol.DisplayParam, "=1"): false,
	} {
		if got := kernelParam(cmdline, protocol.DisplayParam); got != want {
			t.Errorf("kernelParam(%q) = %v, want %v", cmdline, got, want)
		}
	}
}
