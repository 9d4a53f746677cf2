package daemon_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/nftcni/nftcni/internal/dhcptest"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/ipam/dhcp"
	"github.com/nftcni/nftcni/ipam/dhcp/daemon"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

// harness is a dnsmasq server plus an in-process daemon (so the test can
// count its goroutines and descriptors) driven through the real plugin
// code, also in-process: the plugin only dials a Unix socket.
type harness struct {
	t        *testing.T
	srv      *dhcptest.Server
	sock     string
	stateDir string
	d        *daemon.Daemon
	served   chan error
	// cfg is what startDaemon uses (StateDir and Logf are filled in).
	cfg daemon.Config
}

// newHarness starts dnsmasq (extra: more dnsmasq flags) and a daemon.
func newHarness(t *testing.T, extra ...string) *harness {
	t.Helper()
	return newHarnessOn(t, dhcptest.Start(t, extra...))
}

// newHarnessOn starts a daemon for the server srv.
func newHarnessOn(t *testing.T, srv *dhcptest.Server) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{t: t, srv: srv, sock: filepath.Join(dir, "dhcp.sock"), stateDir: filepath.Join(dir, "state")}
	h.cfg = daemon.Config{
		Timeout:       500 * time.Millisecond,
		ResendMax:     2 * time.Second,
		ResendTimeout: 20 * time.Second,
	}
	h.startDaemon()
	t.Cleanup(h.stopDaemon)
	return h
}

// startDaemon starts a daemon on the harness's socket and state
// directory, with timeouts short enough for a test (h.cfg).
func (h *harness) startDaemon() {
	h.t.Helper()
	cfg := h.cfg
	cfg.StateDir, cfg.Logf = h.stateDir, h.t.Logf
	d, err := daemon.New(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	l, err := net.Listen("unix", h.sock)
	if err != nil {
		h.t.Fatal(err)
	}
	h.d = d
	h.served = make(chan error, 1)
	go func() { h.served <- d.Serve(l) }()
}

// stopDaemon closes the daemon (leases are kept on disk) and checks that
// Serve returned cleanly.
func (h *harness) stopDaemon() {
	h.t.Helper()
	if h.d == nil {
		return
	}
	if err := h.d.Close(); err != nil {
		h.t.Error(err)
	}
	if err := <-h.served; err != nil {
		h.t.Errorf("Serve: %v", err)
	}
	h.d = nil
}

// conf is a network config for the dhcp plugin; ipam holds extra members
// of the ipam object, each starting with a comma.
func (h *harness) conf(ipam string) string {
	return fmt.Sprintf(`{"cniVersion":"1.1.0","name":"testnet","type":"bridge","ipam":{"type":"dhcp","daemonSocketPath":%q%s}}`, h.sock, ipam)
}

// call builds an invocation for container id in ctr, interface eth0.
func call(cmd string, ctr *netns.NS, id, conf string) plugintest.Call {
	return plugintest.Cmd(cmd, ctr, id, conf)
}

// run invokes the plugin in-process.
func (h *harness) run(c plugintest.Call) plugintest.Outcome {
	return plugintest.Run(dhcp.Plugin, c)
}

func (h *harness) ok(c plugintest.Call) string {
	h.t.Helper()
	o := h.run(c)
	if o.Status != 0 {
		h.t.Fatalf("%s %s: %s %s", c.Command, c.ContainerID, o.Stdout, o.Stderr)
	}
	return o.Stdout
}

func (h *harness) fail(c plugintest.Call) plugintest.ErrorObject {
	h.t.Helper()
	o := h.run(c)
	var e plugintest.ErrorObject
	if o.Status != 1 || json.Unmarshal([]byte(o.Stdout), &e) != nil {
		h.t.Fatalf("%s %s: want an error, got exit %d: %s %s", c.Command, c.ContainerID, o.Status, o.Stdout, o.Stderr)
	}
	return e
}

// ctr makes a container namespace attached to the server's bridge and
// returns it with the MAC of its eth0.
func (h *harness) ctr() (*netns.NS, net.HardwareAddr) {
	h.t.Helper()
	ns, _ := plugintest.NewCtr(h.t)
	return ns, h.srv.Attach(h.t, ns, "eth0")
}

// configure puts the leased address on eth0, as the interface plugin
// would after ADD: renewals are answered by unicast to that address.
func configure(t *testing.T, ns *netns.NS, addr string) {
	t.Helper()
	p := netip.MustParsePrefix(addr)
	plugintest.Must(t, privtest.Handle(t, ns).AddAddr("eth0", p, netlinkx.AddrOpts{}))
}

// addResult decodes an ADD result with one address.
func addResult(t *testing.T, out string) *plugintest.WireResult {
	t.Helper()
	r := decodeResult(t, out)
	if len(r.IPs) != 1 {
		t.Fatalf("ADD result has %d IPs: %s", len(r.IPs), out)
	}
	return r
}

// decodeResult decodes an ADD result.
func decodeResult(t *testing.T, out string) *plugintest.WireResult {
	t.Helper()
	var r plugintest.WireResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("ADD output %q: %v", out, err)
	}
	return &r
}

