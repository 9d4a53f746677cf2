//go:build !nftcni_no_portmap

package main

import "github.com/nftcni/nftcni/plugins/portmap"

func init() {
	register(portmap.Plugin)
	registerHandback(portmap.Plugin.Name, portmap.Handback)
}
