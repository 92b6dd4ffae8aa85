package main

import "github.com/fluxvm/fluxvm/drivers/qemu"

func init() { builtinDrivers["qemu"] = qemu.New }
