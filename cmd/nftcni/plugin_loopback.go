//go:build !nftcni_no_loopback

package main

import "github.com/nftcni/nftcni/plugins/loopback"

func init() { register(loopback.Plugin) }
