package daemon_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nftcni/nftcni/internal/dhcptest"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/sysctl"
)

// The DHCPv6 tests. dnsmasq's DHCPv6 T1 is about a minute (half its
// two-minute minimum lease) and cannot be shortened, so the two tests
// that wait for a renewal run in parallel.

const dualStack = `,"ipFamilies":["ipv4","ipv6"]`

// dualResult checks an ADD result of a dual-stack lease exactly (the IPv6
// address is whatever the server chose within its range) and returns the
// two addresses.
func dualResult(t *testing.T, out string) (v4, v6 netip.Addr) {
	t.Helper()
	r := addResults(t, out, 2)
	v4 = netip.MustParsePrefix(r.IPs[0].Address).Addr()
	v6 = inRange6(t, r.IPs[1].Address)
	want := `{"cniVersion":"1.1.0","dns":{"domain":"example.test","nameservers":["10.99.0.53","10.99.0.54","fd00:99::53"],"search":["example.test","corp.test"]},` +
		`"ips":[{"address":"` + v4.String() + `/24","gateway":"10.99.0.1"},{"address":"` + v6.String() + `/64"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.99.0.1"}]}`
	if got := compact(t, out); got != want {
		t.Errorf("ADD result\n%s\nwant\n%s", got, want)
	}
	return v4, v6
}

// inRange6 parses a result's IPv6 address, which must lie in the
// server's DHCPv6 range with prefix length 64.
func inRange6(t *testing.T, s string) netip.Addr {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	a := p.Addr()
	if err != nil || !a.Is6() || p.Bits() != 64 || a.Less(dhcptest.First6) || dhcptest.Last6.Less(a) {
		t.Fatalf("IPv6 address %q is not a /64 in %s-%s", s, dhcptest.First6, dhcptest.Last6)
	}
	return a
}

// addResults decodes an ADD result with n addresses.
func addResults(t *testing.T, out string, n int) *plugintest.WireResult {
	t.Helper()
	r := decodeResult(t, out)
	if len(r.IPs) != n {
		t.Fatalf("ADD result has %d IPs, want %d: %s", len(r.IPs), n, out)
	}
	return r
}

// TestDualStack: one ADD leases an IPv4 and an IPv6 address from the
// server and returns both; the DHCPv6 lease is renewed without another
// ADD (and without the address on the interface: DHCPv6 speaks from the
// link-local address); CHECK passes; a second ADD reuses both leases; DEL
// releases both on the server; afterwards CHECK fails and DEL is fine.
func TestDualStack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, renewFast)
	ctr, mac := h.ctr()
	conf := h.conf(dualStack)

	out := h.ok(call("ADD", ctr, "c1", conf))
	v4, v6 := dualResult(t, out)
	l4, l6 := h.leaseOf(mac), h.leaseAt(v6)
	if l4.IP != v4.String() {
		t.Errorf("server leased %s to the interface, the result says %s", l4.IP, v4)
	}
	// The DUID is a DUID-UUID (type 4), the IAID a hash of "eth0".
	if !strings.HasPrefix(l6.ClientID, "00:04:") || len(l6.ClientID) != 18*3-1 || l6.IAID != "1739691812" {
		t.Errorf("server saw DUID %s IAID %s", l6.ClientID, l6.IAID)
	}
	configure(t, ctr, v4.String()+"/24")
	h.wantStateFiles(2)

	h.waitRenewedIP(v6, l6.Expiry)
	h.waitRenewed(mac, l4.Expiry)

	h.ok(call("CHECK", ctr, "c1", withPrev(conf, out)))
	if again := addResults(t, h.ok(call("ADD", ctr, "c1", conf)), 2); again.IPs[0].Address != v4.String()+"/24" || again.IPs[1].Address != v6.String()+"/64" {
		t.Errorf("second ADD got %+v, want the leases %s and %s", again.IPs, v4, v6)
	}
	h.ok(call("DEL", ctr, "c1", conf))
	h.waitReleased(mac)
	h.waitReleasedIP(v6)
	h.wantStateFiles(0)
	if e := h.fail(call("CHECK", ctr, "c1", conf)); e.Msg != `error calling DHCP.Check: no DHCP lease for client ID "c1/testnet/eth0"` {
		t.Errorf("CHECK after DEL: %q", e.Msg)
	}
	h.ok(call("DEL", ctr, "c1", conf))
}

// TestDualStackRestart: a daemon restart keeps both leases (persisted);
// the new daemon renews the DHCPv6 lease — same address, same DUID and
// IAID on the server —, knows it for CHECK and releases it on DEL.
func TestDualStackRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	conf := h.conf(dualStack)
	ctr, mac := h.ctr()
	out := h.ok(call("ADD", ctr, "c1", conf))
	v4, v6 := dualResult(t, out)
	configure(t, ctr, v4.String()+"/24")
	before := h.leaseAt(v6)
	h.wantStateFiles(2)

	h.stopDaemon()
	h.startDaemon()

	after := h.waitRenewedIP(v6, before.Expiry)
	if after.ClientID != before.ClientID || after.IAID != before.IAID {
		t.Errorf("renewed as %s/%s, leased as %s/%s", after.ClientID, after.IAID, before.ClientID, before.IAID)
	}
	h.ok(call("CHECK", ctr, "c1", withPrev(conf, out)))
	h.ok(call("DEL", ctr, "c1", conf))
	h.waitReleasedIP(v6)
	h.waitReleased(mac)
	h.wantStateFiles(0)
}

