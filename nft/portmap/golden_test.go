package portmap

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/foreign"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
	"github.com/nftcni/nftcni/ownerid"
)

// The golden files pin the exact netlink messages of each operation, each
// annotated with the nft command sending the same request. Regenerate
// with `go test ./nft/portmap -run Golden -update` and review the diff.

var sample, other = nfttest.Sample, nfttest.Other

// The package's tests are about what Setup does where iptables can be
// used and, pinned otherwise per spec (Spec.iptablesReachable), where it
// cannot (foreign.Use): the machine they run on, with or without an
// iptables program, must not decide which. The pin is set once, before
// any test runs; no test changes it.
func TestMain(m *testing.M) {
	foreign.IptablesReachable = func() bool { return true }
	os.Exit(m.Run())
}

const tbl = "ip nftcni_portmap"

// web is sample's spec: tcp 8080 → 10.88.0.5:80 with hairpin and
// localhost masquerade through cni0.
var web = Spec{
	Owner: sample,
	Mappings: []Mapping{{HostPort: 8080, Proto: unix.IPPROTO_TCP,
		Target: netip.MustParseAddrPort("10.88.0.5:80")}},
	Hairpin:   []netip.Prefix{netip.MustParsePrefix("10.88.0.5/24")},
	Localhost: []netip.Addr{netip.MustParseAddr("10.88.0.5")},
	Localnet:  []string{"cni0"},
}

// Golden tests run Setup and Teardown on a fake's namespace handle
// (nfttest.Fake.NS), which is no namespace, and must never touch the
// sysctls of the machine's. Tests that get that far put fake ones under
// their handle (fakeSysctls), and each test has its own handle, so they
// run in parallel; one that does not fails (the handle has no file to
// switch to: "bad file descriptor"). Live tests pass their own namespace.

// sysctlFake is a test's route_localnet sysctls: vals, and the log of
// writes ("name=value").
type sysctlFake struct {
	t      *testing.T
	vals   map[string]string
	writes []string
	// refuse, when set, fails every write with it.
	refuse error
}

// fakeSysctls makes the route_localnet sysctls vals for the namespace
// handles the test puts them under (on, run).
func fakeSysctls(t *testing.T, vals map[string]string) *sysctlFake {
	return &sysctlFake{t: t, vals: vals}
}

// on puts s under ns for the rest of the test, and returns ns.
func (s *sysctlFake) on(ns *netns.NS) *netns.NS {
	sysctlFakes.Store(ns, sysctlAccess{
		get: func(_ *netns.NS, name string) (string, error) {
			v, ok := s.vals[name]
			if !ok {
				return "", fs.ErrNotExist
			}
			return v, nil
		},
		set: func(_ *netns.NS, name, value string) error {
			if s.refuse != nil {
				return s.refuse
			}
			if _, ok := s.vals[name]; !ok {
				return fs.ErrNotExist
			}
			s.vals[name] = value
			s.writes = append(s.writes, name+"="+value)
			return nil
		},
	})
	s.t.Cleanup(func() { sysctlFakes.Delete(ns) })
	return ns
}

// run is nfttest.Run with s under the fake's namespace handle.
func (s *sysctlFake) run(st nfttest.State, op func(ns *netns.NS) error) *nfttest.Fake {
	s.t.Helper()
	return nfttest.Run(s.t, st, func(ns *netns.NS) error { return op(s.on(ns)) })
}

const cni0Localnet = "net/ipv4/conf/cni0/route_localnet"

func wantWrites(t *testing.T, got *sysctlFake, want ...string) {
	t.Helper()
	if !slices.Equal(got.writes, want) {
		t.Errorf("sysctl writes %q, want %q", got.writes, want)
	}
}

// localnetNote is the element of o's localnet record for cni0, as in nft
// commands; priorNote is cni0's entry in localnet_prior.
func localnetNote(o ownerid.Owner, withComment bool) string {
	n := `"cni0" . "` + o.AttachmentHash() + `"`
	if withComment {
		n += ` comment "` + o.Tag() + `"`
	}
	return `{ ` + n + ` }`
}

const priorNote = `{ "cni0" : 0x00000000 comment "` + priorComment + `" }`

var staticNotes4 = []string{
	`nft add table ip nftcni_portmap`,
	`nft add map ip nftcni_portmap hostip_ports { type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service; }`,
	`nft add map ip nftcni_portmap ports { type inet_proto . inet_service : ipv4_addr . inet_service; }`,
	`nft add map ip nftcni_portmap hairpins { type ipv4_addr : verdict; }`,
	`nft add set ip nftcni_portmap hairpin_local { type ipv4_addr . ipv4_addr; }`,
	`nft add set ip nftcni_portmap localhost { type ipv4_addr; }`,
	`nft add set ip nftcni_portmap localnet { type ifname . ifname; }`,
	`nft add map ip nftcni_portmap localnet_prior { type ifname : mark; }`,
	nfttest.OwnersSetNote(tbl),
	`nft add chain ip nftcni_portmap conditional`,
	`nft add chain ip nftcni_portmap hostports`,
	`nft add chain ip nftcni_portmap prerouting { type nat hook prerouting priority dstnat; policy accept; }`,
	`nft add chain ip nftcni_portmap output { type nat hook output priority dstnat; policy accept; }`,
	`nft add chain ip nftcni_portmap postrouting { type nat hook postrouting priority srcnat; policy accept; }`,
	`nft add chain ip nftcni_portmap input { type filter hook input priority filter; policy accept; }`,
}

