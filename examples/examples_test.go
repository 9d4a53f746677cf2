package examples

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nftcni/nftcni/internal/dhcptest"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/ipam/dhcp"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/vmtest"
)

// Every example of this directory goes through what a user would do with
// it: `nftcni validate`, `nftcni add` into a throwaway container namespace
// (the plugins run in a throwaway "host" namespace, never the machine's),
// real traffic, `nftcni check`, `nftcni del` twice, and then nothing of the
// attachment may be left: no container link, no host link but the bridge,
// no nftables element of the network, no IPAM reservation, no cache entry.
//
// The files are embedded: the test VM that runs the ipvlan example has no
// source tree. The only edits made to them keep host paths inside the test
// (host-local's dataDir, the dhcp daemon's socket).

//go:embed *.conflist
var files embed.FS

func TestMain(m *testing.M) { plugintest.Main(m) }

// world is the host side an example runs against.
type world struct {
	host *netns.NS // where the plugins run
	// lan is the network behind the host's eth0 (macvlan, ipvlan, dhcp),
	// with lanAddr on it; nil for the bridge and ptp examples.
	lan     *netns.NS
	lanAddr netip.Addr
	// edit adjusts the loaded config for the test (sockets).
	edit func(conf map[string]any)
	// after checks what the world itself holds once DEL is done.
	after func(t *testing.T)
}

// attachment is one container of an example, with its ADD result.
type attachment struct {
	ns      *netns.NS
	capArgs string
	ips     []netip.Prefix
	gws     []netip.Addr
}

// ip returns the container's first address of the family of like.
func (a attachment) ip(t *testing.T, like netip.Addr) netip.Addr {
	t.Helper()
	for _, p := range a.ips {
		if p.Addr().Is4() == like.Is4() {
			return p.Addr()
		}
	}
	t.Fatalf("no address like %s in %v", like, a.ips)
	return netip.Addr{}
}

type example struct {
	file    string
	world   func(t *testing.T) world
	capArgs string // CAP_ARGS of the first container (the others get none)
	pods    int    // containers attached (default 1)
	vm      bool   // needs a kernel feature the host may lack: runs in the test VM
	traffic func(t *testing.T, w world, pods []attachment)
}

// addrPort is an address and port for TCPRoundTrip.
func addrPort(a string, port uint16) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(a), port)
}

// map8080 is a runtime's port mapping: host port 8080 to the container's 80.
const map8080 = `{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}`

func examples() []example {
	return []example{
		{file: "podman-bridge.conflist", world: plainHost, capArgs: map8080, traffic: hostTraffic},
		{file: "ptp.conflist", world: plainHost, capArgs: map8080, traffic: hostTraffic},
		{file: "macvlan.conflist", world: lanHost, traffic: lanTraffic},
		{file: "ipvlan.conflist", world: lanHost, traffic: lanTraffic, vm: true},
		{file: "dhcp.conflist", world: dhcpHost, traffic: lanTraffic},
		{
			file:  "dhcp-dual-stack.conflist",
			world: dhcpHost,
			traffic: func(t *testing.T, w world, pods []attachment) {
				lanTraffic(t, w, pods)
				w.lanAddr = dhcptest.ServerAddr6
				lanTraffic(t, w, pods)
			},
		},
		{
			file:    "k8s-node.conflist",
			world:   plainHost,
			pods:    2,
			capArgs: `{"portMappings":[{"hostPort":30080,"containerPort":8080,"protocol":"tcp"}]}`,
			traffic: func(t *testing.T, w world, pods []attachment) {
				gw := netip.MustParseAddr("10.244.1.1")
				for _, p := range pods {
					pingOK(t, p.ns, gw)
				}
				a, b := pods[0], pods[1]
				tcpSeen(t, "pod -> pod", a.ns, netip.AddrPortFrom(b.ip(t, gw), 0), b.ns, netip.AddrPortFrom(b.ip(t, gw), 0), a.ip(t, gw))
				tcpSeen(t, "pod -> node", a.ns, netip.AddrPortFrom(gw, 0), w.host, netip.AddrPortFrom(gw, 0), a.ip(t, gw))
				tcpSeen(t, "node 127.0.0.1:30080 -> pod :8080 (portmap)", w.host, addrPort("127.0.0.1", 30080), a.ns, addrPort("0.0.0.0", 8080), netip.Addr{})
			},
		},
		{file: "dual-stack.conflist", world: plainHost, capArgs: map8080, traffic: hostTraffic},
	}
}

// TestEveryExampleIsTested: a new example file without a test case fails.
func TestEveryExampleIsTested(t *testing.T) {
	entries, err := files.ReadDir(".")
	plugintest.Must(t, err)
	var tested []string
	for _, ex := range examples() {
		tested = append(tested, ex.file)
	}
	for _, e := range entries {
		if !slices.Contains(tested, e.Name()) {
			t.Errorf("%s has no test case in examples_test.go", e.Name())
		}
	}
}

