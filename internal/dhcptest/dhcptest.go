// Package dhcptest runs a real DHCP server for the dhcp plugin's tests:
// Debian's dnsmasq, started inside a throwaway namespace behind a bridge,
// with its own lease and pid files, serving DHCPv4 and DHCPv6. Containers
// join with a veth pair.
//
// dnsmasq is the peer under test, not a tool doing our work; the tests
// skip without it, or fail under NFTCNI_REQUIRE_PRIV=1 (CI installs the
// dnsmasq-base package).
package dhcptest

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/sysctl"
)

// The server's networks.
var (
	ServerAddr = netip.MustParseAddr("10.99.0.1")
	Subnet     = netip.MustParsePrefix("10.99.0.0/24")

	ServerAddr6 = netip.MustParseAddr("fd00:99::1")
	Subnet6     = netip.MustParsePrefix("fd00:99::/64")
	// DHCPv6 addresses come from First6 to Last6.
	First6, Last6 = netip.MustParseAddr("fd00:99::100"), netip.MustParseAddr("fd00:99::1ff")
)

// Bridge is the server namespace's bridge, where containers are plugged.
const Bridge = "br0"

// Require skips the test unless dnsmasq is installed (and the test runs as
// root); under NFTCNI_REQUIRE_PRIV=1 a missing dnsmasq fails it.
func Require(t testing.TB) string {
	t.Helper()
	privtest.Require(t)
	path, err := exec.LookPath("dnsmasq")
	if err != nil {
		for _, p := range []string{"/usr/sbin/dnsmasq", "/sbin/dnsmasq"} {
			if _, serr := os.Stat(p); serr == nil {
				return p
			}
		}
		if os.Getenv("NFTCNI_REQUIRE_PRIV") == "1" {
			t.Fatal("dnsmasq is not installed (package dnsmasq-base); NFTCNI_REQUIRE_PRIV=1")
		}
		t.Skip("dnsmasq is not installed (package dnsmasq-base): no DHCP server to test against")
	}
	return path
}

// Server is a running dnsmasq.
type Server struct {
	NS        *netns.NS
	H         *netlinkx.Handle
	Dir       string
	LeaseFile string
	bin       string
	args      []string
	cmd       *exec.Cmd
	exited    chan struct{}
	stderr    bytes.Buffer
	ports     atomic.Int32
}

// Start runs dnsmasq serving DHCPv4 (10.99.0.100-199, router and DNS
// options) and DHCPv6 (fd00:99::100-1ff, DNS options), both with a
// two-minute lease (its minimum), plus extra dnsmasq flags (such as
// "--dhcp-option=option:T1,3"; it ignores a T1 below 3 s). Its DHCPv6 T1
// is always half the lease, less up to a sixteenth: 53 to 60 s. It is
// stopped when the test ends.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return start(t, true, extra)
}

// StartV4 is Start without DHCPv6: a server that never answers a DHCPv6
// client.
func StartV4(t testing.TB, extra ...string) *Server {
	t.Helper()
	return start(t, false, extra)
}

func start(t testing.TB, v6 bool, extra []string) *Server {
	t.Helper()
	bin := Require(t)
	ns := privtest.NewNS(t)
	h := privtest.Handle(t, ns)
	must(t, h.SetUp("lo"))
	must(t, h.AddBridge(netlinkx.BridgeSpec{Name: Bridge}))
	must(t, h.AddAddr(Bridge, netip.PrefixFrom(ServerAddr, Subnet.Bits()), netlinkx.AddrOpts{}))
	// No duplicate address detection on the server side: its addresses
	// are usable at once (the containers' go through it).
	must(t, sysctl.Set(ns, "net/ipv6/conf/"+Bridge+"/accept_dad", "0"))
	must(t, h.AddAddr(Bridge, netip.PrefixFrom(ServerAddr6, Subnet6.Bits()), netlinkx.AddrOpts{NoDAD: true}))
	must(t, h.SetUp(Bridge))

	s := &Server{NS: ns, H: h, Dir: t.TempDir(), bin: bin}
	s.LeaseFile = filepath.Join(s.Dir, "leases")
	s.args = []string{
		"--keep-in-foreground", "--conf-file=/dev/null", "--no-hosts", "--no-resolv",
		"--port=0", "--user=root", "--group=root",
		"--interface=" + Bridge, "--bind-interfaces",
		"--pid-file=" + filepath.Join(s.Dir, "pid"),
		"--dhcp-leasefile=" + s.LeaseFile,
		"--log-facility=" + filepath.Join(s.Dir, "log"), "--log-dhcp",
		"--no-ping", "--dhcp-authoritative",
		"--dhcp-range=10.99.0.100,10.99.0.199,255.255.255.0,2m",
		"--dhcp-option=option:router,10.99.0.1",
		"--dhcp-option=option:dns-server,10.99.0.53,10.99.0.54",
		"--dhcp-option=option:domain-name,example.test",
		"--dhcp-option=option:domain-search,example.test,corp.test",
	}
	if v6 {
		s.args = append(s.args,
			"--dhcp-range="+First6.String()+","+Last6.String()+",64,2m",
			"--dhcp-option=option6:dns-server,[fd00:99::53]",
			"--dhcp-option=option6:domain-search,example.test,corp.test")
	}
	s.args = append(s.args, extra...)
	s.launch(t)
	t.Cleanup(s.stop)
	return s
}