var ruleNotes4 = []string{
	`nft add rule ip nftcni_portmap hostports jump conditional comment "` + cmtCond + `"`,
	`nft add rule ip nftcni_portmap hostports dnat ip to ip daddr . meta l4proto . th dport map @hostip_ports comment "` + cmtHostIP + `"`,
	`nft add rule ip nftcni_portmap hostports dnat ip to meta l4proto . th dport map @ports comment "` + cmtAny + `"`,
	`nft add rule ip nftcni_portmap prerouting ip daddr 127.0.0.0/8 return comment "` + cmtLoopback + `"`,
	`nft add rule ip nftcni_portmap prerouting fib daddr type local jump hostports comment "` + cmtLocal + `"`,
	`nft add rule ip nftcni_portmap output fib daddr type local jump hostports comment "` + cmtLocal + `"`,
	`nft add rule ip nftcni_portmap postrouting ct status dnat ip daddr vmap @hairpins comment "` + cmtHairpin + `"`,
	`nft add rule ip nftcni_portmap postrouting ct status dnat ip saddr 127.0.0.0/8 ip daddr @localhost masquerade comment "` + cmtLocalhost + `"`,
	`nft add rule ip nftcni_portmap input iifname != "lo" ip daddr 127.0.0.0/8 ip saddr != 127.0.0.0/8 ct state & (established|related) == 0 ct status & dnat == 0 drop comment "` + cmtGuard + `"`,
}

// hairpin24Notes create the hairpin chain of /24 containers.
var hairpin24Notes = hairpinNotes("ip", 24, "255.255.255.0")

// hairpinNotes create family fam's hairpin chain of prefix length bits,
// whose mask nft prints as mask.
func hairpinNotes(fam string, bits int, mask string) []string {
	what := fmt.Sprintf("from the /%d subnet", bits)
	if bits == 0 {
		what = "from any source (masqAll)"
	}
	ch := fmt.Sprintf("%s nftcni_portmap hairpin_%d", fam, bits)
	return []string{
		`nft add chain ` + ch,
		`nft add rule ` + ch + ` ` + fam + ` daddr . ` + fam + ` saddr & ` + mask + ` @hairpin_local masquerade comment "nftcni portmap v2: hairpin ` + what + ` (` + fam + `)"`,
	}
}

// otherSpec is other's spec in existing: udp 5353 → 10.88.0.7:5353.
var otherSpec = Spec{Owner: other, Mappings: []Mapping{{HostPort: 5353, Proto: unix.IPPROTO_UDP,
	Target: netip.MustParseAddrPort("10.88.0.7:5353")}}}

func comments(f *family) map[string][]string {
	m := map[string][]string{}
	for _, ch := range f.chains() {
		m["ip "+TableName+" "+ch.Name] = []string{}
		for _, r := range staticRules(f, ch) {
			m["ip "+TableName+" "+ch.Name] = append(m["ip "+TableName+" "+ch.Name], r.Comment)
		}
	}
	for _, r := range hairpinRules(f, 24) {
		m["ip "+TableName+" hairpin_24"] = append(m["ip "+TableName+" hairpin_24"], r.Comment)
	}
	return m
}

// pm is o's tag on portmap's rules in foreign chains.
func pm(o ownerid.Owner) string { return o.ComponentTag("portmap") }

// createNotes create iptables-nft's filter table and FORWARD chain of
// family fam, as iptables-nft itself would.
func createNotes(fam string) []string {
	return []string{
		`nft add table ` + fam + ` filter`,
		`nft create chain ` + fam + ` filter FORWARD { type filter hook forward priority filter; policy accept; }`,
	}
}

// existing is a ruleset where sample holds tcp 8080 and other udp 5353,
// with iptables-nft's FORWARD chain holding their accepts, one of
// Docker's, and sample's firewall rule.
func existing() nfttest.State {
	chains := comments(fam4)
	chains["ip filter FORWARD"] = []string{sample.Tag(), pm(sample), "docker", pm(other)}
	return nfttest.State{
		Gen:    41,
		Tables: map[string]bool{"ip nftcni_portmap": true, "ip filter": true},
		Chains: chains,
		Sets: map[string][]nfttest.Elem{
			"ip nftcni_portmap ports": {
				{Key: []byte{6, 0, 0, 0, 0x1f, 0x90, 0, 0}, Val: []byte{10, 88, 0, 5, 0, 80, 0, 0}, Comment: sample.Tag()},
				{Key: []byte{17, 0, 0, 0, 0x14, 0xe9, 0, 0}, Val: []byte{10, 88, 0, 7, 0x14, 0xe9, 0, 0}, Comment: other.Tag()},
			},
			"ip nftcni_portmap hairpins":       {{Key: []byte{10, 88, 0, 5}, Jump: "hairpin_24", Comment: sample.Tag()}},
			"ip nftcni_portmap hairpin_local":  {{Key: []byte{10, 88, 0, 5, 10, 88, 0, 0}, Comment: sample.Tag()}},
			"ip nftcni_portmap localhost":      {{Key: []byte{10, 88, 0, 5}, Comment: sample.Tag()}},
			"ip nftcni_portmap localnet":       {localnetElem(localnetRecord("cni0", sample))},
			"ip nftcni_portmap localnet_prior": {{Key: priorKey("cni0"), Val: []byte{0, 0, 0, 0}, Comment: priorComment}},
			"ip nftcni_portmap owners":         {nfttest.MarkerWith(sample, record(web)), nfttest.MarkerWith(other, record(otherSpec))},
		},
	}
}

