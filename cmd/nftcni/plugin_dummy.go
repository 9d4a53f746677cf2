//go:build !nftcni_no_dummy

package main

import "github.com/nftcni/nftcni/plugins/dummy"

func init() { register(dummy.Plugin) }
