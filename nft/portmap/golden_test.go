package portmap

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
)

// The golden files pin the exact netlink messages of each operation, each
// annotated with the nft command sending the same request. Regenerate
// with `go test ./nft/portmap -run Golden -update` and review the diff.

var sample, other = nfttest.Sample, nfttest.Other

const tbl = "ip nftcni_portmap"

// web is sample's spec: tcp 8080 → 10.88.0.5:80 with hairpin and
// localhost masquerade.
var web = Spec{
	Owner: sample,
	Mappings: []Mapping{{HostPort: 8080, Proto: unix.IPPROTO_TCP,
		Target: netip.MustParseAddrPort("10.88.0.5:80")}},
	Hairpin:   []netip.Prefix{netip.MustParsePrefix("10.88.0.5/24")},
	Localhost: []netip.Addr{netip.MustParseAddr("10.88.0.5")},
}

var staticNotes4 = []string{
	`nft add table ip nftcni_portmap`,
	`nft add map ip nftcni_portmap hostip_ports { type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service; }`,
	`nft add map ip nftcni_portmap ports { type inet_proto . inet_service : ipv4_addr . inet_service; }`,
	`nft add map ip nftcni_portmap hairpins { type ipv4_addr : verdict; }`,
	`nft add set ip nftcni_portmap hairpin_local { type ipv4_addr . ipv4_addr; }`,
	`nft add set ip nftcni_portmap localhost { type ipv4_addr; }`,
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
	`nft add rule ip nftcni_portmap prerouting fib daddr type local jump hostports comment "` + cmtLocal + `"`,
	`nft add rule ip nftcni_portmap output fib daddr type local jump hostports comment "` + cmtLocal + `"`,
	`nft add rule ip nftcni_portmap postrouting ct status dnat ip daddr vmap @hairpins comment "` + cmtHairpin + `"`,
	`nft add rule ip nftcni_portmap postrouting ct status dnat ip saddr 127.0.0.0/8 ip daddr @localhost masquerade comment "` + cmtLocalhost + `"`,
	`nft add rule ip nftcni_portmap input iifname != "lo" ip daddr 127.0.0.0/8 ip saddr != 127.0.0.0/8 ct state & (established|related) == 0 ct status & dnat == 0 drop comment "` + cmtGuard + `"`,
}

// hairpin24Notes create the hairpin chain of /24 containers.
var hairpin24Notes = []string{
	`nft add chain ip nftcni_portmap hairpin_24`,
	`nft add rule ip nftcni_portmap hairpin_24 ip daddr . ip saddr & 255.255.255.0 @hairpin_local masquerade comment "nftcni portmap v2: hairpin from the /24 subnet (ip)"`,
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

// existing is a ruleset where sample holds tcp 8080 and other udp 5353.
func existing() nfttest.State {
	return nfttest.State{
		Gen:    41,
		Tables: map[string]bool{"ip nftcni_portmap": true},
		Chains: comments(fam4),
		Sets: map[string][]nfttest.Elem{
			"ip nftcni_portmap ports": {
				{Key: []byte{6, 0, 0, 0, 0x1f, 0x90, 0, 0}, Val: []byte{10, 88, 0, 5, 0, 80, 0, 0}, Comment: sample.Tag()},
				{Key: []byte{17, 0, 0, 0, 0x14, 0xe9, 0, 0}, Val: []byte{10, 88, 0, 7, 0x14, 0xe9, 0, 0}, Comment: other.Tag()},
			},
			"ip nftcni_portmap hairpins":      {{Key: []byte{10, 88, 0, 5}, Jump: "hairpin_24", Comment: sample.Tag()}},
			"ip nftcni_portmap hairpin_local": {{Key: []byte{10, 88, 0, 5, 10, 88, 0, 0}, Comment: sample.Tag()}},
			"ip nftcni_portmap localhost":     {{Key: []byte{10, 88, 0, 5}, Comment: sample.Tag()}},
			"ip nftcni_portmap owners":        {nfttest.MarkerWith(sample, record(web)), nfttest.MarkerWith(other, record(otherSpec))},
		},
	}
}

func TestGoldenSetupFresh(t *testing.T) {
	f := nfttest.Run(t, &open, nfttest.State{Gen: 7}, func() error { return Setup(nil, web) })
	tag := sample.Tag()
	nfttest.Golden(t, "setup_fresh", f.Only(t), nfttest.Cat(staticNotes4, ruleNotes4, hairpin24Notes, []string{
		`nft add element ip nftcni_portmap ports { tcp . 8080 : 10.88.0.5 . 80 comment "` + tag + `" }`,
		`nft add element ip nftcni_portmap hairpins { 10.88.0.5 : jump hairpin_24 comment "` + tag + `" }`,
		`nft add element ip nftcni_portmap hairpin_local { 10.88.0.5 . 10.88.0.0 comment "` + tag + `" }`,
		`nft add element ip nftcni_portmap localhost { 10.88.0.5 comment "` + tag + `" }`,
		nfttest.CreateMarkerWithNote(tbl, sample, "6:8080>10.88.0.5:80 h10.88.0.5/24 l10.88.0.5"),
	}))
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("dumps %q of a table that does not exist", d)
	}
}

