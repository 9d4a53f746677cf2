// Package loopback is the "loopback" plugin: it brings up `lo` in the
// container's namespace and reports its addresses. CNI_IFNAME is ignored
// (always lo) but must still pass the dispatcher's checks, like the
// reference.
package loopback

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

// Plugin is the loopback plugin. All it changes is lo inside the
// container, which goes with the namespace: GC has nothing to collect, and
// ADD depends on nothing STATUS could check.
var Plugin = &cni.Plugin{
	Name:        "loopback",
	Add:         cmdAdd,
	Del:         cmdDel,
	Check:       cmdCheck,
	GC:          cni.NothingToCollect,
	NoHostState: true,
	Status:      cni.AlwaysReady,
	Validate: func(stdin []byte) error {
		_, _, err := loadConf(stdin)
		return err
	},
}

// withLo opens the namespace and a netlink handle inside it.
func withLo(path string, fn func(h *netlinkx.Handle) error) error {
	h, err := netlinkx.OpenPath(path)
	if err != nil {
		return err
	}
	defer h.Close()
	return fn(h)
}

func cmdAdd(_ context.Context, a *cni.CmdArgs) (*cni.Result, error) {
	_, prev, err := loadConf(a.StdinData)
	if err != nil {
		return nil, err
	}
	var lo netlinkx.Link
	var addrs []netlinkx.Addr
	// Three requests, as the reference makes: set up, look up, one dump
	// of the addresses of every family.
	err = withLo(a.Netns, func(h *netlinkx.Handle) error {
		if err := h.SetUp("lo"); err != nil {
			return err
		}
		if lo, err = h.LinkByName("lo"); err != nil {
			return err
		}
		addrs, err = h.AddrsByIndex(lo.Index)
		return err
	})
	if err != nil {
		return nil, err
	}
	// A chained loopback passes the previous result through unchanged.
	if prev != nil {
		return prev, nil
	}
	r := &cni.Result{
		CNIVersion: cni.CurrentVersion,
		Interfaces: []*cni.Interface{{Name: "lo", Mac: lo.MAC.String(), Sandbox: a.Netns}},
	}
	if r.Interfaces[0].Mac == "" {
		r.Interfaces[0].Mac = "00:00:00:00:00:00"
	}
	// Only the first address of each family is reported, IPv4 first.
	for _, want4 := range []bool{true, false} {
		var first *cni.IPConfig
		for _, ad := range addrs {
			if ad.Prefix.Addr().Is4() != want4 {
				continue
			}
			if !ad.Prefix.Addr().IsLoopback() {
				return nil, fmt.Errorf("loopback interface found with non-loopback address %q", ad.Prefix.Addr().String())
			}
			if first == nil {
				first = &cni.IPConfig{Interface: cni.Int(0), Address: ad.Prefix}
			}
		}
		if first != nil {
			r.IPs = append(r.IPs, first)
		}
	}
	return r, nil
}

func cmdDel(_ context.Context, a *cni.CmdArgs) error {
	if a.Netns == "" {
		return nil
	}
	err := withLo(a.Netns, func(h *netlinkx.Handle) error { return h.SetDown("lo") })
	if errors.Is(err, netns.ErrNotExist) || errors.Is(err, netlinkx.ErrNotFound) || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return err
}

func cmdCheck(_ context.Context, a *cni.CmdArgs) error {
	return withLo(a.Netns, func(h *netlinkx.Handle) error {
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		if !lo.Up {
			return errors.New("loopback interface is down")
		}
		return nil
	})
}
