package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nftcni/nftcni/internal/firewalldtest"
	"github.com/nftcni/nftcni/internal/guest"
	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/ownerid"
)

// `nftcni reload` on a host whose ruleset was reloaded under running
// containers, built as users have it: a bridge network as Podman writes it
// (bridge with ipMasq and macspoofchk, portmap, firewall, tuning) and a
// ptp network with ipMasq and firewall, in a throwaway host namespace with
// an uplink to an "outside" namespace that has no route back to the
// container networks (so egress works only masqueraded). Containers: a1
// (host port 8080 → its 80), a2, b1 on the ptp network, and "stale", whose
// namespace is destroyed without DEL (its attachment stays in the cache).
//
// After each way of losing the ruleset — `nft flush ruleset`, an `nft -f`
// of a file that starts with `flush ruleset` (what nftables.service does on
// start, restart and reload), a firewalld reload — the test shows the
// containers cut off and CHECK failing, runs what the systemd units run
// (`nftcni reload`, `nftcni reload -watch-firewalld`), and then requires:
// port mappings (TCP from outside through the host port, and from the
// host's 127.0.0.1), egress (masqueraded) and container-to-container
// traffic work, CHECK passes, the stale attachment got nothing back, our
// state is what the ADDs made, other owners' objects are as they were,
// and a second reload changes nothing at all (`nft -a list ruleset`, with
// handles, byte for byte). The time from the ruleset's loss to a working
// port mapping is logged, not asserted.

const (
	hostUp    = "192.0.2.1"
	outsideIP = "192.0.2.2"
)

// reloadWorld is the host, its outside, and the attached containers.
type reloadWorld struct {
	t             *testing.T
	c             *cliEnv
	host, outside *netns.NS
	ctrs          map[string]*reloadCtr
	env           []string // for every nftcni command (the D-Bus bus)
}

type reloadCtr struct {
	id, network string
	ns          *netns.NS
	addr        netip.Addr
	caps        string
}

func (r *reloadCtr) owner() ownerid.Owner {
	return ownerid.Owner{Network: r.network, ContainerID: r.id, IfName: "eth0"}
}

// podmanConf and edgeConf are the two networks; extra is added to the
// firewall's and portmap's objects (nftablesAcceptChains).
func podmanConf(ipam, extra string) string {
	return fmt.Sprintf(`{"cniVersion":"1.0.0","name":"podman","plugins":[
 {"type":"bridge","bridge":"cni-podman0","isGateway":true,"ipMasq":true,"hairpinMode":true,"macspoofchk":true,
  "ipam":{"type":"host-local","dataDir":%q,"routes":[{"dst":"0.0.0.0/0"}],"ranges":[[{"subnet":"10.88.0.0/24","gateway":"10.88.0.1"}]]}},
 {"type":"portmap","capabilities":{"portMappings":true}%s},
 {"type":"firewall"%s},
 {"type":"tuning"}]}`, ipam, extra, extra)
}

func edgeConf(ipam, extra string) string {
	return fmt.Sprintf(`{"cniVersion":"1.1.0","name":"edge","plugins":[
 {"type":"ptp","ipMasq":true,"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.89.0.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}},
 {"type":"firewall"%s}]}`, ipam, extra)
}

const map8080 = `{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}`

// newReloadWorld builds the host; before is run in it before the first
// ADD (an administrator's ruleset, firewalld); extra goes into the
// firewall's and portmap's configs; env into every command.
func newReloadWorld(t *testing.T, extra string, env []string, before func(w *reloadWorld)) *reloadWorld {
	t.Helper()
	privtest.Require(t)
	hostfw.Require(t)
	c := newCLI(t)
	host, _ := plugintest.NewCtr(t, plugintest.NoDAD)
	outside, _ := plugintest.NewCtr(t)
	c.hostNS = host.Path()
	privtest.Wire(t, host, "up0", netip.MustParsePrefix(hostUp+"/24"), outside, "down0", netip.MustParsePrefix(outsideIP+"/24"))
	w := &reloadWorld{t: t, c: c, host: host, outside: outside, ctrs: map[string]*reloadCtr{},
		env: append([]string{"DBUS_SYSTEM_BUS_ADDRESS=" + privtest.NoSystemBus}, env...)}
	if before != nil {
		before(w)
	}
	ipam := t.TempDir()
	c.conf("10-podman.conflist", podmanConf(ipam, extra))
	c.conf("20-edge.conflist", edgeConf(ipam, extra))
	w.attach("a1", "podman", map8080)
	w.attach("a2", "podman", "")
	w.attach("b1", "edge", "")
	stale := w.attach("stale", "podman", `{"portMappings":[{"hostPort":8082,"containerPort":80,"protocol":"tcp"}]}`)
	if plugintest.NFTOwned(t, host, stale.owner()) == 0 {
		t.Fatal("the stale container's ADD left no nftables state")
	}
	return w
}

