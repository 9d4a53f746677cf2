//go:build !nftcni_no_dhcp

package main

import (
	"os"

	"github.com/nftcni/nftcni/ipam/dhcp/daemon"
)

// "dhcp daemon [flags]" is the lease daemon, like the reference's binary;
// any other invocation of dhcp is the IPAM plugin.
func init() {
	subcommands["dhcp daemon"] = func(args []string) int { return daemon.Main(args, os.Stderr) }
}
