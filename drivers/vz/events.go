package vz

import (
	"context"
	"time"

	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// Events sends VM state changes until ctx ends.
func (d *Driver) Events(ctx context.Context) (<-chan *pb.Event, error) {
	sub := make(chan *pb.Event, 256)
	d.mu.Lock()
	d.events[sub] = struct{}{}
	d.mu.Unlock()
	out := make(chan *pb.Event)
	go func() {
		defer close(out)
		defer func() { d.mu.Lock(); delete(d.events, sub); d.mu.Unlock() }()
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-sub:
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

// publish sends an event to every listener; one too slow to keep 256 events
// buffered loses the newest (and the log says so).
func (d *Driver) publish(id string, typ pb.EventType, msg string) {
	ev := &pb.Event{VmId: id, Type: typ, Message: "vz: " + msg, TimeUnixNano: time.Now().UnixNano()}
	d.log.Debug("vm event", "vm", id, "type", typ, "message", msg)
	d.mu.Lock()
	defer d.mu.Unlock()
	for sub := range d.events {
		select {
		case sub <- ev:
		default:
			d.log.Warn("event listener is not keeping up; dropped an event", "vm", id, "type", typ)
		}
	}
}
