//go:build !nftcni_no_dhcp

package main

import "github.com/nftcni/nftcni/ipam/dhcp"

func init() { register(dhcp.Plugin) }
