//go:build !nftcni_no_tap

package main

import "github.com/nftcni/nftcni/plugins/tap"

func init() { register(tap.Plugin) }
