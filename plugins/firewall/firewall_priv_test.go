package firewall

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/nft"
	fw "github.com/nftcni/nftcni/nft/firewall"
)

// TestForeignDropPolicy: the host has iptables-nft FORWARD chains with
// policy drop. A container behind the firewall plugin talks to the outside
// over IPv4 and IPv6 (its packets and the replies pass); new connections
// from outside do not (the reference accepts only replies); a container
// of a network without the firewall plugin gets nothing through. The
// container's accepts are its claims in table inet nftcni_accept, behind
// one shared rule of ours per FORWARD chain. After DEL, none of the
// container's claims are left, nor (it was the last) the shared rules;
// the foreign chains' own rules and policy stay.
func TestForeignDropPolicy(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	dropForward(t, w.th.NS)
	a := w.attach(w.network("net1", "br0", "10.50.0.0/24", "fd00:50::/64", fields("")), "a")
	b := w.attach(w.network("plain", "br9", "10.59.0.0/24", "fd00:59::/64", nil), "b")

	if n := foreignOwned(t, w.th.NS, a.owner()); n != 4 {
		t.Errorf("%d claims of the container in table inet nftcni_accept, want 4 (2 per address)", n)
	}
	if n := sharedRules(t, w.th.NS); n != 2 {
		t.Errorf("%d shared rules in the FORWARD chains, want 2 (1 per chain)", n)
	}
	traffic{
		{"a → outside v4", a.ns, w.outside, "192.0.2.2", true},
		{"a → outside v6", a.ns, w.outside, "2001:db8:1::2", true},
		{"outside → a v4 (new)", w.outside, a.ns, a.v4, false},
		{"outside → a v6 (new)", w.outside, a.ns, a.v6, false},
		{"b → outside v4 (no firewall plugin)", b.ns, w.outside, "192.0.2.2", false},
	}.expect(t)

	w.detach(a)
	if n := owned(t, w.th.NS, a.owner()); n != 0 {
		t.Errorf("%d objects of the container left after DEL", n)
	}
	want := []string{"someone else's rule", "someone else's rule"}
	if got := foreignRules(t, w.th.NS); !slices.Equal(got, want) {
		t.Errorf("FORWARD chains after DEL: %q, want %q", got, want)
	}
}

// TestSameBridgeIsolation: two networks with ingressPolicy same-bridge on
// br0 and br1, one without a policy on br2. Traffic between br0 and br1 is
// dropped both ways; on the same bridge, to and from the outside, and to
// and from br2 it passes. On a host without iptables-nft tables, ADD
// creates its FORWARD chains (policy accept) holding the shared rule that
// accepts what the containers' claims mark, ready for a DROP policy set
// later.
func TestSameBridgeIsolation(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	sb := fields(`,"ingressPolicy":"same-bridge"`)
	net1 := w.network("net1", "br0", "10.51.0.0/24", "fd00:51::/64", sb)
	a1, a2 := w.attach(net1, "a1"), w.attach(net1, "a2")
	c := w.attach(w.network("net2", "br1", "10.52.0.0/24", "fd00:52::/64", sb), "c")
	d := w.attach(w.network("net3", "br2", "10.53.0.0/24", "fd00:53::/64", fields("")), "d")

	traffic{
		{"a1 → a2 (same bridge) v4", a1.ns, a2.ns, a2.v4, true},
		{"a1 → a2 (same bridge) v6", a1.ns, a2.ns, a2.v6, true},
		{"a1 → c (other policed bridge) v4", a1.ns, c.ns, c.v4, false},
		{"a1 → c (other policed bridge) v6", a1.ns, c.ns, c.v6, false},
		{"c → a2 (other policed bridge) v4", c.ns, a2.ns, a2.v4, false},
		{"a1 → outside v4", a1.ns, w.outside, "192.0.2.2", true},
		{"outside → c v6", w.outside, c.ns, c.v6, true},
		{"a2 → d (bridge without policy) v4", a2.ns, d.ns, d.v4, true},
		{"d → c (bridge without policy) v6", d.ns, c.ns, c.v6, true},
	}.expect(t)
	if !tableExists(t, w.th.NS, ipFilter) || !tableExists(t, w.th.NS, ip6Filter) {
		t.Error("ADD did not create iptables-nft's filter tables")
	}
	if n := foreignOwned(t, w.th.NS, a1.owner()); n != 4 {
		t.Errorf("%d claims of a1 in table inet nftcni_accept, want 4", n)
	}
	if n := sharedRules(t, w.th.NS); n != 2 {
		t.Errorf("%d shared rules in the FORWARD chains, want 2", n)
	}

	// Once br0 has no policed container left, it is no longer isolated.
	w.detach(a1)
	if n := owned(t, w.th.NS, a1.owner()); n != 0 {
		t.Errorf("%d objects of a1 left after DEL", n)
	}
	if trip(t, a2.ns, c.ns, c.v4) {
		t.Error("a2 → c passed while a2 still polices br0")
	}
	w.detach(a2)
	if !trip(t, c.ns, w.outside, "192.0.2.2") {
		t.Error("c → outside failed after net1 was emptied")
	}
}