func TestExamples(t *testing.T) {
	for _, ex := range examples() {
		t.Run(strings.TrimSuffix(ex.file, ".conflist"), func(t *testing.T) {
			if ex.vm {
				vmtest.Require(t)
			}
			privtest.Require(t)
			runExample(t, ex)
		})
	}
}

func runExample(t *testing.T, ex example) {
	w := ex.world(t)
	bin := plugintest.BinDir(t)
	dir := t.TempDir()
	confDir, cacheDir, ipamDir := filepath.Join(dir, "net.d"), filepath.Join(dir, "cache"), filepath.Join(dir, "ipam")
	plugintest.Must(t, os.MkdirAll(confDir, 0o755))

	raw, err := files.ReadFile(ex.file)
	plugintest.Must(t, err)
	var conf map[string]any
	plugintest.Must(t, json.Unmarshal(raw, &conf))
	network := conf["name"].(string)
	var bridge string
	for _, p := range conf["plugins"].([]any) {
		p := p.(map[string]any)
		if ipam, ok := p["ipam"].(map[string]any); ok && ipam["type"] == "host-local" {
			ipam["dataDir"] = ipamDir
		}
		if p["type"] == "bridge" {
			bridge, _ = p["bridge"].(string)
		}
	}
	if w.edit != nil {
		w.edit(conf)
	}
	edited, err := json.MarshalIndent(conf, "", "  ")
	plugintest.Must(t, err)
	plugintest.Must(t, os.WriteFile(filepath.Join(confDir, ex.file), edited, 0o644))

	cli := func(cmd, capArgs string, args ...string) (string, error) {
		argv := []string{cmd, "-host-netns", w.host.Path(), "-cache-dir", cacheDir}
		c := exec.Command(filepath.Join(bin, "nftcni"), append(argv, args...)...)
		c.Env = append(os.Environ(), "NETCONFPATH="+confDir, "CNI_PATH="+bin, "CNI_IFNAME=eth0", "CNI_ARGS=", "CAP_ARGS="+capArgs)
		var out, stderr bytes.Buffer
		c.Stdout, c.Stderr = &out, &stderr
		if err := c.Run(); err != nil {
			return out.String(), fmt.Errorf("nftcni %s %s: %v: %s", cmd, strings.Join(args, " "), err, stderr.String())
		}
		return out.String(), nil
	}

	if _, err := cli("validate", "", network); err != nil {
		t.Fatal(err)
	}
	hostBefore := plugintest.LinkNames(t, privtest.Handle(t, w.host))

	pods := make([]attachment, max(ex.pods, 1))
	var ctrHandles []func()
	for i := range pods {
		ctr, ch := plugintest.NewCtr(t, plugintest.NoDAD)
		if i == 0 {
			pods[i].capArgs = ex.capArgs
		}
		out, err := cli("add", pods[i].capArgs, network, ctr.Path())
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			IPs []struct {
				Address netip.Prefix `json:"address"`
				Gateway netip.Addr   `json:"gateway"`
			} `json:"ips"`
		}
		plugintest.Must(t, json.Unmarshal([]byte(out), &res))
		if len(res.IPs) == 0 {
			t.Fatalf("ADD result without addresses:\n%s", out)
		}
		pods[i].ns = ctr
		for _, ip := range res.IPs {
			pods[i].ips = append(pods[i].ips, ip.Address)
			pods[i].gws = append(pods[i].gws, ip.Gateway)
		}
		t.Logf("container %d: %v", i, pods[i].ips)
		ctrHandles = append(ctrHandles, func() { plugintest.WantLinks(t, ch, "lo") })
	}

	ex.traffic(t, w, pods)

	for _, p := range pods {
		if _, err := cli("check", p.capArgs, network, p.ns.Path()); err != nil {
			t.Error(err)
		}
	}
	for _, p := range pods {
		for range 2 { // DEL is idempotent
			if _, err := cli("del", p.capArgs, network, p.ns.Path()); err != nil {
				t.Error(err)
			}
		}
	}

	// Nothing left.
	for _, wantOnlyLo := range ctrHandles {
		wantOnlyLo()
	}
	for _, l := range plugintest.LinkNames(t, privtest.Handle(t, w.host)) {
		if !slices.Contains(hostBefore, l) && l != bridge {
			t.Errorf("host link %s left after DEL", l)
		}
	}
	if n := plugintest.NFTNetwork(t, w.host, network); n != 0 {
		t.Errorf("%d nftables elements of network %s left after DEL", n, network)
	}
	if r := plugintest.ReservationsOf(t, ipamDir, network); len(r) != 0 {
		t.Errorf("IPAM reservations left after DEL: %v", r)
	}
	if e, _ := os.ReadDir(filepath.Join(cacheDir, "results")); len(e) != 0 {
		t.Errorf("cache entries left after DEL: %v", e)
	}
	if w.after != nil {
		w.after(t)
	}
}

