package plugintest

import (
	"net/netip"
	"slices"
	"testing"
)

// RepeatedAdds checks that a repeated ADD never takes a live attachment's
// address away. For each way a runtime repeats an ADD — in the live
// attachment's own namespace (same container ID and interface), or in a
// new namespace with the container ID reused — it runs, on a new world and
// host-local store:
//
//  1. ADD of container "live" (conf(dir, 0)): the live attachment;
//  2. the repeat (conf(dir, 1)): it must fail with an error object, leave
//     a new namespace with only lo, and leave the live container's eth0
//     with its address and its host-local reservation file in place;
//  3. ADD of another container asking for the live address through
//     CNI_ARGS IP= (conf(dir, 2)): refused, the address is taken;
//  4. ADD of one more container (conf(dir, 3)): it gets another address.
//
// conf's configs must use host-local in dir (HostLocal) on one subnet; a
// plugin that moves host devices (host-device) names a different one in
// each. keep, when given, runs before the repeat and returns a check run
// after it: that the plugin's own state of the live attachment (nftables
// elements, a state file) is still there.
func RepeatedAdds(t *testing.T, world func(t *testing.T) *Host, conf func(dir string, i int) string,
	keep func(t *testing.T, h *Host) func(t *testing.T)) {
	t.Helper()
	for _, tc := range []struct {
		name      string
		sameNetns bool
	}{{"same netns", true}, {"container ID reused", false}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := HostLocalStore(t)
			h := world(t)
			live, lh := NewCtr(t, NoDAD)
			r := h.Add(live, "live", conf(dir, 0))
			if len(r.IPs) == 0 {
				t.Fatalf("live ADD returned no address")
			}
			addr := r.IPs[0].Address
			ip := netip.MustParsePrefix(addr).Addr()

			again, ah := live, lh
			if !tc.sameNetns {
				again, ah = NewCtr(t, NoDAD)
			}
			var kept func(t *testing.T)
			if keep != nil {
				kept = keep(t, h)
			}
			e := h.Fail(Cmd("ADD", again, "live", conf(dir, 1)))
			t.Logf("repeated ADD: code %d: %s", e.Code, e.Msg)
			if !slices.Contains(AddrStrings(t, lh, "eth0", 0), addr) {
				t.Errorf("the live container lost %s: eth0 has %v", addr, AddrStrings(t, lh, "eth0", 0))
			}
			if !tc.sameNetns {
				WantLinks(t, ah, "lo")
			}
			if kept != nil {
				kept(t)
			}
			if !slices.Contains(Reservations(t, dir), ip.String()) {
				t.Errorf("the reservation of %s is gone: %v", ip, Reservations(t, dir))
			}

			third, _ := NewCtr(t, NoDAD)
			c := Cmd("ADD", third, "third", conf(dir, 2))
			c.Args = "IP=" + ip.String()
			if o := h.Exec(c); o.Status == 0 {
				t.Errorf("a third container was given the live address %s: %s", ip, o.Stdout)
			}

			fourth, _ := NewCtr(t, NoDAD)
			if r4 := h.Add(fourth, "fourth", conf(dir, 3)); len(r4.IPs) == 0 || r4.IPs[0].Address == addr {
				t.Errorf("the next allocation got %+v, the live address is %s", r4.IPs, addr)
			}
		})
	}
}
