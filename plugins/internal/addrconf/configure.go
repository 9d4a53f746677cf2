// Package addrconf is the address configuration every interface plugin
// shares: applying an IPAM result to a container interface
// (ConfigureInterface) and checking at CHECK that it is still in place
// (check.go). It is the plugins' side of IPAM, whichever IPAM plugin
// produced the result (ours under ipam/, the reference's, a third party's),
// so it lives with the plugins, not with the IPAM plugins.
package addrconf

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/sysctl"
)

// DADTimeout bounds the wait for IPv6 duplicate address detection, as the
// reference does.
const DADTimeout = 5 * time.Second

// ConfigureInterface applies r to the link ifName in h's namespace, in the
// reference's order: addresses bound to
// this interface, link up, DAD settle when there is an IPv6 gateway, then
// routes via the first gateway of each family. Only IPs whose interface
// index names ifName are applied; IPs without an index are skipped.
//
// A route's priority, table and scope are applied as the reference does;
// its mtu and advmss (spec 1.1 route fields the reference ignores) become
// the route's RTAX_MTU and RTAX_ADVMSS metrics.
//
// Unlike the reference, a route that repeats an earlier one of the same
// result (e.g. a default route from both the plugin and IPAM) is applied
// once instead of failing with "file exists".
func ConfigureInterface(h *netlinkx.Handle, ifName string, r *cni.Result) error {
	if len(r.Interfaces) == 0 {
		return errors.New("no interfaces to configure")
	}
	link, err := h.LinkByName(ifName)
	if err != nil {
		return fmt.Errorf("failed to lookup %q: %w", ifName, err)
	}
	if err := checkRouteMetrics(r.Routes); err != nil {
		return err
	}
	var gw4, gw6 netip.Addr
	v6Ready := false
	for _, ip := range r.IPs {
		if ip.Interface == nil {
			continue
		}
		idx := *ip.Interface
		if idx < 0 || idx >= len(r.Interfaces) || r.Interfaces[idx].Name != ifName {
			return fmt.Errorf("failed to add IP addr %s to %q: invalid interface index", ipText(ip), ifName)
		}
		if ip.Address.Addr().Is6() && !v6Ready {
			if err := enableIPv6(h, ifName); err != nil {
				return err
			}
			v6Ready = true
		}
		if err := h.AddAddr(ifName, ip.Address, netlinkx.AddrOpts{}); err != nil {
			return fmt.Errorf("failed to add IP addr %s to %q: %w", ipText(ip), ifName, netlinkx.Cause(err))
		}
		switch gw := ip.Gateway; {
		case gw.Is4() && !gw4.IsValid():
			gw4 = gw
		case gw.Is6() && !gw6.IsValid():
			gw6 = gw
		}
	}
	if err := h.SetUp(ifName); err != nil {
		return fmt.Errorf("failed to set %q UP: %w", ifName, netlinkx.Cause(err))
	}
	if gw6.IsValid() {
		if err := h.WaitDADSettled(ifName, DADTimeout); err != nil {
			return fmt.Errorf("failed to settle addresses for %q: %w", ifName, err)
		}
	}
	var done []netlinkx.Route
	for _, rt := range r.Routes {
		nr := netlinkx.Route{Dst: rt.Dst.Masked(), Gw: rt.GW, LinkIndex: link.Index, Priority: rt.Priority,
			MTU: rt.MTU, AdvMSS: rt.AdvMSS}
		if !nr.Gw.IsValid() {
			if rt.Dst.Addr().Is4() {
				nr.Gw = gw4
			} else {
				nr.Gw = gw6
			}
		}
		if rt.Table != nil {
			nr.Table = *rt.Table
		}
		if rt.Scope != nil {
			nr.Scope = uint8(*rt.Scope)
		}
		if containsRoute(done, nr) {
			continue
		}
		if err := h.AppendRoute(nr); err != nil {
			return fmt.Errorf("failed to add route '%s via %s dev %s metric %d (Scope: %d, Table: %d)': %w",
				nr.Dst, addrOrNil(nr.Gw), ifName, nr.Priority, nr.Scope, nr.Table, netlinkx.Cause(err))
		}
		done = append(done, nr)
	}
	return nil
}

// checkRouteMetrics refuses, before anything is changed, a route whose
// mtu or advmss cannot be a route metric (a 32-bit unsigned value; 0 means
// unset). The kernel caps larger values itself (mtu at 65520, advmss at
// 65495).
func checkRouteMetrics(routes []*cni.Route) error {
	for _, rt := range routes {
		for _, m := range []struct {
			key string
			v   int
		}{{"mtu", rt.MTU}, {"advmss", rt.AdvMSS}} {
			if m.v < 0 || int64(m.v) > math.MaxUint32 {
				return fmt.Errorf("invalid route %s: %s %d is out of range (0 means unset, at most %d)", rt.Dst, m.key, m.v, uint32(math.MaxUint32))
			}
		}
	}
	return nil
}

// enableIPv6 makes sure IPv6 is on for lo and the interface and that
// addresses survive a down/up, before the first IPv6 address is added.
func enableIPv6(h *netlinkx.Handle, ifName string) error {
	for _, name := range []string{"lo", ifName} {
		key := "net/ipv6/conf/" + name + "/disable_ipv6"
		old, err := sysctl.Get(h.NS(), key)
		if err != nil || old == "0" {
			continue // unreadable (no IPv6 at all) is only worth a skip, as in the reference
		}
		if err := sysctl.Set(h.NS(), key, "0"); err != nil {
			return fmt.Errorf("failed to enable IPv6 for interface %q (%s=%s): %w", name, key, old, err)
		}
	}
	if err := sysctl.Set(h.NS(), "net/ipv6/conf/"+ifName+"/keep_addr_on_down", "1"); err != nil {
		return fmt.Errorf("failed to enable keep_addr_on_down for interface %q: %w", ifName, err)
	}
	return nil
}

func containsRoute(list []netlinkx.Route, r netlinkx.Route) bool {
	for _, x := range list {
		if x.Dst == r.Dst && x.Gw == r.Gw && x.Table == r.Table && x.Priority == r.Priority && x.Scope == r.Scope {
			return true
		}
	}
	return false
}

func ipText(ip *cni.IPConfig) string {
	idx := "<nil>"
	if ip.Interface != nil {
		idx = fmt.Sprint(*ip.Interface)
	}
	return fmt.Sprintf("{Interface:%s Address:%s Gateway:%s}", idx, ip.Address, addrOrNil(ip.Gateway))
}

func addrOrNil(a netip.Addr) string {
	if !a.IsValid() {
		return "<nil>"
	}
	return a.String()
}