// Repeating a Setup re-asserts the static objects and writes no rule and
// no element; the marker's record gives the owner's elements to look up.
func TestGoldenSetupAgain(t *testing.T) {
	f := nfttest.Run(t, &open, existing(), func() error { return Setup(nil, web) })
	nfttest.Golden(t, "setup_again", f.Only(t), nfttest.ExistingChains(staticNotes4))
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("dumps %q, want none (marker with a record: lookups)", d)
	}
}

// A marker without a record (from before records) makes a repeated
// Setup read whole sets, and the marker gets its record.
func TestSetupAgainWithoutRecord(t *testing.T) {
	st := existing()
	st.Sets["ip nftcni_portmap owners"] = []nfttest.Elem{nfttest.Marker(sample), nfttest.Marker(other)}
	f := nfttest.Run(t, &open, st, func() error { return Setup(nil, web) })
	if d := f.Dumps(); len(d) != len(fam4.sets()) {
		t.Errorf("dumps %q, want one per set (slow path)", d)
	}
	nfttest.Golden(t, "setup_again_record", f.Only(t), nfttest.Cat(nfttest.ExistingChains(staticNotes4), []string{
		nfttest.DelMarkerNote(tbl, sample),
		nfttest.CreateMarkerWithNote(tbl, sample, record(web)),
	}))
}

// A first Setup of an owner on an existing table (no marker: the fast
// path) reads only its keys, one lookup each, and adds its elements and
// marker.
func TestGoldenSetupNewOwner(t *testing.T) {
	s := Spec{
		Owner: nfttest.Third,
		Mappings: []Mapping{{HostPort: 9090, Proto: unix.IPPROTO_TCP,
			Target: netip.MustParseAddrPort("10.88.0.9:80")}},
		Hairpin:   []netip.Prefix{netip.MustParsePrefix("10.88.0.9/24")},
		Localhost: []netip.Addr{netip.MustParseAddr("10.88.0.9")},
	}
	f := nfttest.Run(t, &open, existing(), func() error { return Setup(nil, s) })
	tag := nfttest.Third.Tag()
	nfttest.Golden(t, "setup_new_owner", f.Only(t), nfttest.Cat(nfttest.ExistingChains(staticNotes4), []string{
		`nft create element ip nftcni_portmap ports { tcp . 9090 : 10.88.0.9 . 80 comment "` + tag + `" }`,
		`nft create element ip nftcni_portmap hairpins { 10.88.0.9 : jump hairpin_24 comment "` + tag + `" }`,
		`nft create element ip nftcni_portmap hairpin_local { 10.88.0.9 . 10.88.0.0 comment "` + tag + `" }`,
		`nft create element ip nftcni_portmap localhost { 10.88.0.9 comment "` + tag + `" }`,
		nfttest.CreateMarkerWithNote(tbl, nfttest.Third, record(s)),
	}))
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("fast path dumped %q", d)
	}
	// No table for ip6: not even the marker is asked for there.
	want := []string{"get ip nftcni_portmap owners", "get ip nftcni_portmap ports", "get ip nftcni_portmap hairpins",
		"get ip nftcni_portmap hairpin_local", "get ip nftcni_portmap localhost"}
	if !slices.Equal(f.Reads, want) {
		t.Errorf("reads %q, want %q", f.Reads, want)
	}
}

