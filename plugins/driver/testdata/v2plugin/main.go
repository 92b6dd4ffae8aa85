// Command v2plugin is a driver plugin of contract version 2 as the agent
// sees one: the sim driver, offering protocol version 2 only at the
// handshake and claiming none of version 3's capabilities (a plugin built
// against version 2 has no fields for them, which read as false on the
// wire). TestVersion2PluginStillWorks launches it.
package main

import (
	"context"
	"os"

	"github.com/fluxvm/fluxvm/drivers/sim"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/hashicorp/go-hclog"
)

type v2 struct{ driver.Driver }

func (d v2) Capabilities(ctx context.Context) (*pb.CapabilitiesResponse, error) {
	caps, err := d.Driver.Capabilities(ctx)
	if err != nil {
		return nil, err
	}
	caps.DiskSnapshots, caps.MemorySnapshots, caps.Clones = false, false, false
	return caps, nil
}

func main() {
	// go-plugin's server takes the newest version in this list that it
	// serves: the agent offers 2 and 3, a version 2 plugin knows only 2.
	os.Setenv("PLUGIN_PROTOCOL_VERSIONS", "2")
	logger := hclog.New(&hclog.LoggerOptions{Name: "v2plugin", Output: os.Stderr, JSONFormat: true})
	driver.Serve(v2{sim.New(logger)}, logger)
}