func localnetElem(e nft.Element) nfttest.Elem { return nfttest.Elem{Key: e.Key, Comment: e.Comment} }

// A first Setup records cni0's route_localnet (0) and its own use of it,
// and sets it only after the commit. On a host without iptables-nft
// tables, the FORWARD chain is created as iptables-nft would (a DROP
// policy set later keeps the accept); there is no IPv6 mapping, so no ip6
// chain.
func TestGoldenSetupFresh(t *testing.T) {
	t.Parallel()
	sys := fakeSysctls(t, map[string]string{cni0Localnet: "0"})
	f := sys.run(nfttest.State{Gen: 7}, func(ns *netns.NS) error { return Setup(ns, web) })
	nfttest.Golden(t, "setup_fresh", f.Only(t), nfttest.Cat(webFreshNotes(), nfttest.MarkTableNotes(),
		newDnatNotes(sample, "6", "10.88.0.5", "80", true, true)))
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("dumps %q of a table that does not exist", d)
	}
	wantWrites(t, sys, cni0Localnet+"=1")
}

// webFreshNotes are web's Setup on a host without our tables, up to the
// accepts in iptables-nft's chains.
func webFreshNotes() []string {
	tag := sample.Tag()
	return nfttest.Cat(staticNotes4, ruleNotes4, hairpin24Notes, []string{
		`nft add element ip nftcni_portmap ports { tcp . 8080 : 10.88.0.5 . 80 comment "` + tag + `" }`,
		`nft add element ip nftcni_portmap hairpins { 10.88.0.5 : jump hairpin_24 comment "` + tag + `" }`,
		`nft add element ip nftcni_portmap hairpin_local { 10.88.0.5 . 10.88.0.0 comment "` + tag + `" }`,
		`nft add element ip nftcni_portmap localhost { 10.88.0.5 comment "` + tag + `" }`,
		`nft add element ip nftcni_portmap localnet ` + localnetNote(sample, true),
		`nft create element ip nftcni_portmap localnet_prior ` + priorNote,
		nfttest.CreateMarkerWithNote(tbl, sample, "6:8080>10.88.0.5:80 h10.88.0.5/24 l10.88.0.5 ncni0"),
	})
}

// On an nftables-only host (no iptables program, no table of
// iptables-nft's) Setup creates nothing of iptables-nft's: setup_fresh
// without the FORWARD chain and its accept.
func TestGoldenSetupNoIptables(t *testing.T) {
	t.Parallel()
	sys := fakeSysctls(t, map[string]string{cni0Localnet: "0"})
	s := web
	s.iptablesReachable = func() bool { return false }
	f := sys.run(nfttest.State{Gen: 7}, func(ns *netns.NS) error { return Setup(ns, s) })
	nfttest.Golden(t, "setup_no_iptables", f.Only(t), webFreshNotes())
	if slices.ContainsFunc(f.RuleReads, func(ch string) bool { return !strings.Contains(ch, " "+nft.TablePrefix) }) {
		t.Errorf("rules read of %q, want none outside our tables", f.RuleReads)
	}
	wantWrites(t, sys, cni0Localnet+"=1")
}

var staticNotes6 = []string{
	`nft add table ip6 nftcni_portmap`,
	`nft add map ip6 nftcni_portmap hostip_ports { type ipv6_addr . inet_proto . inet_service : ipv6_addr . inet_service; }`,
	`nft add map ip6 nftcni_portmap ports { type inet_proto . inet_service : ipv6_addr . inet_service; }`,
	`nft add map ip6 nftcni_portmap hairpins { type ipv6_addr : verdict; }`,
	`nft add set ip6 nftcni_portmap hairpin_local { type ipv6_addr . ipv6_addr; }`,
	nfttest.OwnersSetNote("ip6 nftcni_portmap"),
	`nft add chain ip6 nftcni_portmap conditional`,
	`nft add chain ip6 nftcni_portmap hostports`,
	`nft add chain ip6 nftcni_portmap prerouting { type nat hook prerouting priority dstnat; policy accept; }`,
	`nft add chain ip6 nftcni_portmap output { type nat hook output priority dstnat; policy accept; }`,
	`nft add chain ip6 nftcni_portmap postrouting { type nat hook postrouting priority srcnat; policy accept; }`,
	`nft add rule ip6 nftcni_portmap hostports jump conditional comment "` + cmtCond + `"`,
	`nft add rule ip6 nftcni_portmap hostports dnat ip6 to ip6 daddr . meta l4proto . th dport map @hostip_ports comment "` + cmtHostIP + `"`,
	`nft add rule ip6 nftcni_portmap hostports dnat ip6 to meta l4proto . th dport map @ports comment "` + cmtAny + `"`,
	`nft add rule ip6 nftcni_portmap prerouting ip6 daddr ::1 return comment "` + cmtLoopback + `"`,
	`nft add rule ip6 nftcni_portmap prerouting fib daddr type local jump hostports comment "` + cmtLocal + `"`,
	`nft add rule ip6 nftcni_portmap output fib daddr type local jump hostports comment "` + cmtLocal + `"`,
	`nft add rule ip6 nftcni_portmap postrouting ct status dnat ip6 daddr vmap @hairpins comment "` + cmtHairpin + `"`,
}