// TestIsolated: ingressPolicy isolated also isolates from other policed
// bridges (traffic within the bridge is seen by the forward hook only with
// bridge netfilter, which these namespaces do not have).
func TestIsolated(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a := w.attach(w.network("net1", "br0", "10.54.0.0/24", "fd00:54::/64", fields(`,"ingressPolicy":"isolated"`)), "a")
	c := w.attach(w.network("net2", "br1", "10.55.0.0/24", "fd00:55::/64", fields(`,"ingressPolicy":"same-bridge"`)), "c")
	traffic{
		{"a → c v4", a.ns, c.ns, c.v4, false},
		{"c → a v6", c.ns, a.ns, a.v6, false},
		{"a → outside v4", a.ns, w.outside, "192.0.2.2", true},
	}.expect(t)
	w.detach(a)
	w.detach(c)
	if n := owned(t, w.th.NS, a.owner()) + owned(t, w.th.NS, c.owner()); n != 0 {
		t.Errorf("%d objects left after DEL", n)
	}
}

// adminTable is our table, for rules the tests add as an administrator.
var adminTable = &nftables.Table{Family: nftables.TableFamilyINet, Name: fw.TableName}

// addAdminRule appends to admin chain name a rule dropping traffic from
// src (or, with an invalid src, a counter), with comment.
func addAdminRule(t *testing.T, w *world, name string, src netip.Addr, comment string) {
	t.Helper()
	c, err := nft.Open(w.th.NS)
	plugintest.Must(t, err)
	defer c.Close()
	exprs := []expr.Any{&expr.Counter{}}
	if src.IsValid() {
		exprs = []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{2}}, // NFPROTO_IPV4
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: src.AsSlice()},
			&expr.Verdict{Kind: expr.VerdictDrop},
		}
	}
	ch := &nftables.Chain{Table: adminTable, Name: name}
	plugintest.Must(t, c.Update(func(tx *nft.Tx) error {
		tx.Batch().AddRule(&nftables.Rule{Table: adminTable, Chain: ch, Exprs: exprs}, comment)
		return nil
	}))
}

func adminRules(t *testing.T, w *world, name string) []string {
	t.Helper()
	c, err := nft.Open(w.th.NS)
	plugintest.Must(t, err)
	defer c.Close()
	rs, err := c.Rules(&nftables.Chain{Table: adminTable, Name: name})
	plugintest.Must(t, err)
	var out []string
	for _, r := range rs {
		out = append(out, r.Comment)
	}
	return out
}

// TestAdminChain: the admin chain (default CNI-ADMIN, or the configured
// name) is created empty, consulted first — an administrator's drop there
// wins over the container's accepts, even with a foreign drop policy the
// container's rules otherwise get through — and kept with its rules when
// every container is gone.
func TestAdminChain(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	dropForward(t, w.th.NS)
	a := w.attach(w.network("net1", "br0", "10.56.0.0/24", "fd00:56::/64", fields("")), "a")
	b := w.attach(w.network("net2", "br1", "10.57.0.0/24", "fd00:57::/64", fields(`,"iptablesAdminChainName":"MY-ADMIN"`)), "b")
	for _, name := range []string{"CNI-ADMIN", "MY-ADMIN"} {
		if got := adminRules(t, w, name); len(got) != 0 {
			t.Errorf("admin chain %s: %q, want it created empty", name, got)
		}
	}

	addAdminRule(t, w, "CNI-ADMIN", netip.MustParseAddr(a.v4), "drop a")
	addAdminRule(t, w, "MY-ADMIN", netip.Addr{}, "count")
	traffic{
		{"a → outside v4 (admin drop)", a.ns, w.outside, "192.0.2.2", false},
		{"a → outside v6", a.ns, w.outside, "2001:db8:1::2", true},
		{"b → outside v4", b.ns, w.outside, "192.0.2.2", true},
	}.expect(t)

	// A new ADD does not touch the admin chains.
	e := w.attach(w.network("net1", "br0", "10.56.0.0/24", "fd00:56::/64", fields("")), "e")
	w.detach(a)
	w.detach(b)
	w.detach(e)
	for _, c := range []*ctr{a, b, e} {
		if n := owned(t, w.th.NS, c.owner()); n != 0 {
			t.Errorf("%s: %d objects left after DEL", c.id, n)
		}
	}
	if got := adminRules(t, w, "CNI-ADMIN"); !slices.Equal(got, []string{"drop a"}) {
		t.Errorf("CNI-ADMIN after DEL: %q", got)
	}
	if got := adminRules(t, w, "MY-ADMIN"); !slices.Equal(got, []string{"count"}) {
		t.Errorf("MY-ADMIN after DEL: %q", got)
	}
}