// TestIPv6Only: a network listing only "ipv6" gets a DHCPv6 lease and no
// DHCPv4 one, even where IPv6 was disabled on the interface (the daemon
// enables it); two containers get distinct addresses and identities; GC
// and DEL each release only their own lease. A network without
// ipFamilies (TestTwoContainers) never asks for a DHCPv6 lease.
func TestIPv6Only(t *testing.T) {
	h := newHarness(t)
	conf := h.conf(`,"ipFamilies":["ipv6"],"ipv6PrefixLength":128`)
	ctr1, mac1 := h.ctr()
	ctr2, _ := h.ctr()
	const disabled = "net/ipv6/conf/eth0/disable_ipv6"
	plugintest.Must(t, sysctl.Set(ctr1, disabled, "1"))
	out1 := h.ok(call("ADD", ctr1, "c1", conf))
	if v, err := sysctl.Get(ctr1, disabled); err != nil || v != "0" {
		t.Errorf("%s is %q (%v) after ADD", disabled, v, err)
	}
	r1 := addResults(t, out1, 1)
	a1 := netip.MustParsePrefix(r1.IPs[0].Address).Addr()
	want := `{"cniVersion":"1.1.0","dns":{"nameservers":["fd00:99::53"],"search":["example.test","corp.test"]},"ips":[{"address":"` + a1.String() + `/128"}]}`
	if got := compact(t, out1); got != want {
		t.Errorf("ADD result\n%s\nwant\n%s", got, want)
	}
	r2 := addResults(t, h.ok(call("ADD", ctr2, "c2", conf)), 1)
	a2 := netip.MustParsePrefix(r2.IPs[0].Address).Addr()
	if a1 == a2 {
		t.Fatalf("both containers got %s", a1)
	}
	l1, l2 := h.leaseAt(a1), h.leaseAt(a2)
	if l1.ClientID == l2.ClientID {
		t.Errorf("both containers have DUID %s", l1.ClientID)
	}
	if _, ok := h.srv.LeaseOf(t, mac1); ok {
		t.Error("an IPv6-only network got a DHCPv4 lease")
	}
	if n := len(h.srv.Leases(t)); n != 2 {
		t.Errorf("%d leases on the server, want 2", n)
	}
	h.wantStateFiles(2)
	h.ok(call("CHECK", ctr1, "c1", withPrev(conf, out1)))

	gc := conf[:len(conf)-1] + `,"cni.dev/valid-attachments":[{"containerID":"c2","ifname":"eth0"}]}`
	h.ok(call("GC", nil, "", gc))
	h.waitReleasedIP(a1)
	h.wantStateFiles(1)
	if _, ok := h.srv.LeaseOfIP(t, a2); !ok {
		t.Error("GC released the valid attachment's lease")
	}
	h.ok(call("DEL", ctr2, "c2", conf))
	h.waitReleasedIP(a2)
	h.wantStateFiles(0)
}

// TestNoDHCPv6Server: when the link's server does not answer DHCPv6, a
// dual-stack ADD fails after -resendtimeout naming the DHCPv6 exchange,
// and gives back the DHCPv4 lease it got meanwhile: nothing is left, on
// the server or on disk.
func TestNoDHCPv6Server(t *testing.T) {
	h := newHarnessOn(t, dhcptest.StartV4(t))
	h.stopDaemon()
	h.cfg.ResendTimeout = 3 * time.Second
	h.startDaemon()
	ctr, mac := h.ctr()
	conf := h.conf(dualStack)
	e := h.fail(call("ADD", ctr, "c1", conf))
	if want := "error calling DHCP.Allocate: no more tries: c1/testnet/eth0 (DHCPv6): acquiring a lease: "; e.Code != 999 || !strings.HasPrefix(e.Msg, want) {
		t.Errorf("ADD: %d %q, want %q…", e.Code, e.Msg, want)
	}
	h.srv.Wait(t, "no lease", func(ls []dhcptest.Lease) bool { return len(ls) == 0 })
	if !strings.Contains(h.srv.Log(), "DHCPRELEASE(br0) 10.99.0.") {
		t.Errorf("the DHCPv4 lease was not released:\n%s", h.srv.Log())
	}
	h.wantStateFiles(0)
	if e := h.fail(call("CHECK", ctr, "c1", conf)); !strings.Contains(e.Msg, "no DHCP lease") {
		t.Errorf("CHECK: %q", e.Msg)
	}
	// The same network with DHCPv4 only works.
	h.ok(call("ADD", ctr, "c1", h.conf("")))
	h.leaseOf(mac)
}

// TestServerForgets: the server restarts without its leases. At T1 the
// daemon's Renew is answered NoBinding, and it solicits anew — with the
// same DUID and IAID, dnsmasq hands out the same address again. The
// lease is then maintained and released as before.
func TestServerForgets(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	conf := h.conf(`,"ipFamilies":["ipv6"]`)
	ctr, _ := h.ctr()
	out := h.ok(call("ADD", ctr, "c1", conf))
	a := netip.MustParsePrefix(addResults(t, out, 1).IPs[0].Address).Addr()
	before := h.leaseAt(a)
	h.srv.Forget(t)
	if _, ok := h.srv.LeaseOfIP(t, a); ok {
		t.Fatal("dnsmasq still has the lease")
	}
	after := h.leaseAt(a)
	if after.Expiry <= before.Expiry || after.ClientID != before.ClientID || after.IAID != before.IAID {
		t.Errorf("leased again as %+v, first as %+v", after, before)
	}
	if log := h.srv.Log(); !strings.Contains(log, "lease not found") {
		t.Errorf("dnsmasq never answered NoBinding:\n%s", log)
	}
	h.ok(call("CHECK", ctr, "c1", withPrev(conf, out)))
	h.ok(call("DEL", ctr, "c1", conf))
	h.waitReleasedIP(a)
	h.wantStateFiles(0)
}