// The fast path takes over another owner's address elements (hairpin,
// localhost) found by lookup, as the slow path would.
func TestGoldenSetupTakeOver(t *testing.T) {
	s := web
	s.Owner = nfttest.Third
	s.Mappings = []Mapping{{HostPort: 9090, Proto: unix.IPPROTO_TCP, Target: netip.MustParseAddrPort("10.88.0.5:80")}}
	f := nfttest.Run(t, &open, existing(), func() error { return Setup(nil, s) })
	tag := nfttest.Third.Tag()
	nfttest.Golden(t, "setup_takeover", f.Only(t), nfttest.Cat(nfttest.ExistingChains(staticNotes4), []string{
		`nft create element ip nftcni_portmap ports { tcp . 9090 : 10.88.0.5 . 80 comment "` + tag + `" }`,
		`nft delete element ip nftcni_portmap hairpins { 10.88.0.5 }`,
		`nft create element ip nftcni_portmap hairpins { 10.88.0.5 : jump hairpin_24 comment "` + tag + `" }`,
		`nft delete element ip nftcni_portmap hairpin_local { 10.88.0.5 . 10.88.0.0 }`,
		`nft create element ip nftcni_portmap hairpin_local { 10.88.0.5 . 10.88.0.0 comment "` + tag + `" }`,
		`nft delete element ip nftcni_portmap localhost { 10.88.0.5 }`,
		`nft create element ip nftcni_portmap localhost { 10.88.0.5 comment "` + tag + `" }`,
		nfttest.CreateMarkerWithNote(tbl, nfttest.Third, record(s)),
	}))
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("fast path dumped %q", d)
	}
}

// When the fast path's batch is refused, Setup runs once more on the slow
// path; a conflict, by contrast, is final (TestConflictSendsNothing).
func TestSetupFallsBackToSlowPath(t *testing.T) {
	f := &nfttest.Fake{State: existing(), Reject: nfttest.RejectFirstElements(unix.ENOTEMPTY)}
	nfttest.Use(t, &open, f)
	s := web
	s.Owner = nfttest.Third
	s.Mappings = []Mapping{{HostPort: 9090, Proto: unix.IPPROTO_TCP, Target: netip.MustParseAddrPort("10.88.0.5:80")}}
	if err := Setup(nil, s); err != nil {
		t.Fatal(err)
	}
	if len(f.Batches) != 2 {
		t.Fatalf("%d batches, want 2 (fast path refused, slow path committed)", len(f.Batches))
	}
	if d := f.Dumps(); len(d) != len(fam4.sets()) {
		t.Errorf("dumps %q, want one per set (the slow path's)", d)
	}
}

// Another owner asking for a held port fails and sends nothing.
func TestConflictSendsNothing(t *testing.T) {
	s := web
	s.Owner = nft.Owner{Network: "mynet", ContainerID: "third", IfName: "eth0"}
	s.Mappings = []Mapping{{HostPort: 5353, Proto: unix.IPPROTO_UDP, Target: netip.MustParseAddrPort("10.88.0.9:53")}}
	f := &nfttest.Fake{State: existing()}
	nfttest.Use(t, &open, f)
	err := Setup(nil, s)
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

func TestGoldenTeardown(t *testing.T) {
	var removed Removed
	f := nfttest.Run(t, &open, existing(), func() (err error) {
		removed, err = Teardown(nil, other)
		return err
	})
	nfttest.Golden(t, "teardown", f.Only(t), []string{
		`nft delete element ip nftcni_portmap ports { udp . 5353 }`,
		nfttest.DelMarkerNote(tbl, other),
	})
	if len(removed.UDP4) != 1 || removed.UDP4[0] != 5353 || removed.Elements != 1 {
		t.Errorf("removed %+v", removed)
	}
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("dumps %q, want none (the marker's record: lookups)", d)
	}
}

