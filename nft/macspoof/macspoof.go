// Package macspoof: the bridge plugin's macspoofchk filter. API fixed;
// implementation in progress.
package macspoof

import (
	"errors"
	"net"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
)

var errTODO = errors.New("macspoof: not implemented yet")

// Setup drops frames entering the bridge from hostIf (the host veth) whose
// source MAC is not mac, owned by owner, in ns (nil: own namespace).
func Setup(ns *netns.NS, owner nft.Owner, hostIf string, mac net.HardwareAddr) error {
	return errTODO
}

// Teardown removes everything owner added. Nothing to remove is success.
func Teardown(ns *netns.NS, owner nft.Owner) error { return errTODO }

// GC removes everything of network not owned by one of valid.
func GC(ns *netns.NS, network string, valid []nft.Owner) error { return errTODO }
