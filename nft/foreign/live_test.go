package foreign

import (
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
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

// iptablesSpelling is what the iptables programs insert, one by one at the
// head, for the same rules in the same order as Sync: fwWant, then pmWant.
func iptablesSpelling() string {
	fw, pm := fwMark.comment(), pmMark.comment()
	return `
iptables -I FORWARD -s 10.1.0.5/32 -m comment --comment "` + fw + `" -j ACCEPT
iptables -I FORWARD -d 10.1.0.5/32 -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment "` + fw + `" -j ACCEPT
ip6tables -I FORWARD -s fd00::5/128 -m comment --comment "` + fw + `" -j ACCEPT
ip6tables -I FORWARD -d fd00::5/128 -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment "` + fw + `" -j ACCEPT
iptables -I FORWARD -m conntrack --ctstate DNAT --ctproto tcp --ctreplsrc 10.1.0.5 --ctreplsrcport 80 -m comment --comment "` + pm + `" -j ACCEPT
ip6tables -I FORWARD -m conntrack --ctstate DNAT --ctproto udp --ctreplsrc fd00::5 --ctreplsrcport 53 -m comment --comment "` + pm + `" -j ACCEPT
`
}

// Our rules in iptables-nft's FORWARD chains read back, through
// iptables-save, exactly as the same rules made by the iptables programs;
// the chains Sync creates are iptables-nft's as far as Docker's commands
// are concerned, and after Remove only Docker's rules are left, as on a
// host where Docker ran alone.
func TestLiveIptablesSpelling(t *testing.T) {
	hostfw.Require(t)
	ours, theirs, dockerOnly := privtest.NewNS(t), privtest.NewNS(t), privtest.NewNS(t)

	syncAll(t, ours, Iptables, fwMark, fwWant)
	syncAll(t, ours, Iptables, pmMark, pmRepeat)
	hostfw.Commands(t, theirs, iptablesSpelling())
	want := hostfw.IptablesSave(t, theirs)
	hostfw.Diff(t, "iptables-save of our rules", want, hostfw.IptablesSave(t, ours))
	for _, prog := range []string{"iptables", "ip6tables"} {
		hostfw.Run(t, ours, "", prog, "-L", "-n", "-v") // fails the test if it fails
	}
	for _, r := range []string{
		`-A FORWARD -m conntrack --ctstate DNAT --ctproto 6 --ctreplsrc 10.1.0.5 --ctreplsrcport 80 -m comment --comment "` + pmMark.comment() + `" -j ACCEPT`,
		`-A FORWARD -d 10.1.0.5/32 -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment "` + fwMark.comment() + `" -j ACCEPT`,
	} {
		if !strings.Contains(want, r) {
			t.Errorf("iptables-save lacks %s:\n%s", r, want)
		}
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
	// we made, and our rules stay at the head.
	hostfw.Commands(t, ours, hostfw.Docker)
	hostfw.Commands(t, dockerOnly, hostfw.Docker)
	if got := hostfw.IptablesSave(t, ours); !strings.Contains(got, ":FORWARD DROP") || !strings.Contains(got, fwMark.comment()) {
		t.Errorf("after Docker started:\n%s", got)
	}
	update(t, ours, func(tx *nft.Tx) error {
		for _, ch := range Iptables {
			if _, err := Remove(tx, ch, fwMark); err != nil {
				return err
			}
		}
		// GC finds portmap's rules wherever they are.
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

// The iptables-nft tables Sync created go with the last rule in them —
// after the firewall's and portmap's rules of the attachment are both
// gone, not before — and the ruleset is empty again.
func TestLivePrune(t *testing.T) {
	hostfw.Require(t)
	ns := privtest.NewNS(t)
	syncAll(t, ns, Iptables, fwMark, fwWant)
	syncAll(t, ns, Iptables, pmMark, pmWant)
	update(t, ns, func(tx *nft.Tx) error {
		for _, ch := range Iptables {
			if _, err := Remove(tx, ch, fwMark); err != nil {
				return err
			}
		}
		return nil
	})
	if got := hostfw.Others(t, ns); !strings.Contains(got, `"name":"FORWARD"`) {
		t.Errorf("FORWARD chains gone while portmap's rules were in them:\n%s", got)
	}
	update(t, ns, func(tx *nft.Tx) error {
		_, err := RemoveEverywhere(tx, pmMark.Has)
		return err
	})
	// What stays is the index's own table, empty (index.go).
	want := "table inet nftcni_foreign {\n\tmap rules {\n\t\ttype ifname . ifname : ifname . ifname . ifname . ifname\n\t}\n}\n"
	if got := hostfw.Run(t, ns, "", "nft", "list", "ruleset"); got != want {
		t.Errorf("ruleset after the last removal:\n%s\nwant:\n%s", got, want)
	}
}

// The index finds the rules without reading the chain, and is only trusted
// while it is right: after the rules were deleted and inserted again (new
// handles), and after the table was deleted and made again (its rule
// handles start anew, so an old handle can name another rule with the same
// comment), Remove still removes exactly the mark's rules, and the table
// goes with the last of them.
func TestLiveIndex(t *testing.T) {
	hostfw.Require(t)
	fams := []struct{ fam, addr string }{{"ip", "10.1.0.5"}, {"ip6", "fd00::5"}}
	insert := func(t *testing.T, ns *netns.NS, fam, addr, comment string, n int) {
		for range n {
			hostfw.Run(t, ns, "", "nft", "insert", "rule", fam, "filter", "FORWARD", fam, "saddr", addr, "accept", "comment", `"`+comment+`"`)
		}
	}
	for _, tc := range []struct {
		name    string
		disturb func(t *testing.T, ns *netns.NS)
		indexed bool // Remove may use the index
		kept    bool // the tables hold more than their FORWARD chain: kept
		checks  bool // Check passes after the disturbance
	}{
		{"untouched", func(*testing.T, *netns.NS) {}, true, false, true},
		{"rules inserted again", func(t *testing.T, ns *netns.NS) {
			for _, f := range fams {
				out := hostfw.Run(t, ns, "", "nft", "-a", "list", "chain", f.fam, "filter", "FORWARD")
				n := 0
				for _, l := range strings.Split(out, "\n") {
					if strings.Contains(l, `"`+fwMark.comment()+`"`) {
						_, h, _ := strings.Cut(l, "# handle ")
						hostfw.Run(t, ns, "", "nft", "delete", "rule", f.fam, "filter", "FORWARD", "handle", strings.TrimSpace(h))
						n++
					}
				}
				insert(t, ns, f.fam, f.addr, fwMark.comment(), n)
			}
		}, false, false, true},
		{"iptables-save and iptables-restore", func(t *testing.T, ns *netns.NS) {
			// iptables-restore makes the comments x_tables comment
			// matches, and every rule gets a new handle.
			for _, p := range []string{"iptables", "ip6tables"} {
				hostfw.Run(t, ns, hostfw.Run(t, ns, "", p+"-save"), p+"-restore")
			}
			if save := hostfw.IptablesSave(t, ns); strings.Count(save, `"`+fwMark.comment()+`"`) != 4 {
				t.Fatalf("after the round trip:\n%s", save)
			}
		}, false, true, true}, // iptables-restore adds INPUT and OUTPUT
		{"table made again", func(t *testing.T, ns *netns.NS) {
			for _, f := range fams {
				hostfw.Run(t, ns, "", "nft", "delete", "table", f.fam, "filter")
				hostfw.Run(t, ns, "", "nft", "add", "table", f.fam, "filter")
				hostfw.Run(t, ns, "", "nft", "add", "chain", f.fam, "filter", "FORWARD", "{ type filter hook forward priority 0; policy accept; }")
				insert(t, ns, f.fam, f.addr, pmMark.comment(), 1)
				insert(t, ns, f.fam, f.addr, fwMark.comment(), 3) // handles the index names, and one more
			}
		}, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := privtest.NewNS(t)
			syncAll(t, ns, Iptables, pmMark, pmWant)
			syncAll(t, ns, Iptables, fwMark, fwWant)
			before := indexHits.Load()
			syncAll(t, ns, Iptables, fwMark, fwWant) // unchanged: found through the index
			if indexHits.Load() == before {
				t.Error("a repeated Sync did not find its rules through the index")
			}
			check := func() error {
				c, err := nft.Open(ns)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				return c.Update(func(tx *nft.Tx) error {
					for _, ch := range Iptables {
						if err := Check(tx, ch, fwMark, fwWant); err != nil {
							return err
						}
					}
					return nil
				})
			}
			reads := chainReads.Load()
			if err := check(); err != nil || chainReads.Load() != reads {
				t.Errorf("Check: %v; %d chains read, want none (the index)", err, chainReads.Load()-reads)
			}
			tc.disturb(t, ns)
			// A wrong index is not trusted: Check counts then.
			if err := check(); (err == nil) != tc.checks {
				t.Errorf("Check after the disturbance: %v, want it to pass: %v", err, tc.checks)
			}
			before = indexHits.Load()
			remove := func(m Mark) {
				update(t, ns, func(tx *nft.Tx) error {
					for _, ch := range Iptables {
						if _, err := Remove(tx, ch, m); err != nil {
							return err
						}
					}
					return nil
				})
			}
			remove(fwMark)
			if got := indexHits.Load() > before; got != tc.indexed {
				t.Errorf("Remove used the index: %v, want %v", got, tc.indexed)
			}
			for _, ch := range Iptables {
				var fw, pm int
				for _, r := range rulesOf(t, ns, ch) {
					fw += btoi(fwMark.Has(r.Comment))
					pm += btoi(pmMark.Has(r.Comment))
				}
				if fw != 0 || pm != 1 {
					t.Errorf("%s after removing the firewall's rules: %d of its rules, %d of portmap's (want 0, 1):\n%s",
						ch, fw, pm, hostfw.Run(t, ns, "", "nft", "list", "table", nft.FamilyName(ch.Table.Family), "filter"))
				}
			}
			remove(pmMark)
			if got := hostfw.Others(t, ns); (got != "") != tc.kept || strings.Contains(got, `"rule"`) {
				t.Errorf("iptables-nft's tables after the last rule (want them kept: %v):\n%s", tc.kept, got)
			}
			if els := nfttest.Owned(t, ns); len(els) != 0 {
				t.Errorf("index elements left: %v", els)
			}
		})
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
