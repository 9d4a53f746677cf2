//go:build !nftcni_no_vrf

package main

import "github.com/nftcni/nftcni/plugins/vrf"

func init() { register(vrf.Plugin) }
