//go:build !nftcni_no_firewall

package main

import "github.com/nftcni/nftcni/plugins/firewall"

func init() {
	register(firewall.Plugin)
	registerReapply(firewall.Plugin.Name, firewall.Reapply)
	registerSwitch(firewall.Plugin.Name, firewall.Switch)
}
