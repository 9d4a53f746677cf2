package firewall

import (
	"context"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/cniruntime"
	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/foreign"
)

// nftables-only hosts: the plugins find no iptables program (the test
// covers the directories holding them with an empty tmpfs in the plugins'
// own mount namespace, plugintest.HidingDir; the test itself still runs
// iptables and nft to build and read the host). There, by default
// (iptablesForwardAccepts "auto", foreign.Use), Podman's chain leaves no
// table of iptables-nft's and no x_tables compat expression, and DEL
// leaves the ruleset as it was; an iptables-nft table made by a program
// the plugins cannot see (kube-proxy's own iptables, in its container
// image) still gets the accepts, and the key forces either way.

type nftOnly struct {
	name string
	// build makes the host's own rules before ADD (nil: none).
	build func(t *testing.T, ns *netns.NS)
	// key is iptablesForwardAccepts ("" absent).
	key string
	// see: the plugins see the machine's iptables programs.
	see bool
	// protected: our accepts are in iptables-nft's FORWARD chains after
	// ADD.
	protected bool
	// drops: the container's forwarded traffic is dropped (the host's
	// DROP policy without our accepts).
	drops bool
}

var nftOnlyHosts = []nftOnly{
	{name: "no ruleset"},
	{name: "Debian's default inet filter", build: func(t *testing.T, ns *netns.NS) { hostfw.Load(t, ns, hostfw.DebianDefault) }},
	{name: "kube-proxy's iptables in its container", build: func(t *testing.T, ns *netns.NS) { hostfw.Commands(t, ns, hostfw.KubeProxyIptables) },
		protected: true},
	{name: "always", key: "always", protected: true},
	{name: "never, Docker before ADD", build: docker, key: "never", see: true, drops: true},
}

func TestNftablesOnlyHost(t *testing.T) {
	t.Parallel()
	for _, s := range nftOnlyHosts {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			nftablesOnly(t, s)
		})
	}
}

