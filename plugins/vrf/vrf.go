// Package vrf is the "vrf" chained plugin: inside the container's
// namespace it creates (or reuses) a VRF device and enslaves CNI_IFNAME to
// it, moving the interface's routes into the VRF's routing table, so that
// several interfaces with overlapping addresses and routes can live in one
// container.
//
// It behaves like the reference vrf plugin (same keys, results and
// error texts) except for the deliberate differences listed, with their
// reasons, in README.md: automatic table ids skip the
// kernel's reserved tables, a failed ADD undoes what it did, and DEL is
// idempotent.
package vrf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/plugins/internal/rollback"
)

// Plugin is the vrf plugin. The VRF device and its table are inside the
// container's namespace and go with it, and it delegates to nothing: GC
// has nothing to collect. STATUS does not probe the kernel for VRF
// support (that would mean creating a device); an ADD without it fails
// with the kernel's error.
var Plugin = &cni.Plugin{
	Name:         "vrf",
	FirstVersion: "0.3.1",
	Add:          cmdAdd,
	Del:          cmdDel,
	Check:        cmdCheck,
	GC:           cni.NothingToCollect,
	NoHostState:  true,
	Status:       cni.AlwaysReady,
	Validate: func(stdin []byte) error {
		c, err := loadConf(stdin)
		if err != nil {
			return err
		}
		return c.addCheck()
	},
}

// freeTable is the lowest table id from 1 up that no VRF in used has and
// that the kernel does not reserve. The reference looked only at the
// other VRFs and could hand out 253–255.
func freeTable(used map[uint32]bool) (uint32, error) {
	for t := uint32(1); t != 0; t++ {
		if !used[t] && !netlinkx.ReservedTable(int(t)) {
			return t, nil
		}
	}
	return 0, errors.New("no free routing table")
}

// prevResult returns the config's prevResult, which vrf requires.
func (c *NetConf) prevResult() (*cni.Result, error) {
	missing := errors.New("missing prevResult from earlier plugin")
	if c.RawPrevResult == nil {
		return nil, missing
	}
	r, err := c.PrevResult()
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, missing
	}
	return r, nil
}