// plainHost is a host namespace with lo up (bridge and ptp make the rest).
func plainHost(t *testing.T) world {
	return world{host: plugintest.NewHost(t, "").NS}
}

// lanHost is a host whose eth0 leads to a LAN namespace with a router at
// 192.168.1.1/24: the parent link of the macvlan and ipvlan examples.
func lanHost(t *testing.T) world {
	w := world{host: plugintest.NewHost(t, "").NS, lanAddr: netip.MustParseAddr("192.168.1.1")}
	w.lan, _ = plugintest.NewCtr(t, plugintest.NoDAD)
	privtest.Wire(t, w.host, "eth0", netip.Prefix{}, w.lan, "lan0", netip.PrefixFrom(w.lanAddr, 24))
	return w
}

// dhcpHost is a host whose eth0 leads to a LAN with a DHCP server (dnsmasq,
// 10.99.0.1), with the nftcni dhcp daemon running in the host namespace.
func dhcpHost(t *testing.T) world {
	srv := dhcptest.Start(t)
	host := plugintest.NewHost(t, "")
	srv.Attach(t, host.NS, "eth0")
	dir := t.TempDir()
	sock, state := filepath.Join(dir, "dhcp.sock"), filepath.Join(dir, "state")
	d := exec.Command(filepath.Join(plugintest.BinDir(t), "dhcp"), "daemon", "-socketpath", sock, "-statedir", state)
	var stderr bytes.Buffer
	d.Stderr = &stderr
	plugintest.Must(t, netns.StartIn(host.NS, d))
	t.Cleanup(func() { d.Process.Kill(); d.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := dhcp.Dial(context.Background(), sock)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dhcp daemon not serving on %s: %v\n%s", sock, err, stderr.String())
		}
	}
	return world{
		host: host.NS, lan: srv.NS, lanAddr: dhcptest.ServerAddr,
		edit: func(conf map[string]any) {
			conf["plugins"].([]any)[0].(map[string]any)["ipam"].(map[string]any)["daemonSocketPath"] = sock
		},
		after: func(t *testing.T) {
			if m, _ := filepath.Glob(filepath.Join(state, "*.lease")); len(m) != 0 {
				t.Errorf("dhcp daemon lease records left after DEL: %v", m)
			}
		},
	}
}

// hostTraffic: the container pings each gateway of its ADD result (one per
// family) and reaches the host there over TCP from its own address; the
// host reaches the container's port 80 through host port 8080 (map8080).
func hostTraffic(t *testing.T, w world, pods []attachment) {
	ctr := pods[0]
	for _, gw := range ctr.gws {
		pingOK(t, ctr.ns, gw)
		tcpSeen(t, "container -> host at "+gw.String(), ctr.ns, netip.AddrPortFrom(gw, 0), w.host, netip.AddrPortFrom(gw, 0), ctr.ip(t, gw))
	}
	tcpSeen(t, "host 127.0.0.1:8080 -> container :80 (portmap)", w.host, addrPort("127.0.0.1", 8080), ctr.ns, addrPort("0.0.0.0", 80), netip.Addr{})
}

// lanTraffic: the container reaches the LAN's router with ICMP and TCP,
// from its own address (no NAT on a macvlan or ipvlan link).
func lanTraffic(t *testing.T, w world, pods []attachment) {
	ctr := pods[0]
	pingOK(t, ctr.ns, w.lanAddr)
	tcpSeen(t, "container -> LAN", ctr.ns, netip.AddrPortFrom(w.lanAddr, 0), w.lan, netip.AddrPortFrom(w.lanAddr, 0), ctr.ip(t, w.lanAddr))
}

func pingOK(t *testing.T, from *netns.NS, dst netip.Addr) {
	t.Helper()
	if !privtest.Ping(t, from, dst) {
		t.Errorf("ping %s: no reply", dst)
	}
}

// tcpSeen checks a TCP round trip; a valid src is the client address the
// server must see.
func tcpSeen(t *testing.T, what string, from *netns.NS, dial netip.AddrPort, to *netns.NS, listen netip.AddrPort, src netip.Addr) {
	t.Helper()
	seen := privtest.TCPRoundTrip(t, from, dial, to, listen)
	switch {
	case !seen.IsValid():
		t.Errorf("%s: no TCP round trip", what)
	case src.IsValid() && seen.Addr() != src:
		t.Errorf("%s: server saw %s, want %s", what, seen.Addr(), src)
	}
}