// firewallConf is a firewall config for network net1 with prevResult prev
// ("" for none).
func firewallConf(fieldsJSON, prev string) string {
	c := `{"cniVersion":"1.1.0","name":"net1","type":"firewall"` + fieldsJSON + `}`
	if prev != "" {
		c = plugintest.WithPrev(c, prev)
	}
	return c
}

// TestDel: DEL removes all of the attachment's objects — also without
// prevResult, with the namespace gone or CNI_NETNS empty — and can be
// repeated.
func TestDel(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"with prevResult", "without prevResult", "netns gone", "empty netns"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			dropForward(t, w.th.NS)
			sb := fields(`,"ingressPolicy":"same-bridge"`)
			a := w.attach(w.network("net1", "br0", "10.58.0.0/24", "fd00:58::/64", sb), "a")
			other := w.attach(w.network("net1", "br0", "10.58.0.0/24", "fd00:58::/64", sb), "other")
			if n := owned(t, w.th.NS, a.owner()); n == 0 {
				t.Fatal("no objects after ADD")
			}
			prev := ""
			if how == "with prevResult" {
				prev = `{"cniVersion":"1.1.0","ips":[{"address":"` + a.v4 + `/24"}],"interfaces":[{"name":"br0"}]}`
			}
			c := plugintest.Cmd("DEL", a.ns, "a", firewallConf(`,"ingressPolicy":"same-bridge"`, prev))
			c = plugintest.DelAs(t, how, a.ns, a.destroy, c)
			for range 2 {
				w.th.OK(c)
				if n := owned(t, w.th.NS, a.owner()); n != 0 {
					t.Errorf("%d objects left after DEL", n)
				}
			}
			// The other attachment (same addresses: host-local of
			// another data directory) keeps its 3 claims (owners4,
			// owners6, bridge_owners), its 2 addresses, the bridge's 2
			// lookup elements (now tagged with it), its marker, and in
			// table inet nftcni_accept its 4 claims and their 2 counts
			// (one per FORWARD chain); the shared rules stay.
			if n := owned(t, w.th.NS, other.owner()); n != 14 {
				t.Errorf("other attachment: %d objects, want 14", n)
			}
			if n := foreignOwned(t, w.th.NS, other.owner()); n != 4 {
				t.Errorf("other attachment: %d claims in table inet nftcni_accept, want 4", n)
			}
			if n := sharedRules(t, w.th.NS); n != 2 {
				t.Errorf("%d shared rules in the FORWARD chains after a's DEL, want 2", n)
			}
			if !trip(t, other.ns, w.outside, "192.0.2.2") {
				t.Error("other → outside failed after a's DEL")
			}
		})
	}
}

// gcConf is a firewall GC config for network name (valid nil: no list).
func gcConf(name string, valid []string) string {
	c := `{"cniVersion":"1.1.0","name":"` + name + `","type":"firewall"`
	if valid != nil {
		var items []string
		for _, id := range valid {
			items = append(items, `{"containerID":"`+id+`","ifname":"eth0"}`)
		}
		c += `,"cni.dev/valid-attachments":[` + strings.Join(items, ",") + `]`
	}
	return c + "}"
}

