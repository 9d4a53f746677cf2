package masq

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
	"github.com/nftcni/nftcni/ownerid"
)

// The golden files pin the exact netlink messages of each operation; every
// message is annotated there with the nft command that sends the same
// request. Regenerate with `go test ./nft/masq -run Golden -update` and
// review the diff.

var sample, other, third = nfttest.Sample, nfttest.Other, nfttest.Third

const tbl = "inet nftcni_masq"

// setupNotes are the nft commands equivalent to a first Setup's static part.
var setupNotes = []string{
	`nft add table inet nftcni_masq`,
	`nft add chain inet nftcni_masq postrouting { type nat hook postrouting priority srcnat; policy accept; }`,
	`nft add map inet nftcni_masq src4 { type ipv4_addr : verdict; }`,
	`nft add map inet nftcni_masq src6 { type ipv6_addr : verdict; }`,
	`nft add set inet nftcni_masq local4 { type ipv4_addr . ipv4_addr; }`,
	`nft add set inet nftcni_masq local6 { type ipv6_addr . ipv6_addr; }`,
	nfttest.OwnersSetNote(tbl),
}

var ruleNotes = []string{
	`nft add rule inet nftcni_masq postrouting ip daddr 224.0.0.0/4 return comment "nftcni masq v2: multicast"`,
	`nft add rule inet nftcni_masq postrouting ip6 daddr ff00::/8 return comment "nftcni masq v2: multicast6"`,
	`nft add rule inet nftcni_masq postrouting ip saddr vmap @src4 comment "nftcni masq v2: sources"`,
	`nft add rule inet nftcni_masq postrouting ip6 saddr vmap @src6 comment "nftcni masq v2: sources6"`,
}

// subnetNotes are the nft commands creating the chain of prefix length
// bits: the chain and its two rules.
func subnetNotes(v4 bool, bits int, mask string) []string {
	ip, name, set := "ip", fmt.Sprintf("subnet4_%d", bits), "local4"
	if !v4 {
		ip, name, set = "ip6", fmt.Sprintf("subnet6_%d", bits), "local6"
	}
	return []string{
		`nft add chain inet nftcni_masq ` + name,
		fmt.Sprintf(`nft add rule inet nftcni_masq %s %s saddr . %s daddr & %s @%s return comment "nftcni masq v2: own /%d subnet"`, name, ip, ip, mask, set, bits),
		`nft add rule inet nftcni_masq ` + name + ` masquerade comment "nftcni masq v2: masquerade"`,
	}
}

func ruleComments() []string {
	var c []string
	for _, r := range rules() {
		c = append(c, r.Comment)
	}
	return c
}

func subnetComments(bits int) []string {
	var c []string
	for _, r := range subnetRules(true, bits) {
		c = append(c, r.Comment)
	}
	return c
}

// existing is a ruleset where Setup already ran for sample (10.1.0.5/24)
// and for other (10.1.0.7/24), with the records in their markers.
func existing() nfttest.State {
	return nfttest.State{
		Gen:    41,
		Tables: map[string]bool{"inet nftcni_masq": true},
		Chains: map[string][]string{"inet nftcni_masq postrouting": ruleComments(), "inet nftcni_masq subnet4_24": subnetComments(24)},
		Sets: map[string][]nfttest.Elem{
			"inet nftcni_masq src4": {
				{Key: []byte{10, 1, 0, 5}, Jump: "subnet4_24", Comment: sample.Tag()},
				{Key: []byte{10, 1, 0, 7}, Jump: "subnet4_24", Comment: other.Tag()},
			},
			"inet nftcni_masq src6": {},
			"inet nftcni_masq local4": {
				{Key: []byte{10, 1, 0, 5, 10, 1, 0, 0}, Comment: sample.Tag()},
				{Key: []byte{10, 1, 0, 7, 10, 1, 0, 0}, Comment: other.Tag()},
			},
			"inet nftcni_masq local6": {},
			"inet nftcni_masq owners": {nfttest.MarkerWith(sample, "10.1.0.5/24"), nfttest.MarkerWith(other, "10.1.0.7/24")},
		},
	}
}

