// Package ownertag is the CNI side of ownerid.Owner: which attachment — one
// (network, container ID, interface) — a plugin's host state belongs to.
// The nftables components (nft/masq, nft/macspoof, nft/portmap,
// nft/firewall) tag every element and rule with it, firewalld's record
// keeps it, and the bandwidth plugin puts the same tag in its IFB devices'
// alias; nft knows nothing about CNI, so the plugins build owners here.
package ownertag

import (
	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/ownerid"
)

// Of is the owner of attachment a in network: what ADD tags and DEL
// removes.
func Of(network string, a *cni.CmdArgs) ownerid.Owner {
	return ownerid.Owner{Network: network, ContainerID: a.ContainerID, IfName: a.IfName}
}

// Valid are the owners of a GC's valid attachments in network: what the
// collectors must keep.
func Valid(network string, atts []cni.Attachment) []ownerid.Owner {
	valid := make([]ownerid.Owner, 0, len(atts))
	for _, at := range atts {
		valid = append(valid, ownerid.Owner{Network: network, ContainerID: at.ContainerID, IfName: at.IfName})
	}
	return valid
}
