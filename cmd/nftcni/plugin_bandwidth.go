//go:build !nftcni_no_bandwidth

package main

import "github.com/nftcni/nftcni/plugins/bandwidth"

func init() { register(bandwidth.Plugin) }