// hideIptables makes w's runtime start the plugins where no iptables
// program is reachable, and returns the runtime as it was.
func (w *world) hideIptables() *cniruntime.Runtime {
	w.t.Helper()
	saved := *w.rt
	var dirs []string
	for _, p := range foreign.IptablesPrograms(w.path()) {
		d, err := filepath.EvalSymlinks(filepath.Dir(p))
		plugintest.Must(w.t, err)
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	if len(dirs) == 0 {
		w.t.Fatal("no iptables program found to hide: the test would prove nothing")
	}
	hiding, env := plugintest.HidingDir(w.t, dirs)
	w.rt.Path, w.rt.Env = []string{hiding}, append(env, "PATH="+w.path())
	return &saved
}

// path is the PATH the plugins get: a runtime's usual one.
func (w *world) path() string {
	return "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
}

func nftablesOnly(t *testing.T, s nftOnly) {
	hostfw.Require(t)
	plugintest.RequirePlugin(t, "portmap")
	w := newWorld(t)
	host := w.th.NS
	if !s.see {
		w.hideIptables()
	}
	if s.build != nil {
		s.build(t, host)
	}
	tables, compat, theirs, saved := hostfw.Tables(t, host), hostfw.Compat(t, host), hostfw.Others(t, host), hostfw.IptablesSave(t, host)

	extra := ""
	if s.key != "" {
		extra = `,"iptablesForwardAccepts":"` + s.key + `"`
	}
	net1 := w.podman("net1", "br0", "10.72.0.0/24", "fd00:72::/64", extra)
	a := w.attachCaps(net1, "a", map[string]any{"portMappings": []map[string]any{{"hostPort": hostPort, "containerPort": 80, "protocol": "tcp"}}})
	if err := w.rt.CheckNetworkList(context.Background(), a.listConf, a.rtConf); err != nil {
		t.Errorf("CHECK: %v", err)
	}

	newTables := slices.DeleteFunc(hostfw.Tables(t, host), func(tb string) bool {
		return slices.Contains(tables, tb) || strings.HasPrefix(strings.Fields(tb)[1], nft.TablePrefix)
	})
	ours := hostfw.OursInOthers(t, host)
	if s.protected {
		// One shared rule per family, native expressions iptables-nft
		// reads back; the attachment's accepts are its claims.
		if ours != 2 {
			t.Errorf("%d rules of ours in iptables-nft's FORWARD chains, want the 2 shared ones (tables %q)", ours, hostfw.Tables(t, host))
		}
		saved := hostfw.IptablesSave(t, host)
		if n := strings.Count(saved, "-A FORWARD -m mark --mark 0x1000/0x1000 -m comment --comment \""+sharedTag+"\" -j ACCEPT\n"); n != 2 {
			t.Errorf("iptables-save shows the shared rule %d times, want once per family:\n%s", n, saved)
		}
		if strings.Contains(saved, a.owner().Tag()) {
			t.Errorf("iptables-save shows a rule of the attachment's own:\n%s", saved)
		}
		// The firewall's 2 per address, portmap's DNAT to each address.
		if n := foreignOwned(t, host, a.owner()); n != 6 {
			t.Errorf("%d claims of the attachment in table inet nftcni_accept, want 6", n)
		}
	} else {
		if len(newTables) > 0 || ours > 0 {
			t.Errorf("tables %q made, %d rules of ours in other owners' chains: want none", newTables, ours)
		}
		if slices.Contains(hostfw.Tables(t, host), "inet nftcni_accept") {
			t.Error("table inet nftcni_accept made: want it only where accepts are marked")
		}
	}
	if got := hostfw.Compat(t, host); !slices.Equal(got, compat) {
		t.Errorf("x_tables compat expressions %q, want %q (the host's own)", got, compat)
	}

	up4 := netip.MustParseAddr("192.0.2.1")
	pass := !s.drops
	tcp := func(name string, from *netns.NS, dial netip.AddrPort, to *netns.NS, listen netip.AddrPort) {
		t.Helper()
		if got := privtest.TCPRoundTrip(t, from, dial, to, listen); got.IsValid() != pass {
			t.Errorf("%s: connected %v, want %v", name, got.IsValid(), pass)
		}
	}
	out := netip.MustParseAddrPort("192.0.2.2:0")
	tcp("a → outside (masqueraded)", a.ns, out, w.outside, out)
	tcp("outside → host port → a", w.outside, netip.AddrPortFrom(up4, hostPort), a.ns, netip.AddrPortFrom(netip.MustParseAddr(a.v4), 80))

	w.detach(a)
	if n := owned(t, host, a.owner()); n != 0 {
		t.Errorf("%d objects of ours left", n)
	}
	after := slices.DeleteFunc(hostfw.Tables(t, host), func(tb string) bool { return strings.HasPrefix(strings.Fields(tb)[1], nft.TablePrefix) })
	before := slices.DeleteFunc(slices.Clone(tables), func(tb string) bool { return strings.HasPrefix(strings.Fields(tb)[1], nft.TablePrefix) })
	if !slices.Equal(after, before) {
		t.Errorf("after DEL the tables not ours are %q, were %q", after, before)
	}
	hostfw.Diff(t, "the other owners' nftables ruleset", theirs, hostfw.Others(t, host))
	hostfw.Diff(t, "iptables-save", saved, hostfw.IptablesSave(t, host))
}

// Docker installed after the container was attached on a host without
// iptables: its DROP policy cuts the container off (the rule's residual
// risk, plugins/firewall/README.md), CHECK — now seeing iptables — says
// the accepts are missing, and the firewall's ADD run again puts them
// back.
func TestIptablesInstalledLater(t *testing.T) {
	t.Parallel()
	hostfw.Require(t)
	plugintest.RequirePlugin(t, "portmap")
	w := newWorld(t)
	host := w.th.NS
	seeing := w.hideIptables()
	net1 := w.podman("net1", "br0", "10.73.0.0/24", "fd00:73::/64", "")
	a := w.attach(net1, "a")
	if n := hostfw.OursInOthers(t, host); n != 0 {
		t.Fatalf("%d rules of ours in other owners' chains before iptables exists", n)
	}
	docker(t, host)
	saved := hostfw.IptablesSave(t, host)
	out := netip.MustParseAddrPort("192.0.2.2:0")
	if privtest.TCPRoundTrip(t, a.ns, out, w.outside, out).IsValid() {
		t.Error("a → outside passed Docker's DROP policy without our accepts: the situation is not built")
	}
	w.rt = seeing
	err := w.rt.CheckNetworkList(context.Background(), a.listConf, a.rtConf)
	if err == nil || !strings.Contains(err.Error(), "ip filter FORWARD") {
		t.Errorf("CHECK after Docker started: %v, want the missing accepts in ip filter FORWARD", err)
	}
	// What `nftcni reload` does for each cached attachment: the
	// firewall's ADD again (the chain's portmap has no mapping here).
	prev := `{"cniVersion":"1.1.0","ips":[{"address":"` + a.v4 + `/24"},{"address":"` + a.v6 + `/64"}]}`
	w.th.OK(plugintest.Call{Command: "ADD", ContainerID: "a", Netns: a.ns.Path(), IfName: "eth0", Stdin: firewallConf("", prev)})
	if !privtest.TCPRoundTrip(t, a.ns, out, w.outside, out).IsValid() {
		t.Error("a → outside dropped after the firewall's ADD")
	}
	if err := w.rt.CheckNetworkList(context.Background(), a.listConf, a.rtConf); err != nil {
		t.Errorf("CHECK after the firewall's ADD: %v", err)
	}
	// DEL needs no rule: it removes the attachment's accepts wherever they
	// are, and only then reports a bad iptablesForwardAccepts.
	w.th.FailsWith("DEL with a bad iptablesForwardAccepts", plugintest.Cmd("DEL", a.ns, "a", firewallConf(`,"iptablesForwardAccepts":"off"`, prev)),
		`iptablesForwardAccepts "off": want "auto", "always" or "never"`)
	if n := hostfw.OursInOthers(t, host); n != 0 {
		t.Errorf("%d rules of ours in other owners' chains after the failed DEL", n)
	}
	w.detach(a)
	hostfw.Diff(t, "iptables-save", saved, hostfw.IptablesSave(t, host))
	if n := hostfw.OursInOthers(t, host); n != 0 {
		t.Errorf("%d rules of ours left in other owners' chains", n)
	}
}
