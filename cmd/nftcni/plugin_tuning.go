//go:build !nftcni_no_tuning

package main

import "github.com/nftcni/nftcni/plugins/tuning"

func init() { register(tuning.Plugin) }
