package foreign

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/ownerid"
)

// Live tests run against the kernel, each in throwaway namespaces, and read
// the result back with the iptables and nft programs.

var (
	owner    = ownerid.Owner{Network: "net1", ContainerID: "c0ffee", IfName: "eth0"}
	fwMark   = Mark{Owner: owner}
	pmMark   = Mark{Owner: owner, Component: "portmap"}
	v4, v6   = netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00::5")
	fwWant   = []Accept{From(v4), RepliesTo(v4), From(v6), RepliesTo(v6)}
	pmWant   = []Accept{DNATedTo(unix.IPPROTO_TCP, netip.AddrPortFrom(v4, 80)), DNATedTo(unix.IPPROTO_UDP, netip.AddrPortFrom(v6, 53))}
	pmRepeat = append(pmWant, pmWant[0]) // a duplicate gets one rule
)

func update(t *testing.T, ns *netns.NS, fn func(tx *nft.Tx) error) {
	t.Helper()
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func syncAll(t *testing.T, ns *netns.NS, chains []Chain, m Mark, want []Accept) {
	t.Helper()
	update(t, ns, func(tx *nft.Tx) error {
		for _, ch := range chains {
			if err := Sync(tx, ch, m, want, false); err != nil {
				return err
			}
		}
		return nil
	})
}

// iptablesSpelling is what the iptables programs insert for the rules Sync
// leaves in iptables-nft's FORWARD chains for any number of attachments:
// the shared rule, one per family (marked.go).
func iptablesSpelling() string {
	return `
iptables -I FORWARD -m mark --mark 0x1000/0x1000 -m comment --comment "` + sharedComment() + `" -j ACCEPT
ip6tables -I FORWARD -m mark --mark 0x1000/0x1000 -m comment --comment "` + sharedComment() + `" -j ACCEPT
`
}

// Our rules in iptables-nft's FORWARD chains read back, through
// iptables-save, exactly as the same rules made by the iptables programs:
// the shared rule, once per family however many attachments and
// components have accepts; the chains Sync creates are iptables-nft's as
// far as Docker's commands are concerned, and after Remove only Docker's
// rules are left, as on a host where Docker ran alone.
func TestLiveIptablesSpelling(t *testing.T) {
	hostfw.Require(t)
	ours, theirs, dockerOnly := privtest.NewNS(t), privtest.NewNS(t), privtest.NewNS(t)

	other := Mark{Owner: ownerid.Owner{Network: "net1", ContainerID: "beef", IfName: "eth0"}}
	syncAll(t, ours, Iptables, fwMark, fwWant)
	syncAll(t, ours, Iptables, pmMark, pmRepeat)
	syncAll(t, ours, Iptables, other, []Accept{From(netip.MustParseAddr("10.1.0.6")), From(netip.MustParseAddr("fd00::6"))})
	hostfw.Commands(t, theirs, iptablesSpelling())
	want := hostfw.IptablesSave(t, theirs)
	hostfw.Diff(t, "iptables-save of our rules", want, hostfw.IptablesSave(t, ours))
	for _, prog := range []string{"iptables", "ip6tables"} {
		hostfw.Run(t, ours, "", prog, "-L", "-n", "-v") // fails the test if it fails
	}
	if n := strings.Count(want, sharedLine()); n != 2 {
		t.Errorf("iptables-save prints the shared rule %d times, want 2:\n%s", n, want)
	}
	update(t, ours, func(tx *nft.Tx) error {
		for _, ch := range Iptables {
			if err := Check(tx, ch, fwMark, fwWant); err != nil {
				return err
			}
			if err := Check(tx, ch, pmMark, pmRepeat); err != nil {
				return err
			}
		}
		return nil
	})

	// Docker starts after the containers: its commands work on the chains
	// we made (it inserts its DOCKER-USER jump above ours), and the
	// shared rule stays, once per family.
	hostfw.Commands(t, ours, hostfw.Docker)
	hostfw.Commands(t, dockerOnly, hostfw.Docker)
	got := hostfw.IptablesSave(t, ours)
	if !strings.Contains(got, ":FORWARD DROP") || strings.Count(got, sharedLine()) != 2 {
		t.Errorf("after Docker started, want policy DROP and the shared rule in each family:\n%s", got)
	}
	update(t, ours, func(tx *nft.Tx) error {
		for _, ch := range Iptables {
			for _, m := range []Mark{fwMark, other} {
				if _, err := Remove(tx, ch, m); err != nil {
					return err
				}
			}
		}
		// GC finds portmap's accepts wherever they are.
		_, err := RemoveEverywhere(tx, Of("portmap", owner.OwnedBy))
		return err
	})
	hostfw.Diff(t, "iptables-save after removal", hostfw.IptablesSave(t, dockerOnly), hostfw.IptablesSave(t, ours))
}

// An administrator's chains get native rules, as nft lists them, only for
// the addresses of their family; Check counts them; a chain that does not
// exist fails Sync and Check; removal leaves the administrator's ruleset
// as it was.
func TestLiveNamedChains(t *testing.T) {
	hostfw.Require(t)
	ns := privtest.NewNS(t)
	hostfw.Load(t, ns, hostfw.AdminFilter)
	hostfw.Load(t, ns, "table ip fw { chain forwarding { type filter hook forward priority 10; policy drop; }; }")
	before := hostfw.Others(t, ns)
	inet, ip := mustParse(t, "inet filter forward"), mustParse(t, "ip fw forwarding")
	syncAll(t, ns, []Chain{inet, ip}, fwMark, fwWant)
	syncAll(t, ns, []Chain{inet, ip}, pmMark, pmWant)

	fw, pm := fwMark.comment(), pmMark.comment()
	want := map[string][]string{
		"inet filter forward": {
			`ip6 saddr fd00::5 udp sport 53 ct status dnat accept comment "` + pm + `"`,
			`ip6 daddr fd00::5 udp dport 53 ct status dnat accept comment "` + pm + `"`,
			`ip saddr 10.1.0.5 tcp sport 80 ct status dnat accept comment "` + pm + `"`,
			`ip daddr 10.1.0.5 tcp dport 80 ct status dnat accept comment "` + pm + `"`,
			`ip6 daddr fd00::5 ct state established,related accept comment "` + fw + `"`,
			`ip6 saddr fd00::5 accept comment "` + fw + `"`,
			`ip daddr 10.1.0.5 ct state established,related accept comment "` + fw + `"`,
			`ip saddr 10.1.0.5 accept comment "` + fw + `"`,
			`ct state invalid drop comment "admin: invalid"`,
			`iifname "wg0" accept comment "admin: the VPN may forward"`,
		},
		"ip fw forwarding": {
			`ip saddr 10.1.0.5 tcp sport 80 ct status dnat accept comment "` + pm + `"`,
			`ip daddr 10.1.0.5 tcp dport 80 ct status dnat accept comment "` + pm + `"`,
			`ip daddr 10.1.0.5 ct state established,related accept comment "` + fw + `"`,
			`ip saddr 10.1.0.5 accept comment "` + fw + `"`,
		},
	}
	for chain, rules := range want {
		got := listRules(t, ns, chain)
		hostfw.Diff(t, "chain "+chain, strings.Join(rules, "\n"), strings.Join(got, "\n"))
	}
	update(t, ns, func(tx *nft.Tx) error {
		for _, ch := range []Chain{inet, ip} {
			if err := Check(tx, ch, fwMark, fwWant); err != nil {
				return err
			}
			if err := Check(tx, ch, pmMark, pmWant); err != nil {
				return err
			}
		}
		return nil
	})

	missing := mustParse(t, "inet filter nope")
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wantErr := "chain inet filter nope (nftablesAcceptChains) not found"
	if err := c.Update(func(tx *nft.Tx) error { return Sync(tx, missing, fwMark, fwWant, false) }); err == nil || err.Error() != wantErr {
		t.Errorf("Sync into a missing chain: %v, want %q", err, wantErr)
	}
	if err := Check(c, missing, fwMark, fwWant); err == nil || err.Error() != wantErr {
		t.Errorf("Check of a missing chain: %v, want %q", err, wantErr)
	}

	update(t, ns, func(tx *nft.Tx) error {
		for _, ch := range []Chain{inet, ip, missing} {
			if _, err := Remove(tx, ch, fwMark); err != nil {
				return err
			}
			if _, err := Remove(tx, ch, pmMark); err != nil {
				return err
			}
		}
		return nil
	})
	hostfw.Diff(t, "the administrator's ruleset", before, hostfw.Others(t, ns))
	if got := listRules(t, ns, "inet filter forward"); len(got) != 2 {
		t.Errorf("inet filter forward after removal: %q", got)
	}
}

func mustParse(t *testing.T, s string) Chain {
	t.Helper()
	c, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// listRules is chain's rules as `nft list chain` prints them.
func listRules(t *testing.T, ns *netns.NS, chain string) []string {
	t.Helper()
	out := hostfw.Run(t, ns, "", "nft", append([]string{"list", "chain"}, strings.Fields(chain)...)...)
	var rules []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "table ") || strings.HasPrefix(l, "chain ") || strings.HasPrefix(l, "type ") || l == "}" {
			continue
		}
		rules = append(rules, l)
	}
	return rules
}