// The ip6 table: no localhost forwarding, and prerouting leaves ::1 alone.
// ip6tables-nft's FORWARD chain is created for the accept, as ip6tables-nft
// would; there is no IPv4 mapping, so no ip chain.
func TestGoldenSetupFresh6(t *testing.T) {
	t.Parallel()
	s := Spec{Owner: sample,
		Mappings: []Mapping{{HostIP: netip.IPv6Loopback(), HostPort: 8080, Proto: unix.IPPROTO_TCP,
			Target: netip.MustParseAddrPort("[fd00:88::5]:80")}},
		Hairpin: []netip.Prefix{netip.MustParsePrefix("fd00:88::5/64")},
	}
	sys := fakeSysctls(t, map[string]string{})
	f := sys.run(nfttest.State{Gen: 7}, func(ns *netns.NS) error { return Setup(ns, s) })
	tag := sample.Tag()
	nfttest.Golden(t, "setup_fresh6", f.Only(t), nfttest.Cat(staticNotes6, hairpinNotes("ip6", 64, "ffff:ffff:ffff:ffff::"), []string{
		`nft add element ip6 nftcni_portmap hostip_ports { ::1 . tcp . 8080 : fd00:88::5 . 80 comment "` + tag + `" }`,
		`nft add element ip6 nftcni_portmap hairpins { fd00:88::5 : jump hairpin_64 comment "` + tag + `" }`,
		`nft add element ip6 nftcni_portmap hairpin_local { fd00:88::5 . fd00:88:: comment "` + tag + `" }`,
		nfttest.CreateMarkerWithNote("ip6 nftcni_portmap", sample, "6:8080>[fd00:88::5]:80@::1 hfd00:88::5/64"),
	}, nfttest.MarkTableNotes(), newDnatNotes(sample, "6", "fd00:88::5", "80", true, true)))
	wantWrites(t, sys)
}

// Repeating a Setup re-asserts the static objects and writes no rule and
// no element; the marker's record gives the owner's elements to look up.
func TestGoldenSetupAgain(t *testing.T) {
	t.Parallel()
	sys := fakeSysctls(t, map[string]string{cni0Localnet: "1"})
	f := sys.run(existingMarked(), func(ns *netns.NS) error { return Setup(ns, web) })
	nfttest.Golden(t, "setup_again", f.Only(t), nfttest.ExistingChains(staticNotes4))
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("dumps %q, want none (marker with a record: lookups)", d)
	}
	// The owner has state: its claims are found complete, and the shared
	// rule in iptables-nft's FORWARD chain is looked for (read, as the
	// fake has no index of rule handles).
	if !slices.Contains(f.RuleReads, "ip filter FORWARD") {
		t.Errorf("rules read of %q, want ip filter FORWARD's", f.RuleReads)
	}
	// route_localnet is on already: read, not written again.
	wantWrites(t, sys)
}

// A repeated Setup after something turned route_localnet off turns it on
// again: the setting is read, and written only when it is not on.
func TestSetupAgainLocalnetOff(t *testing.T) {
	t.Parallel()
	sys := fakeSysctls(t, map[string]string{cni0Localnet: "0"})
	sys.run(existing(), func(ns *netns.NS) error { return Setup(ns, web) })
	wantWrites(t, sys, cni0Localnet+"=1")
}

// A marker without a record (from before records) makes a repeated
// Setup read whole sets, and the marker gets its record.
func TestSetupAgainWithoutRecord(t *testing.T) {
	t.Parallel()
	sys := fakeSysctls(t, map[string]string{cni0Localnet: "1"})
	st := existingMarked()
	st.Sets["ip nftcni_portmap owners"] = []nfttest.Elem{nfttest.Marker(sample), nfttest.Marker(other)}
	f := sys.run(st, func(ns *netns.NS) error { return Setup(ns, web) })
	if d := f.Dumps(); len(d) != len(fam4.sets())+1 {
		t.Errorf("dumps %q, want one per set and localnet_prior (slow path)", d)
	}
	wantWrites(t, sys)
	nfttest.Golden(t, "setup_again_record", f.Only(t), nfttest.Cat(nfttest.ExistingChains(staticNotes4), []string{
		nfttest.DelMarkerNote(tbl, sample),
		nfttest.CreateMarkerWithNote(tbl, sample, record(web)),
	}))
}