// A marker without a record: Teardown reads whole sets (layout v1's
// hairpin set too) and the conditional chain.
func TestGoldenTeardownWithoutRecord(t *testing.T) {
	st := existing()
	st.Sets["ip nftcni_portmap owners"] = []nfttest.Elem{nfttest.Marker(sample), nfttest.Marker(other)}
	st.Sets["ip nftcni_portmap hairpin"] = []nfttest.Elem{
		{Key: []byte{10, 88, 0, 0, 10, 88, 0, 5}, KeyEnd: []byte{10, 88, 0, 255, 10, 88, 0, 5}, Comment: sample.Tag()},
	}
	f := nfttest.Run(t, &open, st, func() error {
		_, err := Teardown(nil, sample)
		return err
	})
	nfttest.Golden(t, "teardown_legacy", f.Only(t), []string{
		`nft delete element ip nftcni_portmap ports { tcp . 8080 }`,
		`nft delete element ip nftcni_portmap hairpins { 10.88.0.5 }`,
		`nft delete element ip nftcni_portmap hairpin_local { 10.88.0.5 . 10.88.0.0 }`,
		`nft delete element ip nftcni_portmap localhost { 10.88.0.5 }`,
		`nft delete element ip nftcni_portmap hairpin { 10.88.0.0/24 . 10.88.0.5 }`,
		nfttest.DelMarkerNote(tbl, sample),
	})
}

// GC with only other valid removes sample's elements.
func TestGoldenGC(t *testing.T) {
	f := nfttest.Run(t, &open, existing(), func() error {
		_, err := GC(nil, sample.Network, []nft.Owner{other})
		return err
	})
	nfttest.Golden(t, "gc", f.Only(t), []string{
		`nft delete element ip nftcni_portmap ports { tcp . 8080 }`,
		`nft delete element ip nftcni_portmap hairpins { 10.88.0.5 }`,
		`nft delete element ip nftcni_portmap hairpin_local { 10.88.0.5 . 10.88.0.0 }`,
		`nft delete element ip nftcni_portmap localhost { 10.88.0.5 }`,
		nfttest.DelMarkerNote(tbl, sample),
	})
}

// The record round-trips through specOf.
func TestRecord(t *testing.T) {
	s := Spec{Owner: sample, Mappings: []Mapping{
		{HostPort: 8080, Proto: unix.IPPROTO_TCP, Target: netip.MustParseAddrPort("10.88.0.5:80")},
		{HostIP: netip.MustParseAddr("fd00::1"), HostPort: 53, Proto: unix.IPPROTO_UDP, Target: netip.MustParseAddrPort("[fd00:88::5]:5353")},
	},
		Hairpin:   []netip.Prefix{netip.MustParsePrefix("10.88.0.5/24"), netip.MustParsePrefix("fd00:88::5/64")},
		Localhost: []netip.Addr{netip.MustParseAddr("10.88.0.5")},
	}
	back, err := specOf(sample, record(s))
	if err != nil {
		t.Fatal(err)
	}
	p1, _ := plan(s)
	p2, _ := plan(back)
	for _, f := range fams {
		for _, set := range f.sets() {
			if !slices.EqualFunc(p1.elems[set], p2.elems[set], nft.SameElement) {
				t.Errorf("%s: from the record %v, want %v", set.Name, p2.elems[set], p1.elems[set])
			}
		}
	}
	withConds := s
	withConds.Conditions4 = []Condition{{Field: InIface, Name: "eth9"}}
	if r := record(withConds); r != "" {
		t.Errorf("record with conditions %q, want none", r)
	}
}

func TestTeardownNothingSendsNothing(t *testing.T) {
	absent := sample
	absent.ContainerID = "absent"
	nfttest.SendsNothing(t, &open, existing(), func() error {
		_, err := Teardown(nil, absent)
		return err
	})
	nfttest.SendsNothing(t, &open, nfttest.State{Gen: 1}, func() error {
		_, err := Teardown(nil, absent)
		return err
	})
}
