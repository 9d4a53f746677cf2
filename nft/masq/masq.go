// Package masq: masquerade for traffic leaving a container network (bridge
// and ptp ipMasq). API fixed; implementation in progress.
package masq

import (
	"errors"
	"net/netip"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
)

var errTODO = errors.New("masq: not implemented yet")

// Setup masquerades traffic from addrs (container addresses with their
// prefix length) to anything outside their subnet and not multicast, owned
// by owner, in ns (nil: the process's own namespace).
func Setup(ns *netns.NS, owner nft.Owner, addrs []netip.Prefix) error { return errTODO }

// Teardown removes everything owner added. Nothing to remove is success.
func Teardown(ns *netns.NS, owner nft.Owner) error { return errTODO }

// GC removes everything of network not owned by one of valid.
func GC(ns *netns.NS, network string, valid []nft.Owner) error { return errTODO }
