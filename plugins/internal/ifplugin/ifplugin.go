// Package ifplugin is what the interface plugins (bridge, ptp, tap,
// host-device, macvlan, ipvlan, vlan, dummy) share around their commands:
// the namespaces an ADD works in with the rollback of a failed ADD
// (plugins/internal/rollback), creating the container interface under a
// temporary name, the start of CHECK (namespace, IPAM CHECK, prevResult),
// and deleting the container interface on DEL; and, for the
// single-interface plugins (childplugin.go), their whole DEL, GC and
// STATUS and most of ADD and CHECK.
//
// What differs stays in each plugin, explicitly: the reference's wording
// of every message is passed in, never chosen here.
package ifplugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/plugins/internal/rollback"
)

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
