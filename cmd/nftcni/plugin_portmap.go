//go:build !nftcni_no_portmap

package main

import "github.com/nftcni/nftcni/plugins/portmap"

func init() {
	register(portmap.Plugin)
	registerReapply(portmap.Plugin.Name, portmap.Reapply)
	registerSwitch(portmap.Plugin.Name, portmap.Switch)
}