// inNetns opens the namespace at path and a netlink handle in it.
func inNetns(path string, fn func(h *netlinkx.Handle) error) error {
	ns, err := netns.Open(path)
	if err != nil {
		return fmt.Errorf("failed to open netns %q: %w", path, err)
	}
	h, err := netlinkx.OpenOwning(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	return fn(h)
}

func cmdAdd(_ context.Context, a *cni.CmdArgs) (*cni.Result, error) {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return nil, err
	}
	if err := conf.addCheck(); err != nil {
		return nil, err
	}
	prev, err := conf.prevResult()
	if err != nil {
		return nil, err
	}
	err = inNetns(a.Netns, func(h *netlinkx.Handle) error {
		u := rollback.New("vrf", a)
		if err := add(h, u, conf, a.IfName); err != nil {
			u.Run()
			return fmt.Errorf("cmdAdd failed: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return prev, nil
}

// add makes sure the VRF exists and enslaves ifName to it.
func add(h *netlinkx.Handle, u *rollback.Rollback, conf *NetConf, ifName string) error {
	vrf, err := ensureVRF(h, u, conf)
	if err != nil {
		return err
	}
	link, err := h.LinkByName(ifName)
	if err != nil {
		return fmt.Errorf("could not get link by name %s: %w", ifName, netlinkx.Cause(err))
	}
	if link.MasterIndex != 0 {
		master := fmt.Sprint(link.MasterIndex)
		if m, err := h.LinkByIndex(link.MasterIndex); err == nil {
			master = m.Name
		}
		return fmt.Errorf("interface %s has already a master set: %s", ifName, master)
	}

	// Enslaving cycles the interface: its routes leave the main table
	// (connected ones come back in the VRF's table by themselves) and,
	// unless keep_addr_on_down is set, its IPv6 addresses go.
	v6, err := globalV6(h, ifName)
	if err != nil {
		return err
	}
	routes, err := h.Routes(0, 0)
	if err != nil {
		return err
	}
	var moved []netlinkx.Route
	for _, r := range routes {
		if r.LinkIndex == link.Index && r.Scope == unix.RT_SCOPE_UNIVERSE {
			moved = append(moved, r)
		}
	}
	if err := h.SetMaster(ifName, conf.VRFName); err != nil {
		return fmt.Errorf("could not set master %s for %s: %w", conf.VRFName, ifName, netlinkx.Cause(err))
	}
	u.Push("", func() error { return release(h, ifName, v6, moved) })

	if err := restoreV6(h, ifName, v6, int(vrf.Table), link.Index); err != nil {
		return err
	}
	for _, r := range moved {
		r.Table = int(vrf.Table)
		if err := moveRoute(h, r); err != nil {
			return fmt.Errorf("could not move route to VRF table %d: %w", vrf.Table, err)
		}
	}
	return nil
}

// moveRoute puts a saved route into the VRF's table. Right after the
// interface's IPv6 addresses came back, the kernel now and then refused an
// IPv6 route whose preferred source is one of them (EINVAL), although that
// address's local route was there already: the differential tests saw it
// twice in about ten dual-stack ADDs in the vmtest VM (Debian's 6.1
// kernel), where the reference, which re-adds the addresses with duplicate
// address detection and so waits longer, succeeded — but the reference
// hits it too: in the 6.12 VM its ADD failed once with "could not add
// route … Src: fd22::2 … invalid argument". The cause is not pinned down;
// such a route is retried on the restoreWait schedule.
func moveRoute(h *netlinkx.Handle, r netlinkx.Route) error {
	var err error
	for _, d := range restoreWait {
		if err = h.ReplaceRoute(r); err == nil || !r.Src.Is6() || !errors.Is(err, unix.EINVAL) {
			return err
		}
		time.Sleep(d * time.Millisecond)
	}
	return err
}

// release takes ifName out of the VRF again, for a failed ADD: the
// interface is cycled once more, so its routes and IPv6 addresses are put
// back in the main table.
func release(h *netlinkx.Handle, ifName string, v6 []netip.Prefix, routes []netlinkx.Route) error {
	if err := h.NoMaster(ifName); err != nil {
		return err
	}
	var errs []error
	if err := restoreV6(h, ifName, v6, 0, 0); err != nil {
		errs = append(errs, err)
	}
	for _, r := range routes {
		if err := h.ReplaceRoute(r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ensureVRF finds the VRF or creates it (registering its removal).
func ensureVRF(h *netlinkx.Handle, u *rollback.Rollback, conf *NetConf) (netlinkx.VRF, error) {
	vrf, err := h.VRFByName(conf.VRFName)
	switch {
	case err == nil:
		if conf.Table != 0 && vrf.Table != conf.Table {
			return vrf, fmt.Errorf("VRF %s already exist with different routing table %d", conf.VRFName, vrf.Table)
		}
		return vrf, nil
	case errors.Is(err, netlinkx.ErrNotVRF):
		return vrf, fmt.Errorf("Netlink %s is not a VRF", conf.VRFName)
	case !errors.Is(err, netlinkx.ErrNotFound):
		return vrf, err
	}
	table := conf.Table
	if table == 0 {
		vrfs, err := h.VRFs()
		if err != nil {
			return vrf, err
		}
		used := map[uint32]bool{}
		for _, v := range vrfs {
			used[v.Table] = true
		}
		if table, err = freeTable(used); err != nil {
			return vrf, err
		}
	}
	if err := h.AddVRF(conf.VRFName, table); err != nil {
		return vrf, fmt.Errorf("could not add VRF %s: %w", conf.VRFName, netlinkx.Cause(err))
	}
	u.Push("", func() error { return h.DeleteLink(conf.VRFName) })
	if err := h.SetUp(conf.VRFName); err != nil {
		return vrf, fmt.Errorf("could not set link up for VRF %s: %w", conf.VRFName, netlinkx.Cause(err))
	}
	return h.VRFByName(conf.VRFName)
}

// globalV6 lists the link's global IPv6 addresses.
func globalV6(h *netlinkx.Handle, ifName string) ([]netip.Prefix, error) {
	addrs, err := h.Addrs(ifName, unix.AF_INET6)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if a.Scope == unix.RT_SCOPE_UNIVERSE {
			out = append(out, a.Prefix)
		}
	}
	return out, nil
}

// restoreWait is the reference's schedule for the re-added addresses'
// local routes to appear: 10 ms doubling, 9 tries (about 2.5 s).
var restoreWait = []time.Duration{10, 20, 40, 80, 160, 320, 640, 1280, 0}

// restoreV6 re-adds those of want that the link lost, without duplicate
// address detection (they were in use a moment ago). With table set, it
// then waits for each re-added address's local route in that table,
// whose absence the kernel would answer with unroutable replies.
func restoreV6(h *netlinkx.Handle, ifName string, want []netip.Prefix, table, index int) error {
	have, err := globalV6(h, ifName)
	if err != nil {
		return err
	}
	for _, p := range want {
		if slices.Contains(have, p) {
			continue
		}
		if err := h.AddAddr(ifName, p, netlinkx.AddrOpts{NoDAD: true}); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("could not re-add address %s to %s: %w", p, ifName, netlinkx.Cause(err))
		}
		if table == 0 {
			continue
		}
		host := netip.PrefixFrom(p.Addr(), 128)
		found := false
		for _, d := range restoreWait {
			if found, err = hasRoute(h, table, host, index); err != nil || found {
				break
			}
			time.Sleep(d * time.Millisecond)
		}
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("failed getting local/host addresses for %s in table %d with dst %s", ifName, table, p.Addr())
		}
	}
	return nil
}

// hasRoute reports whether table has a route to dst out of link index.
func hasRoute(h *netlinkx.Handle, table int, dst netip.Prefix, index int) (bool, error) {
	routes, err := h.Routes(unix.AF_INET6, table)
	if err != nil {
		return false, err
	}
	for _, r := range routes {
		if r.Dst == dst && r.LinkIndex == index {
			return true, nil
		}
	}
	return false, nil
}

// cmdDel takes CNI_IFNAME out of the VRF and deletes the VRF once no
// interface is left in it. A vanished namespace, VRF or
// interface is success, so DEL can be repeated (the reference failed when
// the interface was gone but the VRF still had others). Moved routes are
// not put back: the interface normally goes away right after.
func cmdDel(_ context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return err
	}
	if a.Netns == "" {
		return nil
	}
	ns, err := netns.Open(a.Netns)
	if errors.Is(err, netns.ErrNotExist) {
		return nil // the container is gone, and the VRF with it
	}
	if err != nil {
		return fmt.Errorf("failed to open netns %q: %w", a.Netns, err)
	}
	ns.Close()
	return inNetns(a.Netns, func(h *netlinkx.Handle) error {
		vrf, err := h.VRFByName(conf.VRFName)
		switch {
		case errors.Is(err, netlinkx.ErrNotFound):
			return nil
		case errors.Is(err, netlinkx.ErrNotVRF):
			return fmt.Errorf("Netlink %s is not a VRF", conf.VRFName)
		case err != nil:
			return err
		}
		l, err := h.LinkByName(a.IfName)
		switch {
		case err == nil && l.MasterIndex == vrf.Index:
			if err := h.NoMaster(a.IfName); err != nil {
				return fmt.Errorf("failed to take %s out of VRF %s: %w", a.IfName, conf.VRFName, netlinkx.Cause(err))
			}
		case err != nil && !errors.Is(err, netlinkx.ErrNotFound):
			return err
		}
		slaves, err := slavesOf(h, vrf.Index)
		if err != nil || len(slaves) > 0 {
			return err
		}
		if err := h.DeleteLink(conf.VRFName); err != nil && !errors.Is(err, netlinkx.ErrNotFound) {
			return fmt.Errorf("failed to delete VRF %s: %w", conf.VRFName, netlinkx.Cause(err))
		}
		return nil
	})
}

// slavesOf lists the names of the links enslaved to the link index.
func slavesOf(h *netlinkx.Handle, index int) ([]string, error) {
	links, err := h.Links()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range links {
		if l.MasterIndex == index {
			out = append(out, l.Name)
		}
	}
	return out, nil
}

// cmdCheck verifies that CNI_IFNAME is in the VRF and,
// beyond the reference, that a configured table is the VRF's.
func cmdCheck(_ context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return err
	}
	if _, err := conf.prevResult(); err != nil {
		return err
	}
	return inNetns(a.Netns, func(h *netlinkx.Handle) error {
		vrf, err := h.VRFByName(conf.VRFName)
		if errors.Is(err, netlinkx.ErrNotVRF) {
			return fmt.Errorf("Netlink %s is not a VRF", conf.VRFName)
		}
		if err != nil {
			return netlinkx.Cause(err)
		}
		slaves, err := slavesOf(h, vrf.Index)
		if err != nil {
			return err
		}
		if !slices.Contains(slaves, a.IfName) {
			return fmt.Errorf("failed to find %s associated to vrf %s", a.IfName, conf.VRFName)
		}
		if conf.Table != 0 && vrf.Table != conf.Table {
			return fmt.Errorf("VRF %s has routing table %d, not %d", conf.VRFName, vrf.Table, conf.Table)
		}
		return nil
	})
}
