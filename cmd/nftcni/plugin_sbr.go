//go:build !nftcni_no_sbr

package main

import "github.com/nftcni/nftcni/plugins/sbr"

func init() { register(sbr.Plugin) }
