package hostdevice

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
)

// useInterfaceNetwork (the reference's key since v1.10.0) takes the
// device's layer 3 along into the container, for cloud VMs whose extra NIC
// comes with addresses and routes provisioned on the host: its addresses
// and routes (the ones DEL gives back to the host anyway: hostAddr,
// hostRoute) and the host's policy rules that send those addresses to the
// tables of those routes. All of them go into the result as well.

// hostRules are the host's policy rules useInterfaceNetwork copies: those
// whose source prefix holds one of addrs and whose table (neither unset
// nor local) is one of routes'. Other selectors the rule has come along.
func hostRules(h *netlinkx.Handle, addrs []netip.Prefix, routes []netlinkx.Route) ([]netlinkx.Rule, error) {
	rules, err := h.Rules(0)
	if err != nil {
		return nil, err
	}
	var out []netlinkx.Rule
	for _, r := range rules {
		if !r.Src.IsValid() || r.Table == unix.RT_TABLE_UNSPEC || r.Table == unix.RT_TABLE_LOCAL {
			continue
		}
		if !slices.ContainsFunc(addrs, func(p netip.Prefix) bool { return r.Src.Contains(p.Addr()) }) ||
			!slices.ContainsFunc(routes, func(rt netlinkx.Route) bool { return rt.Table == r.Table }) {
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// applyNetwork gives the container's ifName (link index) the device's
// addresses, routes and rules, as the reference does: addresses, then
// routes, link-scope ones first so that the others' gateways are
// reachable, then rules; what exists already is fine. IPv6 addresses are
// added without duplicate address detection: they were the device's a
// moment ago, and a tentative address would make the container wait, and
// refuse routes that name it as preferred source. It returns the rules it
// added (not those the container had), for DEL to remove.
func applyNetwork(hc *netlinkx.Handle, ifName string, index int, s *savedDevice, rules []netlinkx.Rule) ([]netlinkx.Rule, error) {
	for _, p := range s.Addrs {
		if err := hc.AddAddr(ifName, p, netlinkx.AddrOpts{NoDAD: p.Addr().Is6()}); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("failed to add copied address %s on %s: %w", p, ifName, netlinkx.Cause(err))
		}
	}
	for _, r := range byScope(s.Routes) {
		if err := addRoute(hc, index, r); err != nil {
			return nil, fmt.Errorf("failed to add copied route on %s: %w", ifName, err)
		}
	}
	var added []netlinkx.Rule
	for _, r := range rules {
		err := hc.AddRuleAsRead(r)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return added, fmt.Errorf("failed to add copied rule (src=%s table=%d): %w", r.Src, r.Table, netlinkx.Cause(err))
		}
		added = append(added, r)
	}
	return added, nil
}

// delRules removes from hc's namespace the rules applyNetwork added; gone
// already is fine.
func delRules(hc *netlinkx.Handle, rules []netlinkx.Rule) error {
	var errs []error
	for _, r := range rules {
		if err := hc.DelRuleAsRead(r); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// byScope orders routes for adding: narrower scope first (link before
// universe), so a gateway's own route is there before the routes via it;
// otherwise as read. (sort.SliceStable: slices.SortStableFunc's generic
// code for Route would cost the binary 8 KB.)
func byScope(routes []netlinkx.Route) []netlinkx.Route {
	out := slices.Clone(routes)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Scope > out[j].Scope })
	return out
}

// addRoute adds r, as it was read, on the link index; an existing one is
// fine.
func addRoute(h *netlinkx.Handle, index int, r netlinkx.Route) error {
	r.LinkIndex = index
	if err := h.AddRouteAsRead(r); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	return nil
}

// addRoutes is addRoute for each of routes, in byScope's order; it goes on
// after a failure and returns all of them.
func addRoutes(h *netlinkx.Handle, index int, routes []netlinkx.Route) error {
	var errs []error
	for _, r := range byScope(routes) {
		errs = append(errs, addRoute(h, index, r))
	}
	return errors.Join(errs...)
}

// networkResult adds the device's addresses (bound to the interface,
// without gateway) and routes (with their metric, table, and scope unless
// universe) to r, after what IPAM gave, as the reference reports them.
func networkResult(r *cni.Result, s *savedDevice) {
	for _, p := range s.Addrs {
		r.IPs = append(r.IPs, &cni.IPConfig{Interface: cni.Int(0), Address: p})
	}
	for _, rt := range s.Routes {
		cr := &cni.Route{Dst: rt.Dst, GW: rt.Gw, Priority: rt.Priority, Table: cni.Int(rt.Table)}
		if rt.Scope != unix.RT_SCOPE_UNIVERSE {
			cr.Scope = cni.Int(int(rt.Scope))
		}
		r.Routes = append(r.Routes, cr)
	}
}