// run runs an nftcni command with the world's environment.
func (w *reloadWorld) run(env []string, args ...string) cliOut {
	w.t.Helper()
	saved := w.c.extra
	w.c.extra = append(slices.Clone(w.env), env...)
	defer func() { w.c.extra = saved }()
	return w.c.run(args...)
}

// attach adds a container ("stale": one whose namespace is then destroyed
// without DEL).
func (w *reloadWorld) attach(id, network, caps string) *reloadCtr {
	w.t.Helper()
	var ns *netns.NS
	if id == "stale" {
		var destroy func()
		ns, destroy = plugintest.DoomedCtr(w.t, plugintest.NoDAD)
		defer destroy()
		h := privtest.Handle(w.t, ns)
		plugintest.Must(w.t, h.SetUp("lo"))
	} else {
		ns, _ = plugintest.NewCtr(w.t, plugintest.NoDAD)
	}
	out := w.run([]string{"CAP_ARGS=" + caps}, "add", "-container-id", id, network, ns.Path())
	if out.status != 0 {
		w.t.Fatalf("add %s to %s: %s", id, network, out.stderr)
	}
	var res struct {
		IPs []struct {
			Address netip.Prefix `json:"address"`
		} `json:"ips"`
	}
	plugintest.Must(w.t, json.Unmarshal([]byte(out.stdout), &res))
	if len(res.IPs) == 0 {
		w.t.Fatalf("add %s: no address in %s", id, out.stdout)
	}
	r := &reloadCtr{id: id, network: network, ns: ns, addr: res.IPs[0].Address.Addr(), caps: caps}
	w.ctrs[id] = r
	return r
}

// check runs `nftcni check` for a live container; "" means it passed.
func (w *reloadWorld) check(id string) string {
	w.t.Helper()
	r := w.ctrs[id]
	out := w.run([]string{"CAP_ARGS=" + r.caps}, "check", "-container-id", id, r.network, r.ns.Path())
	if out.status == 0 {
		return ""
	}
	return strings.TrimSpace(out.stderr)
}

func (w *reloadWorld) checkAll(when string) {
	w.t.Helper()
	for _, id := range []string{"a1", "a2", "b1"} {
		if msg := w.check(id); msg != "" {
			w.t.Errorf("%s: CHECK of %s: %s", when, id, msg)
		}
	}
}

// reload runs `nftcni reload` (what nftcni-reload.service runs) and
// returns its summary line.
func (w *reloadWorld) reload() string {
	w.t.Helper()
	out := w.run(nil, "reload")
	if out.status != 0 {
		w.t.Fatalf("nftcni reload: status %d\n%s%s", out.status, out.stdout, out.stderr)
	}
	return strings.TrimSpace(out.stdout)
}

// trip is a TCP round trip; it returns the client address the server saw
// (invalid: no round trip).
func (w *reloadWorld) trip(from *netns.NS, dial netip.AddrPort, to *netns.NS, listen netip.AddrPort) netip.Addr {
	w.t.Helper()
	return privtest.TCPRoundTrip(w.t, from, dial, to, listen).Addr()
}

func ap(a string, port uint16) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(a), port)
}

// flow is traffic that must work: a TCP round trip, and the client
// address its server must see (invalid: any). lost marks the flows a
// loss of the ruleset must break, which the tests show before reloading.
type flow struct {
	what string
	run  func() netip.Addr
	want netip.Addr
	lost bool
}

