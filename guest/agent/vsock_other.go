//go:build !linux && !darwin

package agent

import (
	"errors"
	"os"
)

var (
	powerOffCommand = []string{"shutdown", "-h", "now"}
	rebootCommand   = []string{"shutdown", "-r", "now"}
)

func listenVsock(uint32) (*vsockListener, error) {
	return nil, errors.New("vsock is served on Linux and macOS guests only")
}

func (l *vsockListener) Accept() (*os.File, error) { return nil, errors.New("no vsock here") }
func (l *vsockListener) Close() error              { return nil }