// A first Setup of an owner on an existing table (no marker: the fast
// path) reads only its keys, one lookup each, and adds its elements and
// marker.
func TestGoldenSetupNewOwner(t *testing.T) {
	t.Parallel()
	s := Spec{
		Owner: nfttest.Third,
		Mappings: []Mapping{{HostPort: 9090, Proto: unix.IPPROTO_TCP,
			Target: netip.MustParseAddrPort("10.88.0.9:80")}},
		Hairpin:   []netip.Prefix{netip.MustParsePrefix("10.88.0.9/24")},
		Localhost: []netip.Addr{netip.MustParseAddr("10.88.0.9")},
		Localnet:  []string{"cni0"},
	}
	sys := fakeSysctls(t, map[string]string{cni0Localnet: "1"})
	f := sys.run(existingMarked(), func(ns *netns.NS) error { return Setup(ns, s) })
	tag := nfttest.Third.Tag()
	nfttest.Golden(t, "setup_new_owner", f.Only(t), nfttest.Cat(nfttest.ExistingChains(staticNotes4), []string{
		`nft create element ip nftcni_portmap ports { tcp . 9090 : 10.88.0.9 . 80 comment "` + tag + `" }`,
		`nft create element ip nftcni_portmap hairpins { 10.88.0.9 : jump hairpin_24 comment "` + tag + `" }`,
		`nft create element ip nftcni_portmap hairpin_local { 10.88.0.9 . 10.88.0.0 comment "` + tag + `" }`,
		`nft create element ip nftcni_portmap localhost { 10.88.0.9 comment "` + tag + `" }`,
		`nft create element ip nftcni_portmap localnet ` + localnetNote(nfttest.Third, true),
		nfttest.CreateMarkerWithNote(tbl, nfttest.Third, record(s)),
	}, dnatNotes(nfttest.Third, "6", "10.88.0.9", "80", false, 0, 2)))
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("fast path dumped %q", d)
	}
	// cni0 has a prior value already (sample's): it is looked up, not
	// read from the sysctl again; and route_localnet is on (sample's
	// Setup set it), so it is not written either.
	wantWrites(t, sys)
	// No table for ip6: not even the marker is asked for there. The
	// accept's claim reads its counts by key (the owner's for each
	// FORWARD chain, the DNAT element's, the chain's owners) and the
	// index of the shared rule.
	want := []string{"get ip nftcni_portmap owners", "get ip nftcni_portmap ports", "get ip nftcni_portmap hairpins",
		"get ip nftcni_portmap hairpin_local", "get ip nftcni_portmap localhost", "get ip nftcni_portmap localnet",
		"get ip nftcni_portmap localnet_prior",
		"get inet nftcni_accept counts", "get inet nftcni_accept counts", "get inet nftcni_accept counts",
		"get inet nftcni_foreign rules", "get inet nftcni_accept counts"}
	if !slices.Equal(f.Reads, want) {
		t.Errorf("reads %q, want %q", f.Reads, want)
	}
	// iptables-nft's FORWARD chain is read once, for the shared rule: the
	// fake has no table handles, so the index is never trusted here
	// (nft/foreign's live tests cover it).
	if n := slices.Index(f.RuleReads, "ip filter FORWARD"); n < 0 || slices.Contains(f.RuleReads[n+1:], "ip filter FORWARD") {
		t.Errorf("rules read of %q, want ip filter FORWARD's once", f.RuleReads)
	}
}

// The fast path takes over another owner's address elements (hairpin,
// localhost) found by lookup, as the slow path would.
func TestGoldenSetupTakeOver(t *testing.T) {
	t.Parallel()
	s := web
	s.Owner = nfttest.Third
	s.Mappings = []Mapping{{HostPort: 9090, Proto: unix.IPPROTO_TCP, Target: netip.MustParseAddrPort("10.88.0.5:80")}}
	sys := fakeSysctls(t, map[string]string{cni0Localnet: "1"})
	f := sys.run(existingMarked(), func(ns *netns.NS) error { return Setup(ns, s) })
	tag := nfttest.Third.Tag()
	// The localnet record is per attachment: sample's stays (until its
	// DEL or GC) beside the new one.
	nfttest.Golden(t, "setup_takeover", f.Only(t), nfttest.Cat(nfttest.ExistingChains(staticNotes4), []string{
		`nft create element ip nftcni_portmap ports { tcp . 9090 : 10.88.0.5 . 80 comment "` + tag + `" }`,
		`nft delete element ip nftcni_portmap hairpins { 10.88.0.5 }`,
		`nft create element ip nftcni_portmap hairpins { 10.88.0.5 : jump hairpin_24 comment "` + tag + `" }`,
		`nft delete element ip nftcni_portmap hairpin_local { 10.88.0.5 . 10.88.0.0 }`,
		`nft create element ip nftcni_portmap hairpin_local { 10.88.0.5 . 10.88.0.0 comment "` + tag + `" }`,
		`nft delete element ip nftcni_portmap localhost { 10.88.0.5 }`,
		`nft create element ip nftcni_portmap localhost { 10.88.0.5 comment "` + tag + `" }`,
		`nft create element ip nftcni_portmap localnet ` + localnetNote(nfttest.Third, true),
		nfttest.CreateMarkerWithNote(tbl, nfttest.Third, record(s)),
	}, dnatNotes(nfttest.Third, "6", "10.88.0.5", "80", false, 1, 2)))
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("fast path dumped %q", d)
	}
}

