package main

import (
	"github.com/fluxvm/fluxvm/drivers/qemu"
	"github.com/fluxvm/fluxvm/plugins/netns"
)

func init() {
	builtinDrivers["qemu"] = qemu.New
	builtinNetworks["netns"] = netns.New
	pluginHelpers["netns-wireguard"] = netns.RunWireGuard
}