// TestGC: GC of a network collects what belongs to no valid attachment of
// it — with [] everything of the network — and nothing of another
// network; without a list nothing.
func TestGC(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	dropForward(t, w.th.NS)
	sb := fields(`,"ingressPolicy":"same-bridge"`)
	net1 := w.network("net1", "br0", "10.60.0.0/24", "fd00:60::/64", sb)
	a, b := w.attach(net1, "a"), w.attach(net1, "b")
	c := w.attach(w.network("net2", "br1", "10.61.0.0/24", "fd00:61::/64", sb), "c")
	count := func() [3]int {
		return [3]int{owned(t, w.th.NS, a.owner()), owned(t, w.th.NS, b.owner()), owned(t, w.th.NS, c.owner())}
	}
	before := count()
	if before[0] == 0 || before[1] == 0 || before[2] == 0 {
		t.Fatalf("after ADD: %v", before)
	}

	o := w.th.Exec(plugintest.Call{Command: "GC", Stdin: gcConf("net1", nil)})
	if o.Status != 0 || !strings.Contains(o.Stderr, "nothing collected") || count() != before {
		t.Errorf("GC without list: %d %q %q, objects %v (before %v)", o.Status, o.Stdout, o.Stderr, count(), before)
	}
	w.th.OK(plugintest.Call{Command: "GC", Stdin: gcConf("net1", []string{"b"})})
	// b, the bridge's remaining claimant, now carries the bridge's lookup
	// elements a carried: it has what a had.
	if got := count(); got[0] != 0 || got[1] != before[0] || got[2] != before[2] {
		t.Errorf("after GC(net1, [b]): %v (before %v)", got, before)
	}
	w.th.OK(plugintest.Call{Command: "GC", Stdin: gcConf("net1", []string{})})
	if got := count(); got[0] != 0 || got[1] != 0 || got[2] != before[2] {
		t.Errorf("after GC(net1, []): %v (before %v)", got, before)
	}
	// net2 still works, its bridge still isolated from br0's leftovers.
	if !trip(t, c.ns, w.outside, "192.0.2.2") {
		t.Error("c → outside failed after GC of net1")
	}
	e := w.th.Fail(plugintest.Call{Command: "GC", Stdin: strings.Replace(gcConf("net1", []string{}), "1.1.0", "1.0.0", 1)})
	if e.Code != 1 || e.Msg != "config version does not allow GC" {
		t.Errorf("GC on 1.0.0: %+v", e)
	}
}