func TestGoldenSetupFresh(t *testing.T) {
	t.Parallel()
	addrs := []netip.Prefix{netip.MustParsePrefix("10.1.0.5/24"), netip.MustParsePrefix("fd00:1::5/64")}
	f := nfttest.Run(t, nfttest.State{Gen: 7}, func(ns *netns.NS) error {
		return Setup(ns, sample, addrs)
	})
	tag := sample.Tag()
	nfttest.Golden(t, "setup_fresh", f.Only(t), nfttest.Cat(setupNotes, ruleNotes,
		subnetNotes(true, 24, "255.255.255.0"), subnetNotes(false, 64, "ffff:ffff:ffff:ffff::"), []string{
			`nft add element inet nftcni_masq src4 { 10.1.0.5 : jump subnet4_24 comment "` + tag + `" }`,
			`nft add element inet nftcni_masq src6 { fd00:1::5 : jump subnet6_64 comment "` + tag + `" }`,
			`nft add element inet nftcni_masq local4 { 10.1.0.5 . 10.1.0.0 comment "` + tag + `" }`,
			`nft add element inet nftcni_masq local6 { fd00:1::5 . fd00:1:: comment "` + tag + `" }`,
			nfttest.CreateMarkerWithNote(tbl, sample, "10.1.0.5/24 fd00:1::5/64"),
		}))
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("dumps %q of a table that does not exist", d)
	}
}

// Repeating a Setup re-asserts the static objects (no-ops for the kernel)
// and writes no rule and no element; the record in the marker makes it
// look up the owner's elements instead of reading whole sets.
func TestGoldenSetupAgain(t *testing.T) {
	t.Parallel()
	f := nfttest.Run(t, existing(), func(ns *netns.NS) error {
		return Setup(ns, sample, []netip.Prefix{netip.MustParsePrefix("10.1.0.5/24")})
	})
	nfttest.Golden(t, "setup_again", f.Only(t), nfttest.ExistingChains(setupNotes))
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("dumps %q, want none (recorded path)", d)
	}
}

// A marker without a record (written before records existed) makes a
// repeated Setup read whole sets.
func TestSetupAgainWithoutRecord(t *testing.T) {
	t.Parallel()
	st := existing()
	st.Sets["inet nftcni_masq owners"] = []nfttest.Elem{nfttest.Marker(sample), nfttest.Marker(other)}
	f := nfttest.Run(t, st, func(ns *netns.NS) error {
		return Setup(ns, sample, []netip.Prefix{netip.MustParsePrefix("10.1.0.5/24")})
	})
	if d := f.Dumps(); len(d) != len(sets) {
		t.Errorf("dumps %q, want one per set (slow path)", d)
	}
	// The marker is rewritten with the record.
	nfttest.Golden(t, "setup_again_record", f.Only(t), nfttest.Cat(nfttest.ExistingChains(setupNotes), []string{
		nfttest.DelMarkerNote(tbl, sample),
		nfttest.CreateMarkerWithNote(tbl, sample, "10.1.0.5/24"),
	}))
}

// A first Setup of an owner on an existing table (no marker: the fast
// path) reads only the wanted keys, one lookup each, and adds its
// elements and marker.
func TestGoldenSetupNewOwner(t *testing.T) {
	t.Parallel()
	f := nfttest.Run(t, existing(), func(ns *netns.NS) error {
		return Setup(ns, third, []netip.Prefix{netip.MustParsePrefix("10.1.0.9/24")})
	})
	tag := third.Tag()
	nfttest.Golden(t, "setup_new_owner", f.Only(t), nfttest.Cat(nfttest.ExistingChains(setupNotes), []string{
		`nft create element inet nftcni_masq src4 { 10.1.0.9 : jump subnet4_24 comment "` + tag + `" }`,
		`nft create element inet nftcni_masq local4 { 10.1.0.9 . 10.1.0.0 comment "` + tag + `" }`,
		nfttest.CreateMarkerWithNote(tbl, third, "10.1.0.9/24"),
	}))
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("fast path dumped %q", d)
	}
	want := []string{"get inet nftcni_masq owners", "get inet nftcni_masq src4", "get inet nftcni_masq local4"}
	if !slices.Equal(f.Reads, want) {
		t.Errorf("reads %q, want %q", f.Reads, want)
	}
}