func (w *reloadWorld) flows() []flow {
	a1, a2, b1 := w.ctrs["a1"], w.ctrs["a2"], w.ctrs["b1"]
	masq := netip.MustParseAddr(hostUp)
	trip := func(from *netns.NS, dial netip.AddrPort, to *netns.NS, listen netip.AddrPort) func() netip.Addr {
		return func() netip.Addr { return w.trip(from, dial, to, listen) }
	}
	return []flow{
		{"outside → host port 8080 → a1:80", trip(w.outside, ap(hostUp, 8080), a1.ns, ap("0.0.0.0", 80)), netip.MustParseAddr(outsideIP), true},
		{"host 127.0.0.1:8080 → a1:80", trip(w.host, ap("127.0.0.1", 8080), a1.ns, ap("0.0.0.0", 80)), netip.Addr{}, false},
		{"a1 → outside (masqueraded)", trip(a1.ns, ap(outsideIP, 0), w.outside, ap(outsideIP, 0)), masq, true},
		{"b1 (ptp) → outside (masqueraded)", trip(b1.ns, ap(outsideIP, 0), w.outside, ap(outsideIP, 0)), masq, false},
		{"a2 → b1 (container to container, across networks)", trip(a2.ns, netip.AddrPortFrom(b1.addr, 0), b1.ns, netip.AddrPortFrom(b1.addr, 0)), netip.Addr{}, false},
		{"b1 → a1 (container to container, across networks)", trip(b1.ns, netip.AddrPortFrom(a1.addr, 0), a1.ns, netip.AddrPortFrom(a1.addr, 0)), netip.Addr{}, false},
		{"a2 → a1 (same bridge)", trip(a2.ns, netip.AddrPortFrom(a1.addr, 0), a1.ns, netip.AddrPortFrom(a1.addr, 0)), a2.addr, false},
	}
}

// works requires every flow.
func (w *reloadWorld) works(when string) {
	w.t.Helper()
	for _, f := range w.flows() {
		got := f.run()
		switch {
		case !got.IsValid():
			w.t.Errorf("%s: %s: no TCP round trip", when, f.what)
		case f.want.IsValid() && got != f.want:
			w.t.Errorf("%s: %s: the server saw %s, want %s", when, f.what, got, f.want)
		}
	}
}

// cutOff requires the flows lost selects (nil: those marked lost) to
// fail, and CHECK of a1 to fail: what the ruleset's loss took away, so
// that a reload has something to bring back.
func (w *reloadWorld) cutOff(when string, lost func(flow) bool) {
	w.t.Helper()
	if lost == nil {
		lost = func(f flow) bool { return f.lost }
	}
	for _, f := range w.flows() {
		if !lost(f) {
			continue
		}
		if got := f.run(); got.IsValid() && (!f.want.IsValid() || got == f.want) {
			w.t.Errorf("%s: %s still works: the test would not show what reload brings back", when, f.what)
		}
	}
	if msg := w.check("a1"); msg == "" {
		w.t.Errorf("%s: CHECK of a1 passes", when)
	} else {
		w.t.Logf("%s: CHECK of a1: %s", when, msg)
	}
}

// waitMapping polls the port mapping from outside until it works (or 10 s
// pass) and returns when it did.
func (w *reloadWorld) waitMapping() time.Time {
	w.t.Helper()
	a1 := w.ctrs["a1"]
	var ln net.Listener
	plugintest.Must(w.t, a1.ns.Do(func() (err error) { ln, err = net.Listen("tcp", "0.0.0.0:80"); return err }))
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hi\n"))
			c.Close()
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ok := false
		_ = w.outside.Do(func() error {
			c, err := net.DialTimeout("tcp", hostUp+":8080", 100*time.Millisecond)
			if err != nil {
				return nil
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
			line, err := bufio.NewReader(c).ReadString('\n')
			ok = err == nil && line == "hi\n"
			return nil
		})
		if ok {
			return time.Now()
		}
		time.Sleep(5 * time.Millisecond)
	}
	w.t.Fatal("the port mapping did not work within 10 s")
	return time.Time{}
}