// TestCheck: CHECK passes after ADD (through the runtime, with the cached
// prevResult), and fails, naming what is missing, once part of the
// attachment's state is gone.
func TestCheck(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	dropForward(t, w.th.NS)
	list := w.network("net1", "br0", "10.62.0.0/24", "fd00:62::/64", fields(`,"ingressPolicy":"same-bridge"`))
	a := w.attach(list, "a")
	if err := w.rt.CheckNetworkList(context.Background(), list, a.rtConf); err != nil {
		t.Fatalf("CHECK after ADD: %v", err)
	}
	prev := `{"cniVersion":"1.1.0","ips":[{"address":"` + a.v4 + `/24"},{"address":"` + a.v6 + `/64"}],"interfaces":[{"name":"br0"}]}`
	conf := firewallConf(`,"ingressPolicy":"same-bridge"`, prev)
	w.th.OK(plugintest.Cmd("CHECK", a.ns, "a", conf))

	for _, tt := range []struct {
		name, conf, want string
	}{
		{"no prevResult", firewallConf("", ""), "missing prevResult from earlier plugin"},
		{"other address", firewallConf("", `{"cniVersion":"1.1.0","ips":[{"address":"10.62.0.200/24"}]}`),
			"firewall: address 10.62.0.200: no element for this attachment in set inet nftcni_firewall owners4"},
		{"other admin chain", firewallConf(`,"iptablesAdminChainName":"NOPE"`, prev), "firewall: admin chain inet nftcni_firewall NOPE not found"},
		{"firewalld without a system bus", firewallConf(`,"backend":"firewalld"`, prev), noBus},
	} {
		if e := w.th.Fail(plugintest.Cmd("CHECK", a.ns, "a", tt.conf)); e.Msg != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, e.Msg, tt.want)
		}
	}

	// The shared rule vanishes from the foreign chain (an iptables
	// flush, say).
	nc, err := nft.Open(w.th.NS)
	plugintest.Must(t, err)
	defer nc.Close()
	forward := &nftables.Chain{Table: ipFilter, Name: "FORWARD"}
	plugintest.Must(t, nc.Update(func(tx *nft.Tx) error {
		rs, err := tx.Rules(forward)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r.Comment == sharedTag {
				tx.Batch().DeleteForeignRule(forward, r.Handle)
			}
		}
		return nil
	}))
	w.th.FailsWith("shared rule gone", plugintest.Cmd("CHECK", a.ns, "a", conf),
		"firewall: chain ip filter FORWARD: the rule accepting marked packets is missing")
	// A repeated ADD puts it back.
	w.th.OK(plugintest.Cmd("ADD", a.ns, "a", conf))
	w.th.OK(plugintest.Cmd("CHECK", a.ns, "a", conf))
	if n := sharedRules(t, w.th.NS); n != 2 {
		t.Errorf("%d shared rules in the FORWARD chains after the repeated ADD, want 2", n)
	}

	// The container's address vanishes from the set the mark chain looks
	// up (an nft flush of the set, say).
	from4 := &nftables.Set{Table: &nftables.Table{Family: nftables.TableFamilyINet, Name: "nftcni_accept"}, Name: "from4", KeyType: nftables.TypeIPAddr}
	plugintest.Must(t, nc.Update(func(tx *nft.Tx) error {
		tx.Batch().DeleteElements(from4, []nft.Element{{Key: netip.MustParseAddr(a.v4).AsSlice()}})
		return nil
	}))
	w.th.FailsWith("lookup element gone", plugintest.Cmd("CHECK", a.ns, "a", conf),
		"firewall: table inet nftcni_accept: set from4 lacks "+a.v4)
	w.th.OK(plugintest.Cmd("ADD", a.ns, "a", conf))
	w.th.OK(plugintest.Cmd("CHECK", a.ns, "a", conf))

	// An unknown ingressPolicy fails DEL, as in the reference — after
	// everything of the attachment is removed.
	w.th.FailsWith("DEL with an unknown policy", plugintest.Cmd("DEL", a.ns, "a", firewallConf(`,"ingressPolicy":"closed"`, prev)),
		`unknown ingress policy: "closed"`)
	if n := owned(t, w.th.NS, a.owner()); n != 0 {
		t.Errorf("%d objects left after the failed DEL", n)
	}
}

// TestAddPrintsPrevResult: ADD passes prevResult through unchanged, in the
// config's version (printed like every 1.x result: keys sorted, as the
// reference's printer does).
func TestAddPrintsPrevResult(t *testing.T) {
	t.Parallel()
	th := plugintest.NewHost(t, "firewall")
	ctr, _ := plugintest.NewCtr(t)
	for _, tt := range []struct{ version, prev, want string }{
		{"1.0.0",
			`{"cniVersion":"1.0.0","interfaces":[{"name":"br0","mac":"02:00:00:00:00:01"},{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"10.63.0.2/24","gateway":"10.63.0.1","interface":1}],"routes":[{"dst":"0.0.0.0/0","gw":"10.63.0.1"}],"dns":{"nameservers":["10.63.0.1"]}}`,
			`{
    "cniVersion": "1.0.0",
    "dns": {
        "nameservers": [
            "10.63.0.1"
        ]
    },
    "interfaces": [
        {
            "mac": "02:00:00:00:00:01",
            "name": "br0"
        },
        {
            "name": "eth0",
            "sandbox": "/x"
        }
    ],
    "ips": [
        {
            "address": "10.63.0.2/24",
            "gateway": "10.63.0.1",
            "interface": 1
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0",
            "gw": "10.63.0.1"
        }
    ]
}`},
		{"0.4.0",
			`{"cniVersion":"0.4.0","ips":[{"version":"6","address":"fd00:63::2/64"}]}`,
			`{
    "cniVersion": "0.4.0",
    "ips": [
        {
            "version": "6",
            "address": "fd00:63::2/64"
        }
    ],
    "dns": {}
}`},
	} {
		conf := plugintest.WithPrev(`{"cniVersion":"`+tt.version+`","name":"net1","type":"firewall"}`, tt.prev)
		if out := th.OK(plugintest.Cmd("ADD", ctr, "p"+strings.ReplaceAll(tt.version, ".", ""), conf)); strings.TrimSpace(out) != tt.want {
			t.Errorf("%s: printed\n%s\nwant\n%s", tt.version, out, tt.want)
		}
	}
}
