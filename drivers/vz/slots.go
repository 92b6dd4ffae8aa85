package vz

import (
	"sort"
	"sync"

	"github.com/fluxvm/fluxvm/plugins/driver"
)

// MacOSSlots is how many macOS VMs may run on one Mac at once: Apple's
// licence allows two virtual copies of macOS beside the host's own.
const MacOSSlots = 2

// slots counts the macOS VMs that run (or are paused) on this host. A slot
// is taken before a macOS host process starts and given back when it ends;
// a new plugin process rebuilds the count from the host processes it finds.
type slots struct {
	mu   sync.Mutex
	max  int
	held map[string]bool
}

func newSlots(max int) *slots { return &slots{max: max, held: map[string]bool{}} }

// take holds a slot for vm id; taking one it already holds succeeds. When
// every slot is held, the error names the VMs that hold them.
func (s *slots) take(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[id] {
		return nil
	}
	if len(s.held) >= s.max {
		holders := make([]string, 0, len(s.held))
		for h := range s.held {
			holders = append(holders, h)
		}
		sort.Strings(holders)
		return driver.Errorf(driver.ErrNoCapacity, "vm %s: both macOS slots of this Mac are taken (by %v): Apple's licence allows %d macOS VMs per Mac", id, holders, s.max)
	}
	s.held[id] = true
	return nil
}

// reset sets the limit and the VMs that hold slots (a plugin's SetConfig,
// from the host processes it found running).
func (s *slots) reset(max int, held map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.max, s.held = max, held
}

// hold marks vm id as holding a slot whatever the limit: it runs already.
func (s *slots) hold(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[id] = true
}

// release gives vm id's slot back (a no-op when it holds none).
func (s *slots) release(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, id)
}

// free is how many slots are free.
func (s *slots) free() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max - len(s.held)
}
