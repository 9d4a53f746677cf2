//go:build !nftcni_no_bridge

package main

import "github.com/nftcni/nftcni/plugins/bridge"

func init() {
	register(bridge.Plugin)
	registerReapply(bridge.Plugin.Name, bridge.Reapply)
	registerSwitch(bridge.Plugin.Name, bridge.Switch)
}
