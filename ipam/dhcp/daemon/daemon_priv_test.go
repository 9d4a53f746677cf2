package daemon_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/rpc"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/nftcni/nftcni/internal/dhcptest"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
)

// renewFast makes dnsmasq hand out T1 = 3 s (it ignores values below 3),
// so a renewal happens within seconds although its shortest lease is two
// minutes.
const renewFast = "--dhcp-option=option:T1,3"

// TestLifecycle: ADD gets a lease whose result carries the server's
// address, gateway, default route and DNS; the lease is renewed without
// another ADD; CHECK passes; DEL releases it on the server; afterwards
// CHECK fails and DEL is still fine.
func TestLifecycle(t *testing.T) {
	h := newHarness(t, renewFast)
	ctr, mac := h.ctr()
	conf := h.conf("")

	out := h.ok(call("ADD", ctr, "c1", conf))
	l := h.leaseOf(mac)
	want := `{"cniVersion":"1.1.0","dns":{"domain":"example.test","nameservers":["10.99.0.53","10.99.0.54"],"search":["example.test","corp.test"]},` +
		`"ips":[{"address":"` + l.IP + `/24","gateway":"10.99.0.1"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.99.0.1"}]}`
	if got := compact(t, out); got != want {
		t.Errorf("ADD result\n%s\nwant\n%s", got, want)
	}
	if wantID := dhcptest.ClientIDHex(append([]byte{0}, "c1/testnet/eth0"...)); l.ClientID != wantID {
		t.Errorf("server saw client ID %s, want %s", l.ClientID, wantID)
	}
	configure(t, ctr, l.IP+"/24")

	h.waitRenewed(mac, l.Expiry)

	if out := h.ok(call("CHECK", ctr, "c1", withPrev(conf, out))); out != "" {
		t.Errorf("CHECK printed %q", out)
	}
	// A second ADD reuses the lease: same address, no new exchange needed.
	if again := addResult(t, h.ok(call("ADD", ctr, "c1", conf))); again.IPs[0].Address != l.IP+"/24" {
		t.Errorf("second ADD got %s, want the lease %s", again.IPs[0].Address, l.IP)
	}
	h.ok(call("DEL", ctr, "c1", conf))
	h.waitReleased(mac)
	if e := h.fail(call("CHECK", ctr, "c1", conf)); e.Msg != `error calling DHCP.Check: no DHCP lease for client ID "c1/testnet/eth0"` {
		t.Errorf("CHECK after DEL: %q", e.Msg)
	}
	h.ok(call("DEL", ctr, "c1", conf))
	h.wantStateFiles(0)
}