// masqAll: each address's hairpin element covers every source, in both
// families; localhost, localnet and the forward accepts are as without it
// (existing() has no ip6 filter table: ip6tables-nft's FORWARD chain is
// created).
func TestGoldenSetupMasqAll(t *testing.T) {
	t.Parallel()
	s := Spec{
		Owner: nfttest.Third,
		Mappings: []Mapping{
			{HostPort: 9090, Proto: unix.IPPROTO_TCP, Target: netip.MustParseAddrPort("10.88.0.9:80")},
			{HostPort: 9090, Proto: unix.IPPROTO_TCP, Target: netip.MustParseAddrPort("[fd00:88::9]:80")},
		},
		Hairpin:   []netip.Prefix{netip.MustParsePrefix("10.88.0.9/24"), netip.MustParsePrefix("fd00:88::9/64")},
		MasqAll:   true,
		Localhost: []netip.Addr{netip.MustParseAddr("10.88.0.9")},
		Localnet:  []string{"cni0"},
	}
	sys := fakeSysctls(t, map[string]string{cni0Localnet: "1"})
	f := sys.run(existingMarked(), func(ns *netns.NS) error { return Setup(ns, s) })
	tag := nfttest.Third.Tag()
	rec := "6:9090>10.88.0.9:80 6:9090>[fd00:88::9]:80 h10.88.0.9/24 hfd00:88::9/64 l10.88.0.9 ncni0 m"
	nfttest.Golden(t, "setup_masqall", f.Only(t), nfttest.Cat(nfttest.ExistingChains(staticNotes4), hairpinNotes("ip", 0, "0.0.0.0"), []string{
		`nft create element ip nftcni_portmap ports { tcp . 9090 : 10.88.0.9 . 80 comment "` + tag + `" }`,
		`nft create element ip nftcni_portmap hairpins { 10.88.0.9 : jump hairpin_0 comment "` + tag + `" }`,
		`nft create element ip nftcni_portmap hairpin_local { 10.88.0.9 . 0.0.0.0 comment "` + tag + `" }`,
		`nft create element ip nftcni_portmap localhost { 10.88.0.9 comment "` + tag + `" }`,
		`nft create element ip nftcni_portmap localnet ` + localnetNote(nfttest.Third, true),
		nfttest.CreateMarkerWithNote(tbl, nfttest.Third, rec),
	}, staticNotes6, hairpinNotes("ip6", 0, "::"), []string{
		`nft add element ip6 nftcni_portmap ports { tcp . 9090 : fd00:88::9 . 80 comment "` + tag + `" }`,
		`nft add element ip6 nftcni_portmap hairpins { fd00:88::9 : jump hairpin_0 comment "` + tag + `" }`,
		`nft add element ip6 nftcni_portmap hairpin_local { fd00:88::9 . :: comment "` + tag + `" }`,
		nfttest.CreateMarkerWithNote("ip6 nftcni_portmap", nfttest.Third, rec),
	}, dnatNotes(nfttest.Third, "6", "10.88.0.9", "80", false, 0, 2), dnatNotes(nfttest.Third, "6", "fd00:88::9", "80", true, 0, 0)))
}

// When the fast path's batch is refused, Setup runs once more on the slow
// path; a conflict, by contrast, is final (TestConflictSendsNothing).
func TestSetupFallsBackToSlowPath(t *testing.T) {
	t.Parallel()
	sys := fakeSysctls(t, map[string]string{cni0Localnet: "1"})
	f := &nfttest.Fake{State: existing(), Reject: nfttest.RejectFirstElements(unix.ENOTEMPTY)}
	ns := sys.on(f.NS(t))
	s := web
	s.Owner = nfttest.Third
	s.Mappings = []Mapping{{HostPort: 9090, Proto: unix.IPPROTO_TCP, Target: netip.MustParseAddrPort("10.88.0.5:80")}}
	if err := Setup(ns, s); err != nil {
		t.Fatal(err)
	}
	if len(f.Batches) != 2 {
		t.Fatalf("%d batches, want 2 (fast path refused, slow path committed)", len(f.Batches))
	}
	if d := f.Dumps(); len(d) != len(fam4.sets())+1 {
		t.Errorf("dumps %q, want one per set and localnet_prior (the slow path's)", d)
	}
}

// Another owner asking for a held port fails and sends nothing.
func TestConflictSendsNothing(t *testing.T) {
	t.Parallel()
	s := web
	s.Owner = ownerid.Owner{Network: "mynet", ContainerID: "third", IfName: "eth0"}
	s.Mappings = []Mapping{{HostPort: 5353, Proto: unix.IPPROTO_UDP, Target: netip.MustParseAddrPort("10.88.0.9:53")}}
	f := &nfttest.Fake{State: existing()}
	ns := f.NS(t)
	err := Setup(ns, s)
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.HostPort != 5353 || ce.Proto != unix.IPPROTO_UDP || ce.Holder != other.Tag() {
		t.Fatalf("got %v", err)
	}
	if len(f.Batches) != 0 {
		t.Errorf("%d batches sent", len(f.Batches))
	}
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("dumps %q: the conflict is found by lookup, and final", d)
	}
	t.Log(err)
}

