//go:build !nftcni_no_vlan

package main

import "github.com/nftcni/nftcni/plugins/vlan"

func init() { register(vlan.Plugin) }
