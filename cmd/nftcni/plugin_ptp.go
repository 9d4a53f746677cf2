//go:build !nftcni_no_ptp

package main

import "github.com/nftcni/nftcni/plugins/ptp"

func init() {
	register(ptp.Plugin)
	registerReapply(ptp.Plugin.Name, ptp.Reapply)
	registerSwitch(ptp.Plugin.Name, ptp.Switch)
}