// Teardown of an owner without localnet records: cni0 keeps sample's, so
// its route_localnet stays.
func TestGoldenTeardown(t *testing.T) {
	t.Parallel()
	sys := fakeSysctls(t, map[string]string{cni0Localnet: "1"})
	var removed Removed
	f := sys.run(existing(), func(ns *netns.NS) (err error) {
		removed, err = Teardown(ns, other, nil)
		return err
	})
	nfttest.Golden(t, "teardown", f.Only(t), []string{
		`nft delete element ip nftcni_portmap ports { udp . 5353 }`,
		nfttest.DelMarkerNote(tbl, other),
		`nft delete rule ip filter FORWARD handle 5`,
	})
	if len(removed.UDP4) != 1 || removed.UDP4[0] != 5353 || removed.Elements != 1 || removed.Foreign != 1 {
		t.Errorf("removed %+v", removed)
	}
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("dumps %q, want none (the marker's record, without localnet records: lookups)", d)
	}
	wantWrites(t, sys)
}

// A marker without a record: Teardown reads whole sets (layout v1's
// hairpin set too) and the conditional chain. Sample's was cni0's last
// localnet record: route_localnet gets its prior value back.
func TestGoldenTeardownWithoutRecord(t *testing.T) {
	t.Parallel()
	sys := fakeSysctls(t, map[string]string{cni0Localnet: "1"})
	st := existing()
	st.Sets["ip nftcni_portmap owners"] = []nfttest.Elem{nfttest.Marker(sample), nfttest.Marker(other)}
	st.Sets["ip nftcni_portmap hairpin"] = []nfttest.Elem{
		{Key: []byte{10, 88, 0, 0, 10, 88, 0, 5}, KeyEnd: []byte{10, 88, 0, 255, 10, 88, 0, 5}, Comment: sample.Tag()},
	}
	f := sys.run(st, func(ns *netns.NS) error {
		_, err := Teardown(ns, sample, nil)
		return err
	})
	nfttest.Golden(t, "teardown_legacy", f.Only(t), []string{
		`nft delete element ip nftcni_portmap ports { tcp . 8080 }`,
		`nft delete element ip nftcni_portmap hairpins { 10.88.0.5 }`,
		`nft delete element ip nftcni_portmap hairpin_local { 10.88.0.5 . 10.88.0.0 }`,
		`nft delete element ip nftcni_portmap localhost { 10.88.0.5 }`,
		`nft delete element ip nftcni_portmap localnet ` + localnetNote(sample, false),
		`nft delete element ip nftcni_portmap hairpin { 10.88.0.0/24 . 10.88.0.5 }`,
		nfttest.DelMarkerNote(tbl, sample),
		`nft delete element ip nftcni_portmap localnet_prior { "cni0" }`,
		`nft delete rule ip filter FORWARD handle 3`,
	})
	wantWrites(t, sys, cni0Localnet+"=0")
}

// GC with only other valid removes sample's elements and its accept, not
// the firewall's rule of the same attachment. Sample's was cni0's last
// localnet record: route_localnet gets its prior value back before the
// batch removing the record and the prior value commits.
func TestGoldenGC(t *testing.T) {
	t.Parallel()
	sys := fakeSysctls(t, map[string]string{cni0Localnet: "1"})
	f := sys.run(existing(), func(ns *netns.NS) error {
		_, err := GC(ns, sample.Network, []ownerid.Owner{other})
		return err
	})
	nfttest.Golden(t, "gc", f.Only(t), []string{
		`nft delete element ip nftcni_portmap ports { tcp . 8080 }`,
		`nft delete element ip nftcni_portmap hairpins { 10.88.0.5 }`,
		`nft delete element ip nftcni_portmap hairpin_local { 10.88.0.5 . 10.88.0.0 }`,
		`nft delete element ip nftcni_portmap localhost { 10.88.0.5 }`,
		`nft delete element ip nftcni_portmap localnet ` + localnetNote(sample, false),
		nfttest.DelMarkerNote(tbl, sample),
		`nft delete element ip nftcni_portmap localnet_prior { "cni0" }`,
		`nft delete rule ip filter FORWARD handle 3`,
	})
	wantWrites(t, sys, cni0Localnet+"=0")
}

