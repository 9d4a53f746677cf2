// Package dhcp is the "dhcp" IPAM plugin: a thin RPC client of the dhcp
// daemon (package daemon), which owns the leases, runs the DHCPv4 and
// DHCPv6 clients inside container namespaces and renews leases in the
// background.
//
// The plugin and the daemon speak the reference's RPC (wire.go), so
// either can be replaced by the reference binary. Where we differ (DEL
// with the daemon down, STATUS, GC, CHECK, bounded waits) see README.md.
package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/ipam/dhcp/gorpc"
)

// Plugin is the dhcp IPAM plugin. Started as "dhcp daemon", the same
// binary is the daemon instead (cmd/nftcni).
var Plugin = &cni.Plugin{
	Name:   "dhcp",
	Add:    cmdAdd,
	Del:    cmdDel,
	Check:  cmdCheck,
	GC:     cmdGC,
	Status: cmdStatus,
}

// argsOf builds the RPC argument. The daemon runs elsewhere, so the netns
// path is made absolute against our working directory (an empty DEL netns
// becomes that directory, harmless: Release does not use it).
func argsOf(a *cni.CmdArgs) (*Args, error) {
	ns, err := filepath.Abs(a.Netns)
	if err != nil {
		return nil, fmt.Errorf("resolving netns path %q: %w", a.Netns, err)
	}
	override := ""
	if a.NetnsOverride {
		override = "1"
	}
	return &Args{
		ContainerID:   a.ContainerID,
		Netns:         ns,
		IfName:        a.IfName,
		Args:          a.Args,
		Path:          a.Path,
		NetnsOverride: override,
		StdinData:     a.StdinData,
	}, nil
}

// connect reads the socket path and dials the daemon.
func connect(ctx context.Context, a *cni.CmdArgs) (*gorpc.Client, *Args, error) {
	path, err := socketPath(a.StdinData)
	if err != nil {
		return nil, nil, err
	}
	args, err := argsOf(a)
	if err != nil {
		return nil, nil, err
	}
	c, err := Dial(ctx, path)
	if err != nil {
		return nil, nil, &dialError{err}
	}
	return c, args, nil
}

// dialError is "the daemon is unreachable", which DEL and STATUS treat
// specially.
type dialError struct{ err error }

func (e *dialError) Error() string { return "error dialing DHCP daemon: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

func call(ctx context.Context, c *gorpc.Client, method string, args, reply any) error {
	if err := Call(ctx, c, method, args, reply); err != nil {
		return fmt.Errorf("error calling %s: %w", method, err)
	}
	return nil
}

// cmdAdd asks the daemon for the leases of the config's families and
// checks that the answer has them all (a reference daemon leases IPv4
// only; the runtime then DELs, which releases it).
func cmdAdd(ctx context.Context, a *cni.CmdArgs) (*cni.Result, error) {
	fams, err := familiesOf(a.StdinData)
	if err != nil {
		return nil, err
	}
	c, args, err := connect(ctx, a)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var reply Reply
	if err := call(ctx, c, MethodAllocate, args, &reply); err != nil {
		return nil, err
	}
	res := reply.ToResult()
	if err := checkFamilies(res, fams); err != nil {
		return nil, err
	}
	return res, nil
}

// cmdDel releases the lease. An unreachable daemon is not an error: the
// spec calls releasing a DHCP lease non-critical, and failing would make
// the runtime retry DEL forever (the reference fails).
func cmdDel(ctx context.Context, a *cni.CmdArgs) error {
	c, args, err := connect(ctx, a)
	var de *dialError
	if errors.As(err, &de) {
		a.Logf("dhcp: lease of container %s (%s) not released: %v", a.ContainerID, a.IfName, err)
		return nil
	}
	if err != nil {
		return err
	}
	defer c.Close()
	return call(ctx, c, MethodRelease, args, &Empty{})
}

// cmdCheck asks our daemon whether the live leases exist (a reference
// daemon has no Check: then Allocate, as the reference plugin does), one
// per family of ipam.ipFamilies, and that their addresses are in
// prevResult, when there is one.
func cmdCheck(ctx context.Context, a *cni.CmdArgs) error {
	c, args, err := connect(ctx, a)
	if err != nil {
		return err
	}
	defer c.Close()
	var reply Reply
	err = Call(ctx, c, MethodCheck, args, &reply)
	if IsMissingMethod(err) {
		reply = Reply{}
		err = call(ctx, c, MethodAllocate, args, &reply)
	} else if err != nil {
		err = fmt.Errorf("error calling %s: %w", MethodCheck, err)
	}
	if err != nil {
		return err
	}
	// Our daemon's Check fails by itself when a family has no lease; a
	// reference daemon's Allocate answers IPv4 only.
	fams, err := familiesOf(a.StdinData)
	if err == nil {
		err = checkFamilies(reply.ToResult(), fams)
	}
	if err != nil {
		return err
	}
	nc, err := cni.DecodeNetConf(a.StdinData, "error parsing netconf")
	if err != nil {
		return err
	}
	prev, err := nc.PrevResult()
	if err != nil {
		return err
	}
	if prev == nil || len(prev.IPs) == 0 {
		return nil
	}
	var have []netip.Addr
	for _, ip := range prev.IPs {
		have = append(have, ip.Address.Addr())
	}
	for _, ip := range reply.ToResult().IPs {
		if !slices.Contains(have, ip.Address.Addr()) {
			return fmt.Errorf("dhcp: lease address %s of %s is not in prevResult", ip.Address.Addr(), a.IfName)
		}
	}
	return nil
}

// cmdGC asks the daemon to release the leases of this network that no
// valid attachment owns. Without the attachment list nothing is done.
// A daemon without GC (the reference) is noted and skipped.
func cmdGC(ctx context.Context, a *cni.CmdArgs) error {
	nc, err := cni.DecodeNetConf(a.StdinData, "error parsing netconf")
	if err != nil {
		return err
	}
	if _, ok := nc.Attachments(); !ok {
		a.Logf("dhcp: GC needs the cni.dev/valid-attachments list; none was given, nothing released")
		return nil
	}
	c, args, err := connect(ctx, a)
	if err != nil {
		return err
	}
	defer c.Close()
	err = Call(ctx, c, MethodGC, args, &Empty{})
	if IsMissingMethod(err) {
		a.Logf("dhcp: the DHCP daemon does not implement GC; nothing released")
		return nil
	}
	if err != nil {
		return fmt.Errorf("error calling %s: %w", MethodGC, err)
	}
	return nil
}

// cmdStatus answers code 50 when the daemon cannot be reached: ADD would
// fail (the reference always answers success).
func cmdStatus(ctx context.Context, a *cni.CmdArgs) error {
	c, _, err := connect(ctx, a)
	var de *dialError
	if errors.As(err, &de) {
		return cni.Errorf(cni.CodePluginNotAvailable, "%v", err)
	}
	if err != nil {
		return err
	}
	return c.Close()
}