// The fast path finds another owner's element for the same address by
// looking its key up, and takes it over.
func TestGoldenSetupTakeOver(t *testing.T) {
	t.Parallel()
	f := nfttest.Run(t, existing(), func(ns *netns.NS) error {
		return Setup(ns, third, []netip.Prefix{netip.MustParsePrefix("10.1.0.7/24")})
	})
	tag := third.Tag()
	nfttest.Golden(t, "setup_takeover", f.Only(t), nfttest.Cat(nfttest.ExistingChains(setupNotes), []string{
		`nft delete element inet nftcni_masq src4 { 10.1.0.7 }`,
		`nft create element inet nftcni_masq src4 { 10.1.0.7 : jump subnet4_24 comment "` + tag + `" }`,
		`nft delete element inet nftcni_masq local4 { 10.1.0.7 . 10.1.0.0 }`,
		`nft create element inet nftcni_masq local4 { 10.1.0.7 . 10.1.0.0 comment "` + tag + `" }`,
		nfttest.CreateMarkerWithNote(tbl, third, "10.1.0.7/24"),
	}))
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("fast path dumped %q", d)
	}
}

// When the fast path's batch is refused (here: an element the exact
// lookup did not see), Setup runs once more on the slow path, and that is
// what counts.
func TestSetupFallsBackToSlowPath(t *testing.T) {
	t.Parallel()
	for _, errno := range []unix.Errno{
		unix.ENOTEMPTY, // what an interval set answers for an overlap the lookup did not report
		unix.EEXIST,    // a created element whose key the lookup missed
	} {
		t.Run(errno.Error(), func(t *testing.T) {
			f := &nfttest.Fake{State: existing(), Reject: nfttest.RejectFirstElements(errno)}
			ns := f.NS(t)
			if err := Setup(ns, third, []netip.Prefix{netip.MustParsePrefix("10.1.0.9/24")}); err != nil {
				t.Fatal(err)
			}
			if len(f.Batches) != 2 {
				t.Fatalf("%d batches, want 2 (fast path refused, slow path committed)", len(f.Batches))
			}
			if d := f.Dumps(); len(d) != len(sets) {
				t.Errorf("dumps %q, want one per set (the slow path's)", d)
			}
			if f.State.Gen != existing().Gen+1 {
				t.Errorf("generation %d, want %d: the second batch was not committed", f.State.Gen, existing().Gen+1)
			}
		})
	}
}

// The known limit with state written before markers existed: a Setup of
// an owner that has elements but no marker takes the fast path and does
// not see its elements with other keys (its DEL and GC still remove them).
func TestSetupWithoutMarkerKeepsOldKeys(t *testing.T) {
	t.Parallel()
	st := existing()
	delete(st.Sets, "inet nftcni_masq owners") // an older nftcni's table
	f := nfttest.Run(t, st, func(ns *netns.NS) error {
		return Setup(ns, sample, []netip.Prefix{netip.MustParsePrefix("10.1.0.6/24")})
	})
	for _, m := range f.Only(t) {
		if int(m.Header.Type)&0xff == unix.NFT_MSG_DELSETELEM {
			t.Error("the fast path deleted an element it was not meant to see")
		}
	}
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("dumps %q: expected the fast path", d)
	}
}

// A base chain whose policy was changed by hand (to drop, say) is sent
// again, which restores ours; one that is as we want it is not (see
// nft.Tx.EnsureChain for why that matters).
func TestGoldenSetupRestoresPolicy(t *testing.T) {
	t.Parallel()
	st := existing()
	st.Policies = map[string]uint32{"inet nftcni_masq postrouting": uint32(nftables.ChainPolicyDrop)}
	f := nfttest.Run(t, st, func(ns *netns.NS) error {
		return Setup(ns, sample, []netip.Prefix{netip.MustParsePrefix("10.1.0.5/24")})
	})
	nfttest.Golden(t, "setup_policy", f.Only(t), setupNotes)
}

