// Command typeless is a driver plugin of the current contract whose
// PluginInfo names no plugin type. TestLaunchFailsClearlyWithoutHang
// launches it to show that the agent takes only plugins that say they are
// drivers. Launch calls nothing but PluginInfo on it.
package main

import (
	"context"

	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver"
)

type typeless struct{ driver.Driver }

func (typeless) PluginInfo(context.Context) (*basepb.PluginInfoResponse, error) {
	return &basepb.PluginInfoResponse{Name: "typeless", Version: "0.0.0", ApiVersions: []uint32{driver.APIVersion}}, nil
}

func main() { driver.Serve(typeless{}, nil) }
