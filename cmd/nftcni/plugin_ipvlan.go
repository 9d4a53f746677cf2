//go:build !nftcni_no_ipvlan

package main

import "github.com/nftcni/nftcni/plugins/ipvlan"

func init() { register(ipvlan.Plugin) }