// A Setup of the same owner with another address replaces its elements
// (looked up from the record of the previous one), and leaves the other
// owner's alone.
func TestGoldenSetupReplace(t *testing.T) {
	t.Parallel()
	f := nfttest.Run(t, existing(), func(ns *netns.NS) error {
		return Setup(ns, sample, []netip.Prefix{netip.MustParsePrefix("10.1.0.6/24")})
	})
	tag := sample.Tag()
	nfttest.Golden(t, "setup_replace", f.Only(t), nfttest.Cat(nfttest.ExistingChains(setupNotes), []string{
		`nft delete element inet nftcni_masq src4 { 10.1.0.5 }`,
		`nft create element inet nftcni_masq src4 { 10.1.0.6 : jump subnet4_24 comment "` + tag + `" }`,
		`nft delete element inet nftcni_masq local4 { 10.1.0.5 . 10.1.0.0 }`,
		`nft create element inet nftcni_masq local4 { 10.1.0.6 . 10.1.0.0 comment "` + tag + `" }`,
		nfttest.DelMarkerNote(tbl, sample),
		nfttest.CreateMarkerWithNote(tbl, sample, "10.1.0.6/24"),
	}))
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("dumps %q, want none (recorded path)", d)
	}
}

// Teardown looks up the elements its marker's record gives and deletes
// them with the marker: no set is read whole.
func TestGoldenTeardown(t *testing.T) {
	t.Parallel()
	f := nfttest.Run(t, existing(), func(ns *netns.NS) error {
		return Teardown(ns, sample)
	})
	nfttest.Golden(t, "teardown", f.Only(t), []string{
		`nft delete element inet nftcni_masq src4 { 10.1.0.5 }`,
		`nft delete element inet nftcni_masq local4 { 10.1.0.5 . 10.1.0.0 }`,
		nfttest.DelMarkerNote(tbl, sample),
	})
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("dumps %q, want none", d)
	}
}

// A marker without a record: Teardown reads whole sets, those of layout
// v1 too, and removes the owner's elements from all of them.
func TestGoldenTeardownWithoutRecord(t *testing.T) {
	t.Parallel()
	st := existing()
	st.Sets["inet nftcni_masq owners"] = []nfttest.Elem{nfttest.Marker(sample), nfttest.Marker(other)}
	st.Sets["inet nftcni_masq masq4"] = []nfttest.Elem{{Key: []byte{10, 1, 0, 5}, Comment: sample.Tag()}}
	st.Sets["inet nftcni_masq exempt4"] = []nfttest.Elem{
		{Key: []byte{10, 1, 0, 0, 10, 1, 0, 5}, KeyEnd: []byte{10, 1, 0, 255, 10, 1, 0, 5}, Comment: sample.Tag()},
	}
	f := nfttest.Run(t, st, func(ns *netns.NS) error {
		return Teardown(ns, sample)
	})
	nfttest.Golden(t, "teardown_legacy", f.Only(t), []string{
		`nft delete element inet nftcni_masq src4 { 10.1.0.5 }`,
		`nft delete element inet nftcni_masq local4 { 10.1.0.5 . 10.1.0.0 }`,
		`nft delete element inet nftcni_masq masq4 { 10.1.0.5 }`,
		`nft delete element inet nftcni_masq exempt4 { 10.1.0.0/24 . 10.1.0.5 }`,
		nfttest.DelMarkerNote(tbl, sample),
	})
}

// GC with only sample valid removes other's elements.
func TestGoldenGC(t *testing.T) {
	t.Parallel()
	f := nfttest.Run(t, existing(), func(ns *netns.NS) error {
		return GC(ns, "mynet", []ownerid.Owner{sample})
	})
	nfttest.Golden(t, "gc", f.Only(t), []string{
		`nft delete element inet nftcni_masq src4 { 10.1.0.7 }`,
		`nft delete element inet nftcni_masq local4 { 10.1.0.7 . 10.1.0.0 }`,
		nfttest.DelMarkerNote(tbl, other),
	})
}

