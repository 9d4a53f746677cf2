//go:build !nftcni_no_macvlan

package main

import "github.com/nftcni/nftcni/plugins/macvlan"

func init() { register(macvlan.Plugin) }