// TestResultFromOptions: what the server sends, and what the config
// requests, shapes the result's gateway, routes and DNS.
func TestResultFromOptions(t *testing.T) {
	tests := []struct {
		name   string
		server []string // dnsmasq flags
		ipam   string   // extra ipam members
		want   string   // the result without cniVersion and ips[0].address; ADDR stands for it
	}{
		{
			name:   "classless routes replace the default route",
			server: []string{"--dhcp-option=option:classless-static-route,192.168.50.0/24,10.99.0.254,10.98.0.0/16,0.0.0.0"},
			ipam:   `,"request":[{"option":"121"}]`,
			want: `"ips":[{"address":"ADDR/24","gateway":"10.99.0.1"}],"routes":[{"dst":"192.168.50.0/24","gw":"10.99.0.254"},` +
				`{"dst":"10.98.0.0/16","gw":"0.0.0.0","scope":253}]`,
		},
		{
			name:   "static routes then the default route",
			server: []string{"--dhcp-option=option:static-route,192.168.60.0,10.99.0.254,172.20.0.0,10.99.0.253"},
			ipam:   `,"request":[{"option":"33"}]`,
			want: `"ips":[{"address":"ADDR/24","gateway":"10.99.0.1"}],"routes":[{"dst":"192.168.60.0/24","gw":"10.99.0.254"},` +
				`{"dst":"172.20.0.0/16","gw":"10.99.0.253"},{"dst":"0.0.0.0/0","gw":"10.99.0.1"}]`,
		},
		{
			name: "priority on every route",
			ipam: `,"priority":50`,
			want: `"ips":[{"address":"ADDR/24","gateway":"10.99.0.1"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.99.0.1","priority":50}]`,
		},
		{
			name: "skipDefault asks for the mask only",
			ipam: `,"request":[{"option":"subnet-mask","skipDefault":true}]`,
			want: `"ips":[{"address":"ADDR/24"}]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.server...)
			ctr, mac := h.ctr()
			out := compact(t, h.ok(call("ADD", ctr, "c1", h.conf(tt.ipam))))
			l := h.leaseOf(mac)
			body := strings.ReplaceAll(tt.want, "ADDR", l.IP)
			if !strings.HasSuffix(out, ","+body+"}") || !strings.HasPrefix(out, `{"cniVersion":"1.1.0",`) {
				t.Errorf("ADD result\n%s\nwant it to end with\n%s", out, body)
			}
			h.ok(call("DEL", ctr, "c1", h.conf(tt.ipam)))
			h.waitReleased(mac)
		})
	}
}

// TestProvidedOptions: a host name taken from CNI_ARGS reaches the server,
// and a provided client identifier replaces the generated one on every
// message, the release included (the reference releases with the
// generated one, which a server keyed by client ID ignores).
func TestProvidedOptions(t *testing.T) {
	h := newHarness(t)
	ctr, mac := h.ctr()
	conf := h.conf(`,"provide":[{"option":"host-name","fromArg":"K8S_POD_NAME"},{"option":"dhcp-client-identifier","value":"custom-id"}]`)
	c := call("ADD", ctr, "c1", conf)
	c.Args = "IgnoreUnknown=1;K8S_POD_NAME=web-1"
	h.ok(c)
	l := h.leaseOf(mac)
	if l.Hostname != "web-1" {
		t.Errorf("server saw host name %q, want web-1", l.Hostname)
	}
	if want := dhcptest.ClientIDHex([]byte("custom-id")); l.ClientID != want {
		t.Errorf("server saw client ID %s, want %s", l.ClientID, want)
	}
	configure(t, ctr, l.IP+"/24")
	h.ok(call("DEL", ctr, "c1", conf))
	h.waitReleased(mac)
}

// TestTwoContainers: two containers get different leases, each released
// by its own DEL only; without ipFamilies, DHCPv4 only.
func TestTwoContainers(t *testing.T) {
	h := newHarness(t)
	conf := h.conf("")
	ctr1, mac1 := h.ctr()
	ctr2, mac2 := h.ctr()
	r1 := addResult(t, h.ok(call("ADD", ctr1, "c1", conf)))
	r2 := addResult(t, h.ok(call("ADD", ctr2, "c2", conf)))
	if r1.IPs[0].Address == r2.IPs[0].Address {
		t.Fatalf("both containers got %s", r1.IPs[0].Address)
	}
	l1, l2 := h.leaseOf(mac1), h.leaseOf(mac2)
	if l1.IP+"/24" != r1.IPs[0].Address || l2.IP+"/24" != r2.IPs[0].Address {
		t.Errorf("server leases %s, %s; results %s, %s", l1.IP, l2.IP, r1.IPs[0].Address, r2.IPs[0].Address)
	}
	h.wantStateFiles(2)
	if ls := dhcptest.Leases6(h.srv.Leases(t)); len(ls) != 0 {
		t.Errorf("a network without ipFamilies got DHCPv6 leases %+v", ls)
	}
	configure(t, ctr1, r1.IPs[0].Address)
	h.ok(call("DEL", ctr1, "c1", conf))
	h.waitReleased(mac1)
	if _, ok := h.srv.LeaseOf(t, mac2); !ok {
		t.Error("DEL of c1 released c2's lease")
	}
	h.ok(call("CHECK", ctr2, "c2", conf))
}

// TestParallel: ADDs of several containers at once all get their own
// lease, and two simultaneous ADDs of one container share one lease.
func TestParallel(t *testing.T) {
	h := newHarness(t)
	conf := h.conf("")
	const n = 5
	var ctrs [n]*netns.NS
	var macs [n]net.HardwareAddr
	for i := range n {
		ctrs[i], macs[i] = h.ctr()
	}
	outs := make([]plugintest.Outcome, n+1)
	var wg sync.WaitGroup
	for i := range n + 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := min(i, n-1) // the last two both ADD container n-1
			outs[i] = h.run(call("ADD", ctrs[j], fmt.Sprintf("c%d", j), conf))
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, o := range outs {
		if o.Status != 0 {
			t.Fatalf("ADD %d: %s %s", i, o.Stdout, o.Stderr)
		}
		seen[addResult(t, o.Stdout).IPs[0].Address] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct addresses for %d containers: %v", len(seen), n, seen)
	}
	h.srv.Wait(t, "one lease per container", func(ls []dhcptest.Lease) bool { return len(ls) == n })
	h.wantStateFiles(n)
}

// TestRestart: a daemon restart keeps the lease (persisted) and keeps
// renewing it; the new daemon knows it for CHECK and releases it on DEL.
// A lease whose container disappeared while no daemon ran is dropped.
func TestRestart(t *testing.T) {
	h := newHarness(t, renewFast)
	conf := h.conf("")
	ctr, mac := h.ctr()
	doomed, destroy := plugintest.DoomedCtr(t)
	h.srv.Attach(t, doomed, "eth0")
	out := h.ok(call("ADD", ctr, "c1", conf))
	h.ok(call("ADD", doomed, "c2", conf))
	configure(t, ctr, addResult(t, out).IPs[0].Address)
	h.wantStateFiles(2)

	h.stopDaemon()
	destroy()
	before := h.leaseOf(mac)
	h.startDaemon()

	h.waitRenewed(mac, before.Expiry)
	h.waitStateFiles(1)
	h.ok(call("CHECK", ctr, "c1", withPrev(conf, out)))
	h.ok(call("DEL", ctr, "c1", conf))
	h.waitReleased(mac)
	h.wantStateFiles(0)
}

// TestCollision: container IDs so long that their client IDs truncate to
// the same 254 bytes. The second ADD is refused instead of silently
// sharing the first container's lease, and its DEL leaves that lease
// alone.
func TestCollision(t *testing.T) {
	h := newHarness(t)
	conf := h.conf("")
	long := strings.Repeat("a", 260)
	ctr1, mac1 := h.ctr()
	ctr2, _ := h.ctr()
	h.ok(call("ADD", ctr1, long+"1", conf))
	e := h.fail(call("ADD", ctr2, long+"2", conf))
	if !strings.Contains(e.Msg, "is in use by container \""+long+"1\"") || e.Code != 999 {
		t.Errorf("second ADD: %d %q", e.Code, e.Msg)
	}
	h.ok(call("DEL", ctr2, long+"2", conf))
	h.ok(call("CHECK", ctr1, long+"1", conf))
	if _, ok := h.srv.LeaseOf(t, mac1); !ok {
		t.Error("the first container lost its lease")
	}
}

// TestInterfaceGone: once the container's interface is gone the lease is
// dead — CHECK fails at once, its record is dropped, and a later ADD for
// the same client ID acquires afresh instead of waiting on it.
func TestInterfaceGone(t *testing.T) {
	h := newHarness(t)
	conf := h.conf("")
	ctr, _ := h.ctr()
	h.ok(call("ADD", ctr, "c1", conf))
	plugintest.Must(t, privtest.Handle(t, ctr).DeleteLink("eth0"))
	// CHECK finds the link gone itself, or — on a slow machine — the
	// lease's maintainer noticed first and says so; either names the cause.
	e := h.fail(call("CHECK", ctr, "c1", conf))
	if e.Msg != `error calling DHCP.Check: error looking up "eth0": Link not found` &&
		e.Msg != `error calling DHCP.Check: DHCP lease for client ID "c1/testnet/eth0" is no longer maintained: interface gone: error looking up "eth0": Link not found` {
		t.Errorf("CHECK: %q", e.Msg)
	}
	mac := h.srv.Attach(t, ctr, "eth0")
	r := addResult(t, h.ok(call("ADD", ctr, "c1", conf)))
	if l := h.leaseOf(mac); l.IP+"/24" != r.IPs[0].Address {
		t.Errorf("ADD got %s, server leased %s to the new interface", r.IPs[0].Address, l.IP)
	}
	h.ok(call("DEL", ctr, "c1", conf))
	h.wantStateFiles(0)
}

// TestGC: GC releases the leases of this network whose attachment is not
// valid; without a list it releases nothing.
func TestGC(t *testing.T) {
	h := newHarness(t)
	conf := h.conf("")
	ctr1, mac1 := h.ctr()
	ctr2, mac2 := h.ctr()
	r1 := addResult(t, h.ok(call("ADD", ctr1, "c1", conf)))
	r2 := addResult(t, h.ok(call("ADD", ctr2, "c2", conf)))
	configure(t, ctr1, r1.IPs[0].Address)
	configure(t, ctr2, r2.IPs[0].Address)

	o := h.run(call("GC", nil, "", conf))
	if o.Status != 0 || !strings.Contains(o.Stderr, "nothing released") {
		t.Errorf("GC without a list: %d %s %s", o.Status, o.Stdout, o.Stderr)
	}
	h.wantStateFiles(2)

	gc := conf[:len(conf)-1] + `,"cni.dev/valid-attachments":[{"containerID":"c2","ifname":"eth0"}]}`
	h.ok(call("GC", nil, "", gc))
	h.waitReleased(mac1)
	h.wantStateFiles(1)
	if _, ok := h.srv.LeaseOf(t, mac2); !ok {
		t.Error("GC released the valid attachment's lease")
	}
	h.ok(call("CHECK", ctr2, "c2", conf))
}

// TestReferenceClient: a client built on the CNI library's own types (the
// reference plugin's) gets a lease from our daemon and releases it: the
// RPC is wire-compatible.
func TestReferenceClient(t *testing.T) {
	h := newHarness(t)
	ctr, mac := h.ctr()
	c, err := rpc.DialHTTPPath("unix", h.sock, rpc.DefaultRPCPath)
	plugintest.Must(t, err)
	defer c.Close()
	args := &cmdArgs{ContainerID: "c1", Netns: ctr.Path(), IfName: "eth0", StdinData: []byte(h.conf(""))}
	var res current.Result
	plugintest.Must(t, c.Call("DHCP.Allocate", args, &res))
	l := h.leaseOf(mac)
	if len(res.IPs) != 1 || res.IPs[0].Address.String() != l.IP+"/24" || res.IPs[0].Gateway.String() != "10.99.0.1" ||
		len(res.Routes) != 1 || res.Routes[0].Dst.String() != "0.0.0.0/0" || res.DNS.Domain != "example.test" {
		t.Errorf("reference-typed reply %+v, lease %s", res, l.IP)
	}
	configure(t, ctr, l.IP+"/24")
	plugintest.Must(t, c.Call("DHCP.Release", args, &struct{}{}))
	h.waitReleased(mac)
}

// TestNoServer: with no DHCP server on the link, ADD gives up after
// -resendtimeout with an error, keeping nothing.
func TestNoServer(t *testing.T) {
	h := newHarness(t)
	h.stopDaemon()
	h.cfg.ResendTimeout = 3 * time.Second
	h.startDaemon()
	ctr, _ := plugintest.NewCtr(t)
	privtest.Wire(t, ctr, "eth0", netip.Prefix{}, privtest.NewNS(t), "peer0", netip.Prefix{})
	conf := h.conf("")
	e := h.fail(call("ADD", ctr, "c1", conf))
	if e.Code != 999 || !strings.HasPrefix(e.Msg, "error calling DHCP.Allocate: no more tries: c1/testnet/eth0: acquiring a lease: ") {
		t.Errorf("ADD: %d %q", e.Code, e.Msg)
	}
	h.wantStateFiles(0)
	if e := h.fail(call("CHECK", ctr, "c1", conf)); !strings.Contains(e.Msg, "no DHCP lease") {
		t.Errorf("CHECK: %q", e.Msg)
	}
	h.ok(call("DEL", ctr, "c1", conf))
}

// TestAddErrors: ADD failures name what is wrong and keep nothing.
func TestAddErrors(t *testing.T) {
	h := newHarness(t)
	ctr, _ := plugintest.NewCtr(t)
	notNS := filepath.Join(t.TempDir(), "plain-file")
	plugintest.Must(t, os.WriteFile(notNS, nil, 0o600))
	tests := []struct {
		name   string
		netns  string
		ipam   string
		prefix string // of the error message
	}{
		{"no such interface", ctr.Path(), "", `error calling DHCP.Allocate: error looking up "eth0": Link not found`},
		{"no such netns", "/nonexistent/ns", "", `error calling DHCP.Allocate: failed to Statfs "/nonexistent/ns": no such file or directory`},
		{"not a netns", notNS, "", `error calling DHCP.Allocate: unknown FS magic on "` + notNS + `": `},
		{"bad option", ctr.Path(), `,"request":[{"option":"nope"}]`,
			`error calling DHCP.Allocate: Can not parse option "nope": Can not parse option: strconv.ParseUint: parsing "nope": invalid syntax`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := call("ADD", nil, "c1", h.conf(tt.ipam))
			c.Netns = tt.netns
			if e := h.fail(c); e.Code != 999 || !strings.HasPrefix(e.Msg, tt.prefix) {
				t.Errorf("error %d %q, want %q…", e.Code, e.Msg, tt.prefix)
			}
			h.wantStateFiles(0)
		})
	}
}

// TestDaemonSettings: -hostprefix is prepended to the namespace paths the
// plugin sends; -broadcast sets the broadcast flag, which makes the server
// answer by broadcast.
func TestDaemonSettings(t *testing.T) {
	t.Run("hostprefix", func(t *testing.T) {
		h := newHarness(t)
		ctr, mac := h.ctr()
		// The plugin names a path that exists only under the prefix.
		prefix := t.TempDir()
		plugintest.Must(t, os.Symlink(ctr.Path(), filepath.Join(prefix, "ctr-ns")))
		h.stopDaemon()
		h.cfg.HostPrefix = prefix
		h.startDaemon()
		c := call("ADD", nil, "c1", h.conf(""))
		c.Netns = "/ctr-ns"
		h.ok(c)
		h.leaseOf(mac)
	})
	t.Run("broadcast", func(t *testing.T) {
		h := newHarness(t)
		h.stopDaemon()
		h.cfg.Broadcast = true
		h.startDaemon()
		ctr, mac := h.ctr()
		h.ok(call("ADD", ctr, "c1", h.conf("")))
		h.leaseOf(mac)
		if log := h.srv.Log(); !strings.Contains(log, "broadcast response") {
			t.Errorf("dnsmasq did not answer by broadcast:\n%s", log)
		}
	})
}

// cmdArgs is the CNI library's skel.CmdArgs, copied because importing skel
// would pull a module this repository does not use elsewhere; gob matches
// it by field names, as it does the real one.
type cmdArgs struct {
	ContainerID   string
	Netns         string
	IfName        string
	Args          string
	Path          string
	NetnsOverride string
	StdinData     []byte
}

// TestNoLeak: 100 dual-stack ADD/DEL cycles leave no goroutine and no
// descriptor behind in the daemon (counted in this process, which runs
// it), and no lease on the server.
func TestNoLeak(t *testing.T) {
	h := newHarness(t)
	conf := h.conf(dualStack)
	ctr, mac := h.ctr()
	cycle := func() {
		h.ok(call("ADD", ctr, "c1", conf))
		h.ok(call("DEL", ctr, "c1", conf))
	}
	cycle() // warm up: first-use allocations (netlink, the runtime's poller)
	baseG, baseFD := settle(t, 0, 0)
	for range 100 {
		cycle()
	}
	g, fd := settle(t, baseG, baseFD)
	t.Logf("goroutines %d → %d, descriptors %d → %d", baseG, g, baseFD, fd)
	if g > baseG || fd > baseFD {
		buf := make([]byte, 1<<20)
		t.Errorf("after 100 cycles: %d goroutines (was %d), %d descriptors (was %d)\n%s",
			g, baseG, fd, baseFD, buf[:runtime.Stack(buf, true)])
	}
	h.wantStateFiles(0)
	h.waitReleased(mac)
	h.srv.Wait(t, "no DHCPv6 lease", func(ls []dhcptest.Lease) bool { return len(dhcptest.Leases6(ls)) == 0 })
}

// settle waits (up to 10 s) for the goroutine and descriptor counts to
// come down to at most g and fd (0: just let them settle a moment) and
// returns them. Connection goroutines end asynchronously after the plugin
// hangs up, so counting at once would see them.
func settle(t *testing.T, g, fd int) (int, int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		time.Sleep(100 * time.Millisecond)
		ng, nfd := runtime.NumGoroutine(), countFDs(t)
		if g == 0 || (ng <= g && nfd <= fd) || time.Now().After(deadline) {
			return ng, nfd
		}
	}
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	plugintest.Must(t, err)
	return len(ents)
}

// wantStateFiles checks the number of persisted leases.
func (h *harness) wantStateFiles(n int) {
	h.t.Helper()
	if got := h.stateFiles(); got != n {
		h.t.Errorf("%d lease records on disk, want %d", got, n)
	}
}

// waitStateFiles waits for the number of persisted leases to become n.
func (h *harness) waitStateFiles(n int) {
	h.t.Helper()
	deadline := time.Now().Add(dhcptest.WaitTimeout)
	for h.stateFiles() != n {
		if time.Now().After(deadline) {
			h.t.Fatalf("%d lease records on disk, want %d", h.stateFiles(), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (h *harness) stateFiles() int {
	m, err := filepath.Glob(filepath.Join(h.stateDir, "*.lease"))
	plugintest.Must(h.t, err)
	return len(m)
}

// compact removes the printer's indentation.
func compact(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return b.String()
}

// withPrev adds a prevResult to a config.
func withPrev(conf, prev string) string {
	return conf[:len(conf)-1] + `,"prevResult":` + prev + "}"
}