// ours is our state in the host, normalised for comparison: every object
// of our tables and every rule of ours in other owners' chains, one JSON
// line each, without handles, set elements sorted, sorted. localnet_prior
// holds route_localnet's value from before nftcni (see
// portmap.Reapply) and the foreign index rule handles, which differ after
// a re-creation: their values are left out.
func (w *reloadWorld) ours() string {
	w.t.Helper()
	var doc struct {
		Nftables []map[string]map[string]any `json:"nftables"`
	}
	plugintest.Must(w.t, json.Unmarshal([]byte(hostfw.Run(w.t, w.host, "", "nft", "-j", "-s", "list", "ruleset")), &doc))
	var lines []string
	for _, obj := range doc.Nftables {
		for kind, v := range obj {
			table, _ := v["table"].(string)
			if kind == "table" {
				table, _ = v["name"].(string)
			}
			if kind == "metainfo" {
				continue
			}
			if !strings.HasPrefix(table, nft.TablePrefix) {
				c, _ := v["comment"].(string)
				if _, ok := ownerid.ParseTag(c); kind != "rule" || !ok {
					continue
				}
			}
			delete(v, "handle")
			if elems, ok := v["elem"].([]any); ok {
				var keep []string
				for _, e := range elems {
					if name, _ := v["name"].(string); name == "localnet_prior" || name == "rules" && table == nft.TablePrefix+"foreign" {
						if m, ok := e.([]any); ok && len(m) == 2 {
							e = m[0]
						}
					}
					b, _ := json.Marshal(e)
					keep = append(keep, string(b))
				}
				slices.Sort(keep)
				v["elem"] = keep
			}
			b, _ := json.Marshal(map[string]any{kind: v})
			lines = append(lines, string(b))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// ruleset is `nft -a -s list ruleset`: everything, with handles.
func (w *reloadWorld) ruleset() string {
	w.t.Helper()
	return hostfw.Run(w.t, w.host, "", "nft", "-a", "-s", "list", "ruleset")
}

// afterReload is what every reload test requires once the reload ran:
// traffic, CHECK, nothing for the stale attachment (when the loss took its
// state: a reload neither re-creates nor removes it, GC does), our state
// as the ADDs made it (want), and a second reload that changes nothing.
func (w *reloadWorld) afterReload(summary, want string, staleLost bool, norm func(string) string) {
	w.t.Helper()
	w.t.Logf("reload: %s", summary)
	if !strings.Contains(summary, "3 attachments re-applied") || !strings.Contains(summary, "1 stale") {
		w.t.Errorf("summary %q: want 3 re-applied, 1 stale", summary)
	}
	w.works("after reload")
	w.checkAll("after reload")
	if n := plugintest.NFTOwned(w.t, w.host, w.ctrs["stale"].owner()); staleLost && n != 0 {
		w.t.Errorf("the stale attachment got %d nftables objects back", n)
	}
	hostfw.Diff(w.t, "our nftables state, re-created, against what the ADDs made", want, norm(w.ours()))
	before := w.ruleset()
	w.reload()
	hostfw.Diff(w.t, "the ruleset after a second reload", before, w.ruleset())
	if v := strings.TrimSpace(hostfw.Run(w.t, w.host, "", "cat", "/proc/sys/net/ipv4/conf/cni-podman0/route_localnet")); v != "1" {
		w.t.Errorf("route_localnet on cni-podman0 is %s after reload", v)
	}
}

// withoutStale is ours() as it is once the stale attachment's objects
// are left out: what a reload of the live attachments re-creates.
func (w *reloadWorld) withoutStale(s string) string {
	stale := w.ctrs["stale"].owner()
	addr := `"` + w.ctrs["stale"].addr.String() + `"` // counts4's key, in an elem's JSON
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		var obj map[string]map[string]any
		if json.Unmarshal([]byte(l), &obj) != nil {
			continue
		}
		for kind, v := range obj {
			if c, _ := v["comment"].(string); kind == "rule" && stale.OwnedBy(c) {
				lines[i] = ""
			}
			if elems, ok := v["elem"].([]any); ok {
				// The marked accepts' counts of elements and owners
				// carry no tag (several attachments may share one):
				// what is derived from the claims is left out, the
				// claims and their owners' counts are compared.
				untagged := v["table"] == markedTable && v["name"] == "counts"
				var keep []any
				for _, e := range elems {
					if e := e.(string); !strings.Contains(e, stale.Tag()) && !strings.Contains(e, stale.AttachmentHash()) && !strings.Contains(e, addr) &&
						!(untagged && strings.HasPrefix(e, `["`)) {
						keep = append(keep, e)
					}
				}
				v["elem"] = keep
				b, _ := json.Marshal(obj)
				lines[i] = string(b)
			}
		}
	}
	return strings.Join(slices.DeleteFunc(lines, func(l string) bool { return l == "" }), "\n")
}

// withoutForeign is ours() without our accepts for other owners' chains:
// our rules there, and the marked accepts' table (nft/foreign), whose
// claims stand for iptables-nft's FORWARD chains.
func withoutForeign(s string) string {
	lines := strings.Split(s, "\n")
	return strings.Join(slices.DeleteFunc(lines, func(l string) bool {
		var obj map[string]map[string]any
		if json.Unmarshal([]byte(l), &obj) != nil {
			return false
		}
		for kind, v := range obj {
			table, _ := v["table"].(string)
			if kind == "table" {
				table, _ = v["name"].(string)
			}
			if table == markedTable || kind == "rule" && !strings.HasPrefix(table, nft.TablePrefix) {
				return true
			}
		}
		return false
	}), "\n")
}

// markedTable is the marked accepts' table (nft/foreign).
const markedTable = nft.TablePrefix + "accept"

// hostOnly skips a reload test in the VM guest: TestReloadAfterRulesetFile
// takes the same paths through the kernel there (a flushed ruleset,
// re-created), and each test costs the emulated guest 12–16 s.
func hostOnly(t *testing.T) {
	if guest.InGuest() {
		t.Skip("TestReloadAfterRulesetFile covers the kernel's side in the VM; this one runs on the host")
	}
}

// TestReloadAfterFlush: `nft flush ruleset` under running containers, with
// Docker's `iptables -P FORWARD DROP` set before: everything of ours is
// gone; `nftcni reload` brings it back.
func TestReloadAfterFlush(t *testing.T) {
	hostOnly(t)
	w := newReloadWorld(t, "", nil, nil)
	// Docker's policy on the FORWARD chain our ADDs made: our accepts
	// there carry the traffic.
	hostfw.Run(t, w.host, "", "iptables", "-P", "FORWARD", "DROP")
	w.works("after ADD")
	w.checkAll("after ADD")
	added := w.withoutStale(w.ours())

	hostfw.Run(t, w.host, "", "nft", "flush", "ruleset")
	w.cutOff("after nft flush ruleset", nil)
	lost := time.Now()
	summary := w.reload()
	working := w.waitMapping()
	t.Logf("nft flush ruleset → working port mapping: %s (nftcni reload run right after the flush)", working.Sub(lost).Round(time.Millisecond))
	w.afterReload(summary, added, true, w.withoutStale)
}

// TestReloadAfterRulesetFile: the administrator's /etc/nftables.conf,
// which starts with `flush ruleset` and drops forwarded traffic it does
// not accept, loaded with `nft -f` as nftables.service loads it on start,
// restart and reload; the networks name its forward chain in
// nftablesAcceptChains. Loading it again under running containers cuts
// them off; `nftcni reload` brings them back without touching anything of
// the administrator's.
func TestReloadAfterRulesetFile(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "nftables.conf")
	plugintest.Must(t, os.WriteFile(conf, []byte("#!/usr/sbin/nft -f\n\nflush ruleset\n\n"+hostfw.AdminFilter), 0o644))
	load := func(w *reloadWorld) { hostfw.Run(t, w.host, "", "nft", "-f", conf) }
	w := newReloadWorld(t, `,"nftablesAcceptChains":["inet filter forward"]`, nil, load)
	w.works("after ADD")
	w.checkAll("after ADD")
	added := w.withoutStale(w.ours())

	load(w)
	w.cutOff("after nft -f "+conf, nil)
	admin := hostfw.Others(t, w.host)
	lost := time.Now()
	summary := w.reload()
	working := w.waitMapping()
	t.Logf("nft -f (flush ruleset + the admin's table) → working port mapping: %s (nftcni reload run right after)", working.Sub(lost).Round(time.Millisecond))
	w.afterReload(summary, added, true, w.withoutStale)
	// The administrator's objects are as the file made them, at their
	// handles; what is new is iptables-nft's FORWARD chains, which the
	// firewall and portmap create (as iptables-nft would, policy accept)
	// for their accepts, as their ADDs did.
	now := strings.Split(hostfw.Others(t, w.host), "\n")
	for _, l := range strings.Split(admin, "\n") {
		if !slices.Contains(now, l) {
			t.Errorf("the administrator's %s is gone or changed", l)
		}
	}
	for _, l := range now {
		if slices.Contains(strings.Split(admin, "\n"), l) {
			continue
		}
		var obj map[string]map[string]any
		plugintest.Must(t, json.Unmarshal([]byte(l), &obj))
		tb, ch := obj["table"], obj["chain"]
		switch {
		case tb != nil && tb["name"] == "filter" && (tb["family"] == "ip" || tb["family"] == "ip6"):
		case ch != nil && ch["table"] == "filter" && ch["name"] == "FORWARD" && ch["policy"] == "accept":
		default:
			t.Errorf("new besides iptables-nft's FORWARD chains: %s", l)
		}
	}
	if n := hostfw.OursInOthers(t, w.host); n == 0 {
		t.Error("no accept of ours in the administrator's forward chain after reload")
	}
}

// watcher is `nftcni reload -watch-firewalld` running (what
// nftcni-firewalld-reload.service runs), its output lines on a channel.
type watcher struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan error
}