// leaseOf waits until the server holds a lease for mac and returns it.
func (h *harness) leaseOf(mac net.HardwareAddr) dhcptest.Lease {
	h.t.Helper()
	var out dhcptest.Lease
	h.srv.Wait(h.t, "a lease for "+mac.String(), func(ls []dhcptest.Lease) bool {
		for _, l := range ls {
			if l.MAC == mac.String() {
				out = l
				return true
			}
		}
		return false
	})
	return out
}

// waitReleased waits until the server holds no lease for mac.
func (h *harness) waitReleased(mac net.HardwareAddr) {
	h.t.Helper()
	h.srv.Wait(h.t, "the lease of "+mac.String()+" to be released", func(ls []dhcptest.Lease) bool {
		for _, l := range ls {
			if l.MAC == mac.String() {
				return false
			}
		}
		return true
	})
}

// waitRenewed waits until the server's lease for mac expires later than
// after: the daemon renewed it.
func (h *harness) waitRenewed(mac net.HardwareAddr, after int64) dhcptest.Lease {
	h.t.Helper()
	var out dhcptest.Lease
	h.srv.Wait(h.t, fmt.Sprintf("a renewal of %s (expiry > %d)", mac, after), func(ls []dhcptest.Lease) bool {
		for _, l := range ls {
			if l.MAC == mac.String() && l.Expiry > after {
				out = l
				return true
			}
		}
		return false
	})
	return out
}

// leaseAt waits until the server holds a lease of address ip and returns
// it.
func (h *harness) leaseAt(ip netip.Addr) dhcptest.Lease {
	h.t.Helper()
	return h.waitIP(ip, "a lease of "+ip.String(), func(l dhcptest.Lease, ok bool) bool { return ok })
}

// waitReleasedIP waits until the server holds no lease of address ip.
func (h *harness) waitReleasedIP(ip netip.Addr) {
	h.t.Helper()
	h.waitIP(ip, "the lease of "+ip.String()+" to be released", func(l dhcptest.Lease, ok bool) bool { return !ok })
}

// waitRenewedIP waits until the server's lease of address ip expires
// later than after: the daemon renewed it.
func (h *harness) waitRenewedIP(ip netip.Addr, after int64) dhcptest.Lease {
	h.t.Helper()
	return h.waitIP(ip, fmt.Sprintf("a renewal of %s (expiry > %d)", ip, after), func(l dhcptest.Lease, ok bool) bool {
		return ok && l.Expiry > after
	})
}

// waitIP polls the server's lease of ip until cond holds, for up to
// renewWait: a DHCPv6 renewal comes at dnsmasq's T1, about a minute after
// the lease began.
func (h *harness) waitIP(ip netip.Addr, what string, cond func(dhcptest.Lease, bool) bool) dhcptest.Lease {
	h.t.Helper()
	deadline := time.Now().Add(renewWait)
	for {
		l, ok := h.srv.LeaseOfIP(h.t, ip)
		if cond(l, ok) {
			return l
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("waiting for %s: leases %+v\ndnsmasq log:\n%s", what, h.srv.Leases(h.t), h.srv.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// renewWait bounds a wait for the server's state to change when that
// takes a DHCPv6 renewal.
const renewWait = 3 * time.Minute
