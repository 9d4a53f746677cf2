// Package vethplugin is what the veth plugins (bridge, ptp) share beyond
// the interface plugins' scaffolding (plugins/internal/ifplugin): the
// config checks both make, masquerade of the container's addresses and
// the host's forwarding sysctls.
//
// Only the logic that is the same in both lives here. What differs stays
// in each plugin, explicitly: the order of DEL's steps (bridge deletes the
// link, then releases IPAM; ptp releases IPAM first), when IPAM is called
// during ADD, and every error text that the two references word
// differently.
package vethplugin

import (
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/ownerid"
	"github.com/nftcni/nftcni/sysctl"

	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/masq"
	"github.com/nftcni/nftcni/plugins/internal/rollback"
)

// CheckMasqBackend accepts the reference's two ipMasqBackend names; both
// mean our native nftables masquerade. Absent (or null) is fine too.
func CheckMasqBackend(b *string) error {
	if b == nil {
		return nil
	}
	switch *b {
	case "iptables", "nftables":
		return nil
	}
	return fmt.Errorf("unknown ipmasq backend %q", *b)
}

// DNSSet reports whether the config's dns object sets anything, in which
// case it replaces IPAM's DNS in the result (an explicitly empty list
// counts as set, as in the reference).
func DNSSet(d cni.DNSConf) bool {
	return d.Nameservers != nil || d.Search != nil || d.Options != nil || d.Domain != ""
}

// StartMasq masquerades traffic from the addresses of ips for own (nft/masq
// in the process's namespace) in the background, and registers its
// teardown with r. Background because an nf_tables commit costs an RCU
// grace period when its socket is closed (nf_tables flushes its destroy
// work on release): several milliseconds that overlap with the rest of ADD
// instead of adding to it. r.End joins it; its failure fails the ADD.
func StartMasq(r *rollback.Rollback, own ownerid.Owner, ips []*cni.IPConfig) {
	addrs := masqAddrs(ips)
	r.Push("masquerade", func() error { return masq.Teardown(nil, own) })
	r.Start(func() error { return masq.Setup(nil, own, addrs) })
}

// MasqPlan is StartMasq's masquerade as a plan for a transaction of the
// caller's (masq.Plan): what a reload re-creates from the cached result.
func MasqPlan(own ownerid.Owner, ips []*cni.IPConfig) (nft.Plan, error) {
	return masq.Plan(own, masqAddrs(ips))
}

// masqAddrs are the addresses masqueraded for ips: every one, with its
// prefix length.
func masqAddrs(ips []*cni.IPConfig) []netip.Prefix {
	addrs := make([]netip.Prefix, 0, len(ips))
	for _, ip := range ips {
		addrs = append(addrs, ip.Address)
	}
	return addrs
}

// CachedResult is the prevResult a reload hands a plugin: the result the
// runtime cached for the attachment, without which there is nothing to
// re-create from.
func CachedResult(c *cni.NetConf) (*cni.Result, error) {
	prev, err := c.PrevResult()
	if err != nil {
		return nil, err
	}
	if prev == nil {
		return nil, errors.New("no cached result to re-create the attachment's state from")
	}
	return prev, nil
}

// EnableForward turns forwarding of family (unix.AF_INET: ip_forward,
// unix.AF_INET6: conf/all/forwarding) on in the process's namespace: it
// writes 1 to the sysctl unless it already is 1. IPv6's value is read over
// rtnetlink (sysctl.AllForwarding; the file where that fails), so the ADDs
// after the first touch no file under /proc/sys/net/ipv6, whose cost grows
// with the host's namespaces; ip_forward's file does not grow and costs
// less than the request, so it is read as it is.
func EnableForward(family uint8) error {
	key := "net/ipv4/ip_forward"
	if family == unix.AF_INET6 {
		key = "net/ipv6/conf/all/forwarding"
		if v, err := sysctl.AllForwarding(nil, family); err == nil {
			if v == 1 {
				return nil
			}
			return sysctl.Set(nil, key, "1")
		}
	}
	if v, err := sysctl.Get(nil, key); err == nil && v == "1" {
		return nil
	}
	return sysctl.Set(nil, key, "1")
}