func (w *reloadWorld) startWatcher() *watcher {
	w.t.Helper()
	saved := w.c.extra
	w.c.extra = slices.Clone(w.env)
	cmd := w.c.command("reload", "-watch-firewalld")
	w.c.extra = saved
	out, err := cmd.StdoutPipe()
	plugintest.Must(w.t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	plugintest.Must(w.t, cmd.Start())
	wa := &watcher{cmd: cmd, lines: make(chan string, 100), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			wa.lines <- sc.Text()
		}
		close(wa.lines)
		wa.done <- cmd.Wait()
	}()
	w.t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-wa.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
		if w.t.Failed() {
			w.t.Logf("watcher's stderr:\n%s", stderr.String())
		}
	})
	return wa
}

// next waits for the watcher's next line containing want.
func (wa *watcher) next(t *testing.T, want string) string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-wa.lines:
			if !ok {
				t.Fatalf("the watcher exited before printing %q", want)
			}
			if strings.Contains(l, want) {
				return l
			}
			t.Logf("watcher: %s", l)
		case <-timeout:
			t.Fatalf("the watcher printed no %q within 60 s", want)
		}
	}
}

// TestReloadFirewalld: where firewalld runs, the firewall plugin puts the
// containers' addresses into firewalld's zone trusted, and a firewalld
// reload drops them: the containers' egress is rejected and CHECK fails.
// The watcher the unit runs (`nftcni reload -watch-firewalld`) hears
// firewalld's Reloaded signal after a real `firewall-cmd --reload` and
// puts them back; it does the same when firewalld starts again. Everything
// else is as after the other reloads.
func TestReloadFirewalld(t *testing.T) {
	firewallCmd, ok := guest.FindProgram("firewall-cmd")
	firewalldtest.Require(t)
	if !ok {
		t.Fatal("firewall-cmd not found (Debian package firewalld)")
	}
	var fw *firewalldtest.Firewalld
	w := newReloadWorld(t, "", nil, func(w *reloadWorld) {
		fw = firewalldtest.Start(t, w.host)
		w.env = append(w.env, fw.Bus.Env())
	})
	sources := func() []string {
		s := fw.Sources(t, "trusted")
		slices.Sort(s)
		return s
	}
	want := []string{w.ctrs["a1"].addr.String() + "/32", w.ctrs["a2"].addr.String() + "/32", w.ctrs["b1"].addr.String() + "/32"}
	slices.Sort(want)
	if got := sources(); !slices.Contains(got, want[0]) || len(got) != 4 {
		t.Fatalf("sources of zone trusted after ADD: %v (want the 4 containers')", got)
	}
	w.works("after ADD")
	w.checkAll("after ADD")
	added := w.ours() // nothing of it is lost: firewalld keeps to its own table

	wa := w.startWatcher()
	wa.next(t, "watching firewalld")
	t.Logf("watcher: %s", wa.next(t, "reload (start of the watch)"))

	// The real command, on the test's bus.
	cmd := exec.Command(firewallCmd, "--reload")
	cmd.Env = append(os.Environ(), fw.Bus.Env())
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("firewall-cmd --reload: %v: %s", err, out)
	}
	returned := time.Now()
	summary := wa.next(t, "reload (firewalld reloaded)")
	reported := time.Now()
	// The sources the stale attachment claimed went with the reload and
	// stay gone.
	if got := sources(); !slices.Equal(got, want) {
		t.Errorf("sources of zone trusted after the watcher's reload: %v, want %v", got, want)
	}
	working := w.waitFlow("a1 → outside")
	mapped := w.waitMapping()
	ms := func(t time.Time) time.Duration { return t.Sub(start).Round(time.Millisecond) }
	t.Logf("from the start of firewall-cmd --reload: it returned after %s, the watcher's reload was done after %s, a1's egress worked after %s, the port mapping after %s",
		ms(returned), ms(reported), ms(working), ms(mapped))
	// firewalld's reload empties iptables-nft's tables (its iptables
	// flush, which is why Docker listens to the same signal): no FORWARD
	// chain is left, so no accept is needed there (nor created: an empty
	// filter table is not known to be iptables-nft's, see nft/foreign),
	// and CHECK, above, agrees. Our own tables were not touched.
	w.afterReload(summary, withoutForeign(added), false, withoutForeign)
	if got := sources(); !slices.Equal(got, want) {
		t.Errorf("sources of zone trusted after a second reload: %v, want %v", got, want)
	}

	// Without the watcher's reload, a firewalld reload cuts the
	// containers' egress off (shown with the watcher stopped). Their port
	// mappings keep working: our tables are not firewalld's, and
	// firewalld lets DNATed connections through.
	wa.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-wa.done; err != nil {
		t.Errorf("the watcher on SIGTERM: %v", err)
	}
	fw.Reload(t)
	w.cutOff("after a firewalld reload without the watcher", func(f flow) bool { return strings.HasPrefix(f.what, "a1 → outside") })

	// firewalld starting again (a restart outside systemd): the watcher
	// hears it take its bus name, waits until it serves, and reloads.
	wa = w.startWatcher()
	wa.next(t, "reload (start of the watch)")
	fw.Stop(t)
	fw = fw.Bus.StartFirewalld(t, w.host)
	wa.next(t, "reload (firewalld started)")
	if got := sources(); !slices.Equal(got, want) {
		t.Errorf("sources of zone trusted after firewalld started again: %v, want %v", got, want)
	}
	w.checkAll("after firewalld started again")
}