// Nothing to remove: no batch at all, and no table is created.
func TestTeardownNothingSendsNothing(t *testing.T) {
	t.Parallel()
	owner := sample
	owner.ContainerID = "absent"
	nfttest.SendsNothing(t, existing(),
		func(ns *netns.NS) error { return Teardown(ns, owner) },
		func(ns *netns.NS) error { return GC(ns, "othernet", nil) })
}

// A concurrent commit between our reads and our batch makes the kernel
// refuse the batch; Setup reads again and commits at the new generation.
func TestSetupRetriesOnGenerationChange(t *testing.T) {
	t.Parallel()
	f := &nfttest.Fake{State: nfttest.State{Gen: 7}, Interfere: 1}
	ns := f.NS(t)
	if err := Setup(ns, sample, []netip.Prefix{netip.MustParsePrefix("10.1.0.5/24")}); err != nil {
		t.Fatal(err)
	}
	if len(f.Batches) != 2 {
		t.Fatalf("%d batches, want 2 (refused, then committed)", len(f.Batches))
	}
	if f.State.Gen != 9 {
		t.Errorf("generation %d after the retry, want 9", f.State.Gen)
	}
}

func TestSetupGivesUp(t *testing.T) {
	t.Parallel()
	f := &nfttest.Fake{State: nfttest.State{Gen: 7}, Interfere: 1000}
	ns := f.NS(t)
	err := Setup(ns, sample, []netip.Prefix{netip.MustParsePrefix("10.1.0.5/24")})
	if err == nil {
		t.Fatal("Setup succeeded against a ruleset that always changes")
	}
	t.Log(err)
}

func TestSetupRejectsBadAddress(t *testing.T) {
	t.Parallel()
	f := &nfttest.Fake{}
	ns := f.NS(t)
	if err := Setup(ns, sample, []netip.Prefix{{}}); err == nil {
		t.Fatal("invalid prefix accepted")
	}
	if len(f.Batches) != 0 {
		t.Error("batch sent for an invalid address")
	}
}

func TestElements(t *testing.T) {
	t.Parallel()
	want, err := elements(sample, []netip.Prefix{
		netip.MustParsePrefix("10.1.2.3/16"),
		netip.MustParsePrefix("::ffff:192.168.7.9/120"), // IPv4-mapped: an IPv4 /24
		netip.MustParsePrefix("fd00::1:5/112"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := want[local4]; len(got) != 2 ||
		string(got[0].Key) != "\x0a\x01\x02\x03\x0a\x01\x00\x00" || got[0].KeyEnd != nil ||
		string(got[1].Key) != "\xc0\xa8\x07\x09\xc0\xa8\x07\x00" {
		t.Errorf("local4 %x", got)
	}
	if got := want[local6]; len(got) != 1 || len(got[0].Key) != 32 ||
		netip.AddrFrom16([16]byte(got[0].Key[16:])).String() != "fd00::1:0" {
		t.Errorf("local6 %x", got)
	}
	if got := want[src4]; len(got) != 2 || got[0].Comment != sample.Tag() || got[0].Jump != "subnet4_16" || got[1].Jump != "subnet4_24" {
		t.Errorf("src4 %v", got)
	}
	if got := want[src6]; len(got) != 1 || got[0].Jump != "subnet6_112" {
		t.Errorf("src6 %v", got)
	}
	// The record round-trips.
	addrs := []netip.Prefix{netip.MustParsePrefix("10.1.2.3/16"), netip.MustParsePrefix("fd00::1:5/112")}
	again, err := recompute(sample, record(addrs))
	if err != nil {
		t.Fatal(err)
	}
	orig, _ := elements(sample, addrs)
	for _, s := range sets {
		if !slices.EqualFunc(orig[s], again[s], nft.SameElement) {
			t.Errorf("%s: recomputed %v, want %v", s.Name, again[s], orig[s])
		}
	}
}