// launch starts dnsmasq and waits until it is ready: it wrote its pid
// file (after binding).
func (s *Server) launch(t testing.TB) {
	t.Helper()
	pid := filepath.Join(s.Dir, "pid")
	os.Remove(pid)
	s.stderr.Reset()
	s.exited = make(chan struct{})
	s.cmd = exec.Command(s.bin, s.args...)
	s.cmd.Stderr = &s.stderr
	if err := netns.StartIn(s.NS, s.cmd); err != nil {
		t.Fatalf("starting dnsmasq: %v", err)
	}
	cmd, exited := s.cmd, s.exited
	go func() { cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(pid); err == nil {
			return
		}
		select {
		case <-exited:
			t.Fatalf("dnsmasq exited: %s", s.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("dnsmasq did not start within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends dnsmasq: SIGTERM, then SIGKILL after 5 s.
func (s *Server) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// Forget restarts dnsmasq without its leases, as a server without
// persistent lease storage comes back: the lease file keeps only the
// server's DUID, so DHCPv6 clients still address the same server.
func (s *Server) Forget(t testing.TB) {
	t.Helper()
	s.stop()
	var keep []byte
	for _, line := range strings.SplitAfter(string(s.leaseFile(t)), "\n") {
		if strings.HasPrefix(line, "duid ") {
			keep = append(keep, line...)
		}
	}
	must(t, os.WriteFile(s.LeaseFile, keep, 0o644))
	s.launch(t)
}

// Attach connects ns to the server with a veth pair, ifname in ns and the
// other end in the server's bridge, both up and without addresses (as an
// interface plugin hands the container end to IPAM). It returns the
// container end's MAC.
func (s *Server) Attach(t testing.TB, ns *netns.NS, ifname string) net.HardwareAddr {
	t.Helper()
	peer := fmt.Sprintf("vs%d", s.ports.Add(1))
	h := privtest.Handle(t, ns)
	must(t, h.AddVeth(netlinkx.VethSpec{Name: ifname, PeerName: peer, PeerNS: s.NS}))
	must(t, s.H.SetMaster(peer, Bridge))
	must(t, s.H.SetUp(peer))
	must(t, h.SetUp(ifname))
	privtest.WaitOperUp(t, h, ifname)
	l, err := h.LinkByName(ifname)
	must(t, err)
	return l.MAC
}

// Lease is one line of dnsmasq's lease file: a DHCPv4 lease, or, after
// the server's "duid" line, a DHCPv6 one.
type Lease struct {
	Expiry   int64  // Unix seconds
	MAC      string // DHCPv4 only
	IAID     string // DHCPv6 only, decimal
	IP       string
	Hostname string // "*" when none
	ClientID string // hex bytes "00:63:..." (DHCPv6: the DUID); "*" when none
}

// Is6 reports a DHCPv6 lease.
func (l Lease) Is6() bool { return l.IAID != "" }

// Leases reads the lease file (no file yet: none).
func (s *Server) Leases(t testing.TB) []Lease {
	t.Helper()
	data := s.leaseFile(t)
	var out []Lease
	v6 := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && f[0] == "duid" {
			v6 = true
			continue
		}
		if len(f) < 5 {
			continue
		}
		exp, _ := strconv.ParseInt(f[0], 10, 64)
		l := Lease{Expiry: exp, IP: f[2], Hostname: f[3], ClientID: f[4]}
		if v6 {
			l.IAID = f[1]
		} else {
			l.MAC = f[1]
		}
		out = append(out, l)
	}
	return out
}

// leaseFile reads the lease file (no file yet: empty) once two reads a
// moment apart agree: dnsmasq rewrites it in place (truncate, then
// write), so a single read can catch it empty.
func (s *Server) leaseFile(t testing.TB) []byte {
	t.Helper()
	read := func() []byte {
		data, err := os.ReadFile(s.LeaseFile)
		if os.IsNotExist(err) {
			return nil
		}
		must(t, err)
		return data
	}
	prev := read()
	for range 100 {
		time.Sleep(5 * time.Millisecond)
		cur := read()
		if bytes.Equal(cur, prev) {
			return cur
		}
		prev = cur
	}
	t.Fatalf("dnsmasq's lease file %s keeps changing", s.LeaseFile)
	return nil
}

// LeaseOfIP returns the lease of address ip (either family), if any.
func (s *Server) LeaseOfIP(t testing.TB, ip netip.Addr) (Lease, bool) {
	t.Helper()
	for _, l := range s.Leases(t) {
		if a, err := netip.ParseAddr(l.IP); err == nil && a == ip {
			return l, true
		}
	}
	return Lease{}, false
}

// Leases6 returns the DHCPv6 leases of a lease list.
func Leases6(ls []Lease) []Lease {
	var out []Lease
	for _, l := range ls {
		if l.Is6() {
			out = append(out, l)
		}
	}
	return out
}

// LeaseOf returns the lease held by mac, if any.
func (s *Server) LeaseOf(t testing.TB, mac net.HardwareAddr) (Lease, bool) {
	t.Helper()
	for _, l := range s.Leases(t) {
		if l.MAC == mac.String() {
			return l, true
		}
	}
	return Lease{}, false
}

// WaitTimeout bounds every wait for the server's state to change.
const WaitTimeout = 60 * time.Second

// Wait polls the lease file until cond holds, failing the test after
// WaitTimeout; it returns the leases that satisfied cond.
func (s *Server) Wait(t testing.TB, what string, cond func([]Lease) bool) []Lease {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for {
		l := s.Leases(t)
		if cond(l) {
			return l
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.Dir, "log"))
			t.Fatalf("waiting for %s: leases %+v\ndnsmasq log:\n%s", what, l, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ClientIDHex is how dnsmasq's lease file shows a client ID: the option
// bytes in hex, colon-separated.
func ClientIDHex(b []byte) string {
	parts := make([]string, len(b))
	for i, c := range b {
		parts[i] = fmt.Sprintf("%02x", c)
	}
	return strings.Join(parts, ":")
}

// Log returns dnsmasq's log so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "log"))
	return string(b)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