// waitFlow polls the flow whose name starts with what until it works (or
// 10 s pass) and returns when it did.
func (w *reloadWorld) waitFlow(what string) time.Time {
	w.t.Helper()
	for _, f := range w.flows() {
		if !strings.HasPrefix(f.what, what) {
			continue
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			if got := f.run(); got.IsValid() {
				return time.Now()
			}
		}
		w.t.Fatalf("%s did not work within 10 s", f.what)
	}
	w.t.Fatalf("no flow %q", what)
	return time.Time{}
}

// TestReloadWithoutTheNamedChain: after a bare `nft flush ruleset` the
// chain the networks name in nftablesAcceptChains is gone too, and ADD
// would fail for want of it: so does the reload of those attachments —
// each one whole (nothing of it half re-created), each named, exit status
// 1. Once the administrator's file is loaded again, a reload brings
// everything back.
func TestReloadWithoutTheNamedChain(t *testing.T) {
	hostOnly(t)
	conf := filepath.Join(t.TempDir(), "nftables.conf")
	plugintest.Must(t, os.WriteFile(conf, []byte("flush ruleset\n"+hostfw.AdminFilter), 0o644))
	load := func(w *reloadWorld) { hostfw.Run(t, w.host, "", "nft", "-f", conf) }
	w := newReloadWorld(t, `,"nftablesAcceptChains":["inet filter forward"]`, nil, load)
	added := w.withoutStale(w.ours())

	hostfw.Run(t, w.host, "", "nft", "flush", "ruleset")
	out := w.run(nil, "reload")
	t.Logf("reload without the named chain:\n%s%s", out.stdout, out.stderr)
	if out.status != 1 || !strings.Contains(out.stdout, "0 attachments re-applied, 0 with nothing to re-create, 1 stale (left to gc), 3 failed") {
		t.Errorf("reload without the named chain: status %d\n%s%s", out.status, out.stdout, out.stderr)
	}
	for _, id := range []string{"a1", "a2", "b1"} {
		r := w.ctrs[id]
		want := fmt.Sprintf("nftcni: reload: network %q, container %s, interface eth0: ", r.network, id)
		if !strings.Contains(out.stderr, want) || !strings.Contains(out.stderr, "chain inet filter forward (nftablesAcceptChains) not found") {
			t.Errorf("stderr does not name %s and the missing chain:\n%s", id, out.stderr)
		}
		if n := plugintest.NFTOwned(t, w.host, r.owner()); n != 0 {
			t.Errorf("%s: %d objects re-created by a failed reload", id, n)
		}
	}

	load(w)
	w.afterReload(w.reload(), added, true, w.withoutStale)
}

