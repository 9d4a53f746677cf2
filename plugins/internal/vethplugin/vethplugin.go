// Package vethplugin is what the veth plugins (bridge, ptp) share around
// their commands: the namespaces an ADD works in and the rollback of a
// failed ADD (IPAM delegation with its release, the container interface,
// masquerade), the start of CHECK (namespace, IPAM CHECK, prevResult),
// deleting the container interface on DEL, the owner tags of their
// nftables state, and the config checks both make.
//
// Only the logic that is the same in both lives here. What differs stays
// in each plugin, explicitly: the order of DEL's steps (bridge deletes the
// link, then releases IPAM; ptp releases IPAM first), when IPAM is called
// during ADD, and every error text that the two references word
// differently.
package vethplugin

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/masq"
	"github.com/nftcni/nftcni/plugins/internal/rollback"
)

// Owner is what the nftables state of attachment a in network is tagged
// with.
func Owner(network string, a *cni.CmdArgs) nft.Owner {
	return nft.Owner{Network: network, ContainerID: a.ContainerID, IfName: a.IfName}
}

// ValidOwners are the owners of a GC's valid attachments in network: what
// the nftables collectors must keep.
func ValidOwners(network string, atts []cni.Attachment) []nft.Owner {
	valid := make([]nft.Owner, 0, len(atts))
	for _, at := range atts {
		valid = append(valid, nft.Owner{Network: network, ContainerID: at.ContainerID, IfName: at.IfName})
	}
	return valid
}

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

// OpenNetns opens the container's namespace and netlink in it
// (netlinkx.OpenOwning: the handle owns the namespace), with the
// reference's message when the namespace cannot be opened.
func OpenNetns(path string) (*netlinkx.Handle, error) {
	ns, err := netns.Open(path)
	if err != nil {
		return nil, fmt.Errorf("failed to open netns %q: %w", path, err)
	}
	return netlinkx.OpenOwning(ns)
}

// Add is one ADD in progress: the namespaces it works in, and (through the
// embedded Rollback) what a failure has to take back.
type Add struct {
	*rollback.Rollback
	CtrNS  *netns.NS        // the container's namespace
	HC     *netlinkx.Handle // netlink in CtrNS, which it owns
	HostNS *netns.NS        // the calling thread's: where the host end of the veth goes
}

// BeginAdd starts ADD a of plugin: it opens the container's namespace and
// netlink in it (OpenNetns) and the host namespace. The caller defers End.
func BeginAdd(plugin string, a *cni.CmdArgs) (*Add, error) {
	hc, err := OpenNetns(a.Netns)
	if err != nil {
		return nil, err
	}
	hostNS, err := netns.Current()
	if err != nil {
		hc.Close()
		return nil, err
	}
	return &Add{Rollback: rollback.New(plugin, a), CtrNS: hc.NS(), HC: hc, HostNS: hostNS}, nil
}

// End ends the ADD: when *err is set (the ADD failed), everything
// registered is taken back first (Rollback.End); then the namespaces are
// closed.
func (ad *Add) End(err *error) {
	ad.Rollback.End(err)
	ad.HostNS.Close()
	ad.HC.Close()
}

// StartMasq masquerades traffic from the addresses of ips for own (nft/masq
// in the process's namespace) in the background, and registers its
// teardown with r. Background because an nf_tables commit costs an RCU
// grace period when its socket is closed (nf_tables flushes its destroy
// work on release): several milliseconds that overlap with the rest of ADD
// instead of adding to it. r.End joins it; its failure fails the ADD.
func StartMasq(r *rollback.Rollback, own nft.Owner, ips []*cni.IPConfig) {
	addrs := make([]netip.Prefix, 0, len(ips))
	for _, ip := range ips {
		addrs = append(addrs, ip.Address)
	}
	r.Push("masquerade", func() error { return masq.Teardown(nil, own) })
	r.Start(func() error { return masq.Setup(nil, own, addrs) })
}

// BeginCheck is how the plugins start CHECK: it opens the container's
// namespace and netlink in it (OpenNetns; the caller closes the handle),
// runs IPAM CHECK when withIPAM, and returns the prevResult; missing is
// the plugin's error text for a config without one.
func BeginCheck(ctx context.Context, a *cni.CmdArgs, c *cni.NetConf, withIPAM bool, missing string) (*netlinkx.Handle, *cni.Result, error) {
	hc, err := OpenNetns(a.Netns)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*netlinkx.Handle, *cni.Result, error) {
		hc.Close()
		return nil, nil, err
	}
	if withIPAM {
		if err := cni.DelegateCheck(ctx, c.IPAM.Type, a); err != nil {
			return fail(err)
		}
	}
	if c.RawPrevResult == nil {
		return fail(errors.New(missing))
	}
	result, err := c.PrevResult()
	if err != nil {
		return fail(err)
	}
	if result == nil {
		return fail(errors.New(missing))
	}
	return hc, result, nil
}

// DeleteLink deletes ifName in the namespace at path, for DEL: a namespace
// or an interface that no longer exists is success.
func DeleteLink(path, ifName string) error {
	return DeleteLinkAfter(path, ifName, nil)
}

// DeleteLinkAfter is DeleteLink with before (nil: nothing) run once the
// link is down and before it is deleted: a DEL's nftables teardown. before
// runs in every case, also when path is "" or the namespace or the link is
// already gone.
//
// Why this order: the kernel answers a veth deletion only after an
// rcu_barrier() (netdev_run_todo), ~16 ms on a 2-CPU machine, and closing
// the nftables socket of a teardown waits for an RCU grace period too (see
// nft.HoldCloses). With the teardown committed first and its socket closed
// only after the deletion, the two waits overlap. The link is set down
// first, so a container whose masquerade state is removed can no longer
// send anything — the guarantee the reference gets from deleting the link
// before the rules.
func DeleteLinkAfter(path, ifName string, before func()) error {
	ran := false
	runBefore := func() {
		if before != nil && !ran {
			ran = true
			before()
		}
	}
	defer runBefore()
	if path == "" {
		return nil
	}
	h, err := netlinkx.OpenPath(path)
	if errors.Is(err, netns.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer h.Close()
	if before != nil {
		if err := h.SetDown(ifName); errors.Is(err, netlinkx.ErrNotFound) {
			return nil
		}
		// A failure to set it down is not fatal: the deletion follows.
		defer nft.HoldCloses()()
		runBefore()
	}
	if err := h.DeleteLink(ifName); err != nil && !errors.Is(err, netlinkx.ErrNotFound) {
		return fmt.Errorf("failed to delete %q: %w", ifName, netlinkx.Cause(err))
	}
	return nil
}

// EnableForward writes 1 to a forwarding sysctl of the process's namespace
// unless it already is 1.
func EnableForward(key string) error {
	if v, err := netlinkx.Sysctl(nil, key); err == nil && v == "1" {
		return nil
	}
	return netlinkx.SetSysctl(nil, key, "1")
}
