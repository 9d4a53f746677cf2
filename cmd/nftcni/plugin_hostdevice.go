//go:build !nftcni_no_hostdevice

package main

import "github.com/nftcni/nftcni/plugins/hostdevice"

func init() { register(hostdevice.Plugin) }