// unitDirectives reads a systemd unit file: "Section.Key" → values, in
// order.
func unitDirectives(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	plugintest.Must(t, err)
	out := map[string][]string{}
	section := ""
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "["):
			section = strings.Trim(l, "[]")
		default:
			k, v, _ := strings.Cut(l, "=")
			out[section+"."+k] = append(out[section+"."+k], v)
		}
	}
	return out
}

// TestReloadUnits: the units in contrib/systemd are bound to the services
// whose reloads lose the ruleset as docs/operations.md says, systemd
// accepts them (systemd-analyze verify, where installed), and their
// commands are ones this nftcni runs: the oneshot's against an empty
// cache (it then opens nothing), the watcher's until it finds no bus.
func TestReloadUnits(t *testing.T) {
	if guest.InGuest() {
		t.Skip("reads contrib/, which the VM guest does not have; runs on the host")
	}
	bin := filepath.Join(nftcniBin(t), "nftcni")
	for _, u := range []struct {
		file, service string
		want          map[string]string
		run           string // what the command prints (stdout+stderr)
	}{
		{"nftcni-reload.service", "nftables.service", map[string]string{
			"Unit.After": "nftables.service", "Unit.PartOf": "nftables.service", "Unit.ReloadPropagatedFrom": "nftables.service",
			"Install.WantedBy": "nftables.service", "Service.Type": "oneshot", "Service.RemainAfterExit": "yes",
			"Service.ExecStart": "/opt/cni/bin/nftcni reload", "Service.ExecReload": "/opt/cni/bin/nftcni reload",
		}, "nftcni reload: 0 attachments re-applied, 0 with nothing to re-create, 0 stale (left to gc), 0 failed"},
		{"nftcni-firewalld-reload.service", "firewalld.service", map[string]string{
			"Unit.After": "firewalld.service dbus.service", "Unit.PartOf": "firewalld.service", "Install.WantedBy": "firewalld.service",
			"Service.ExecStart": "/opt/cni/bin/nftcni reload -watch-firewalld", "Service.Restart": "on-failure",
		}, "nftcni: reload: watching firewalld: connecting to the system bus"},
	} {
		path := filepath.Join("..", "..", "contrib", "systemd", u.file)
		d := unitDirectives(t, path)
		for k, v := range u.want {
			if got := strings.Join(d[k], " "); got != v {
				t.Errorf("%s: %s=%q, want %q", u.file, k, got, v)
			}
		}
		// The command, with this build's binary, in no namespace but
		// the test's: an empty cache means nothing is opened.
		argv := strings.Fields(d["Service.ExecStart"][0])
		cmd := exec.Command(bin, argv[1:]...)
		cmd.Env = append(os.Environ(), "NFTCNI_CACHE_DIR="+t.TempDir(), "DBUS_SYSTEM_BUS_ADDRESS="+privtest.NoSystemBus, "CNI_PATH="+filepath.Dir(bin))
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), u.run) {
			t.Errorf("%s: %s printed %q, want %q", u.file, d["Service.ExecStart"][0], out, u.run)
		}
		analyze, err := exec.LookPath("systemd-analyze")
		if err != nil {
			t.Logf("systemd-analyze not installed: %s not verified by systemd", u.file)
			continue
		}
		// verify wants the command to exist: a copy naming this build.
		b, err := os.ReadFile(path)
		plugintest.Must(t, err)
		cp := filepath.Join(t.TempDir(), u.file)
		plugintest.Must(t, os.WriteFile(cp, []byte(strings.ReplaceAll(string(b), "/opt/cni/bin/nftcni", bin)), 0o644))
		if out, err := exec.Command(analyze, "verify", cp).CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", u.file, err, out)
		}
	}
}
