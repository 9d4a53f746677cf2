//go:build !nftcni_no_hostlocal

package main

import "github.com/nftcni/nftcni/ipam/hostlocal"

func init() { register(hostlocal.Plugin) }
