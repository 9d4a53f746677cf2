package plugintest

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/ownerid"
)

// RepeatedAdds checks that a repeated ADD never takes a live attachment's
// address away. For each way a runtime repeats an ADD — in the live
// attachment's own namespace (same container ID and interface), or in a
// new namespace with the container ID reused — it runs, on a new world and
// host-local store:
//
//  1. ADD of container "live" (conf(dir, 0)): the live attachment;
//  2. the repeat (conf(dir, 1); in the same netns also once asking for
//     another address of the subnet): it must fail with an error object, leave
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
		request   bool // the repeat asks for another address (CNI_ARGS IP)
	}{{"same netns", true, false}, {"same netns, another address requested", true, true}, {"container ID reused", false, false}} {
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
			c := Cmd("ADD", again, "live", conf(dir, 1))
			if tc.request {
				// A requested address passes host-local's duplicate
				// guard: only refusing before IPAM keeps the live
				// reservation (a release is by container ID).
				req := ip
				for range 100 {
					req = req.Next()
				}
				c.Args = "IgnoreUnknown=1;IP=" + req.String()
			}
			e := h.Fail(c)
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
			c = Cmd("ADD", third, "third", conf(dir, 2))
			c.Args = "IgnoreUnknown=1;IP=" + ip.String()
			if o := h.Exec(c); o.Status == 0 || !strings.Contains(o.Stdout, "is not available") {
				t.Errorf("a third container asking for the live address %s was not refused by IPAM: %s", ip, o.Stdout)
			}

			fourth, _ := NewCtr(t, NoDAD)
			if r4 := h.Add(fourth, "fourth", conf(dir, 3)); len(r4.IPs) == 0 || r4.IPs[0].Address == addr {
				t.Errorf("the next allocation got %+v, the live address is %s", r4.IPs, addr)
			}
		})
	}
}

// KeepsNFT is a keep for RepeatedAdds: it counts the nftables objects the
// live attachment (network testnet, container "live", eth0) owns, which
// must not be none, and checks after the repeat that the count is the
// same.
func KeepsNFT(t *testing.T, h *Host) func(t *testing.T) {
	own := ownerid.Owner{Network: "testnet", ContainerID: "live", IfName: "eth0"}
	n := NFTOwned(t, h.NS, own)
	if n == 0 {
		t.Fatal("the live attachment owns no nftables state")
	}
	return func(t *testing.T) {
		if got := NFTOwned(t, h.NS, own); got != n {
			t.Errorf("the live attachment owns %d nftables objects, had %d", got, n)
		}
	}
}
