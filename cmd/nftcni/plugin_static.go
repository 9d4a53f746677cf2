//go:build !nftcni_no_static

package main

import "github.com/nftcni/nftcni/ipam/static"

func init() { register(static.Plugin) }