// The iptables-nft tables Sync created go with the shared rule, after the
// last accept of any attachment and component is removed — not before —
// and what stays are our own tables, empty, which `nftcni handback`
// (nft.Conn.RemoveEmptyTables) deletes, leaving the ruleset empty.
func TestLivePrune(t *testing.T) {
	hostfw.Require(t)
	ns := privtest.NewNS(t)
	syncAll(t, ns, Iptables, fwMark, fwWant)
	syncAll(t, ns, Iptables, pmMark, pmWant)
	removeAll(t, ns, fwMark)
	expectShared(t, ns, 1, 1) // portmap's accepts are still there
	if got := readMarked(t, ns); len(got.sets["from4"])+len(got.sets["replies6"]) != 0 || len(got.sets["dnat4"]) != 1 {
		t.Errorf("after removing the firewall's accepts: %v", got.sets)
	}
	update(t, ns, func(tx *nft.Tx) error {
		_, err := RemoveEverywhere(tx, pmMark.Has)
		return err
	})
	if got := hostfw.Tables(t, ns); !slices.Equal(got, []string{"inet nftcni_accept", "inet nftcni_foreign"}) {
		t.Errorf("tables after the last removal: %q, want only our own", got)
	}
	if got := readMarked(t, ns); len(got.sets)+len(got.claims)+len(got.counts) != 0 {
		t.Errorf("table inet %s after the last removal: %+v", markTable.Name, got)
	}
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.RemoveEmptyTables(); err != nil {
		t.Fatal(err)
	}
	if got := hostfw.Run(t, ns, "", "nft", "list", "ruleset"); got != "" {
		t.Errorf("ruleset after handback:\n%s", got)
	}
}

func rulesOf(t *testing.T, ns *netns.NS, ch Chain) []nft.Rule {
	t.Helper()
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rules, err := c.Rules(ch.nft())
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