// A restore that fails keeps the prior value for later and is reported,
// without failing the Teardown; an interface that is gone needs none.
func TestTeardownRestoreFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		set     error
		keep    bool
		message string
	}{
		{"interface gone", fs.ErrNotExist, false, ""},
		{"write refused", fs.ErrPermission, true, "restoring route_localnet=0 on cni0: permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sys := fakeSysctls(t, map[string]string{})
			sys.refuse = tc.set
			var removed Removed
			f := sys.run(existing(), func(ns *netns.NS) (err error) {
				removed, err = Teardown(ns, sample, nil)
				return err
			})
			deletesPrior := false
			for _, m := range f.Only(t) {
				deletesPrior = deletesPrior || strings.Contains(string(m.Data), "localnet_prior")
			}
			if deletesPrior == tc.keep {
				t.Errorf("localnet_prior deleted: %v, want %v", deletesPrior, !tc.keep)
			}
			if got := fmt.Sprint(removed.Warning); (removed.Warning != nil || tc.message != "") && got != tc.message {
				t.Errorf("warning %q, want %q", got, tc.message)
			}
		})
	}
}

// The record round-trips through specOf.
func TestRecord(t *testing.T) {
	t.Parallel()
	s := Spec{Owner: sample, Mappings: []Mapping{
		{HostPort: 8080, Proto: unix.IPPROTO_TCP, Target: netip.MustParseAddrPort("10.88.0.5:80")},
		{HostIP: netip.MustParseAddr("fd00::1"), HostPort: 53, Proto: unix.IPPROTO_UDP, Target: netip.MustParseAddrPort("[fd00:88::5]:5353")},
	},
		Hairpin:   []netip.Prefix{netip.MustParsePrefix("10.88.0.5/24"), netip.MustParsePrefix("fd00:88::5/64")},
		Localhost: []netip.Addr{netip.MustParseAddr("10.88.0.5")},
		Localnet:  []string{"cni0", "br-1"},
	}
	masqAll := s
	masqAll.MasqAll = true
	for _, s := range []Spec{s, masqAll} {
		back, err := specOf(sample, record(s))
		if err != nil {
			t.Fatal(err)
		}
		p1, _ := plan(s)
		p2, _ := plan(back)
		for _, f := range fams {
			for _, set := range f.sets() {
				if !slices.EqualFunc(p1.elems[set], p2.elems[set], nft.SameElement) {
					t.Errorf("masqAll %v, %s: from the record %v, want %v", s.MasqAll, set.Name, p2.elems[set], p1.elems[set])
				}
			}
		}
		if !slices.Equal(p1.localnet, p2.localnet) {
			t.Errorf("masqAll %v: localnet from the record %q, want %q", s.MasqAll, p2.localnet, p1.localnet)
		}
	}
	withConds := s
	withConds.Conditions4 = []Condition{{Field: InIface, Name: "eth9"}}
	if r := record(withConds); r != "" {
		t.Errorf("record with conditions %q, want none", r)
	}
}

func TestTeardownNothingSendsNothing(t *testing.T) {
	t.Parallel()
	absent := sample
	absent.ContainerID = "absent"
	// An owner without a marker has no accepts in iptables-nft's chains:
	// they are not read.
	f := nfttest.Run(t, existing(), func(ns *netns.NS) error {
		_, err := Teardown(ns, absent, nil)
		return err
	})
	if slices.Contains(f.RuleReads, "ip filter FORWARD") {
		t.Errorf("rules read of %q, want none of ip filter FORWARD", f.RuleReads)
	}
	nfttest.SendsNothing(t, existing(), func(ns *netns.NS) error {
		_, err := Teardown(ns, absent, nil)
		return err
	})
	nfttest.SendsNothing(t, nfttest.State{Gen: 1}, func(ns *netns.NS) error {
		_, err := Teardown(ns, absent, nil)
		return err
	})
}

// Check compares the record in the owner's marker with the elements by
// what it plans, not by its text: Teardown looks up only what the record
// plans, so a record that disagrees with the elements fails Check.
func TestCheckRecord(t *testing.T) {
	t.Parallel()
	sys := fakeSysctls(t, map[string]string{cni0Localnet: "1"})
	ns := sys.on((&nfttest.Fake{State: existing()}).NS(t))
	if err := Check(ns, web); err != nil {
		t.Errorf("Check of existing(): %v", err)
	}
	st := existing()
	st.Sets["ip nftcni_portmap owners"] = []nfttest.Elem{ // web's record, words in another order
		nfttest.MarkerWith(sample, "ncni0 l10.88.0.5 h10.88.0.5/24 6:8080>10.88.0.5:80"),
		nfttest.MarkerWith(other, record(otherSpec)),
	}
	ns = sys.on((&nfttest.Fake{State: st}).NS(t))
	if err := Check(ns, web); err != nil {
		t.Errorf("Check with a record in another order: %v", err)
	}
	stale := web
	stale.Mappings = []Mapping{{HostPort: 9999, Proto: unix.IPPROTO_TCP, Target: netip.MustParseAddrPort("10.88.0.5:80")}}
	st = existing()
	st.Sets["ip nftcni_portmap owners"] = []nfttest.Elem{nfttest.MarkerWith(sample, record(stale)), nfttest.MarkerWith(other, record(otherSpec))}
	ns = sys.on((&nfttest.Fake{State: st}).NS(t))
	want := `owner marker in ip nftcni_portmap set "owners": record "` + record(stale) + `" does not match the elements of map "ports"`
	if err := Check(ns, web); err == nil || err.Error() != want {
		t.Errorf("Check with a stale record: %v\nwant %s", err, want)
	}
}
