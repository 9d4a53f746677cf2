package firewall

import (
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/foreign"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
	"github.com/nftcni/nftcni/ownerid"
)

// The golden files pin the exact netlink messages of each operation; every
// message is annotated there with the nft (or, for the iptables-nft
// chains, iptables) command that sends the same request. Regenerate with
// `go test ./nft/firewall -run Golden -update` and review the diff.

var sample, other = nfttest.Sample, nfttest.Other

// The package's tests are about what Setup does where iptables can be
// used and, pinned otherwise per attachment (noIptables), where it cannot
// (foreign.Use): the machine they run on, with or without an iptables
// program, must not decide which. The pin is set once, before any test
// runs; no test changes it.
func TestMain(m *testing.M) {
	foreign.IptablesReachable = func() bool { return true }
	os.Exit(m.Run())
}

// noIptables is a on a host without an iptables program.
func noIptables(a Attachment) Attachment {
	a.iptablesReachable = func() bool { return false }
	return a
}

// use makes a fake nf_tables starting from st, and the namespace handle
// that dials it.
func use(t *testing.T, st nfttest.State) (*nfttest.Fake, *netns.NS) {
	t.Helper()
	f := &nfttest.Fake{State: st}
	return f, f.NS(t)
}

// run runs op, which must succeed, against a fake starting from st.
func run(t *testing.T, st nfttest.State, op func(ns *netns.NS) error) *nfttest.Fake {
	t.Helper()
	return nfttest.Run(t, st, op)
}

// staticNotes are the nft commands equivalent to a Setup's static part.
var staticNotes = []string{
	`nft add table inet nftcni_firewall`,
	`nft add chain inet nftcni_firewall forward { type filter hook forward priority filter; policy accept; }`,
	`nft add chain inet nftcni_firewall admin-jumps`,
	`nft add chain inet nftcni_firewall CNI-ADMIN`,
	`nft add set inet nftcni_firewall allow4 { type ipv4_addr; }`,
	`nft add set inet nftcni_firewall allow6 { type ipv6_addr; }`,
	`nft add set inet nftcni_firewall owners4 { type ipv4_addr . ifname; }`,
	`nft add set inet nftcni_firewall owners6 { type ipv6_addr . ifname; }`,
	`nft add set inet nftcni_firewall bridges { type ifname; }`,
	`nft add set inet nftcni_firewall bridge_self { type ifname . ifname; }`,
	`nft add set inet nftcni_firewall isolated_self { type ifname . ifname; }`,
	`nft add set inet nftcni_firewall bridge_owners { type ifname . ifname; }`,
	`nft add set inet nftcni_firewall isolated_owners { type ifname . ifname; }`,
	`nft add set inet nftcni_firewall owners { type ifname; }`,
	`nft add map inet nftcni_firewall counts4 { type ipv4_addr : integer; }`,
	`nft add map inet nftcni_firewall counts6 { type ipv6_addr : integer; }`,
	`nft add map inet nftcni_firewall bridge_counts { type ifname : integer; }`,
	`nft add map inet nftcni_firewall isolated_counts { type ifname : integer; }`,
}

// Records and markers of sample and other as existing() has them.
const (
	sampleRecord = "10.1.0.5 fd00:1::5 s=br0"
	otherRecord  = "10.1.0.7 s=br0"
)

func marker(o ownerid.Owner, rec string) nfttest.Elem {
	e := nft.MarkerWith(o, rec)
	return nfttest.Elem{Key: e.Key, Comment: e.Comment}
}

// markerNote is the nft command adding o's marker recording rec.
func markerNote(verb string, o ownerid.Owner, rec string) string {
	e := nft.MarkerWith(o, rec)
	if verb == "delete" {
		return `nft delete element inet nftcni_firewall owners { "` + string(e.Key) + `" }`
	}
	return `nft ` + verb + ` element inet nftcni_firewall owners { "` + string(e.Key) + `" comment "` + e.Comment + `" }`
}

func countElem(k []byte, n uint32) nfttest.Elem {
	return nfttest.Elem{Key: k, Val: []byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}}
}

var ruleNotes = []string{
	`nft add rule inet nftcni_firewall forward iifname @bridges oifname @bridges iifname . oifname != @bridge_self drop comment "nftcni firewall v1: same-bridge"`,
	`nft add rule inet nftcni_firewall forward iifname . oifname @isolated_self drop comment "nftcni firewall v1: isolated"`,
	`nft add rule inet nftcni_firewall forward jump admin-jumps comment "nftcni firewall v1: admin"`,
	`nft add rule inet nftcni_firewall forward ip daddr @allow4 ct state established,related accept comment "nftcni firewall v1: return traffic"`,
	`nft add rule inet nftcni_firewall forward ip saddr @allow4 accept comment "nftcni firewall v1: from container"`,
	`nft add rule inet nftcni_firewall forward ip6 daddr @allow6 ct state established,related accept comment "nftcni firewall v1: return traffic6"`,
	`nft add rule inet nftcni_firewall forward ip6 saddr @allow6 accept comment "nftcni firewall v1: from container6"`,
}

const adminJumpNote = `nft add rule inet nftcni_firewall admin-jumps jump CNI-ADMIN comment "nftcni firewall v1: admin chain CNI-ADMIN"`

func ruleComments() []string {
	var c []string
	for _, r := range rules() {
		c = append(c, r.Comment)
	}
	return c
}

func id(o ownerid.Owner) string { return string(attachmentID(o)) }

func addr(s string) []byte { k, _ := addrKey(netip.MustParseAddr(s)); return k }

func claim(a string, o ownerid.Owner) nfttest.Elem {
	return nfttest.Elem{Key: nft.Concat(addr(a), attachmentID(o)), Comment: o.Tag()}
}

func bridgeClaim(br string, o ownerid.Owner) nfttest.Elem {
	return nfttest.Elem{Key: nft.Concat(nft.IfnameKey(br), attachmentID(o)), Comment: o.Tag()}
}

// existing is a ruleset where Setup ran for sample (10.1.0.5, fd00:1::5,
// br0 same-bridge) and other (10.1.0.7, br0 same-bridge), with
// iptables-nft FORWARD chains holding a foreign rule each and each
// owner's rules, and an administrator's inet filter forward chain.
func existing() nfttest.State {
	s, o := sample.Tag(), other.Tag()
	return nfttest.State{
		Gen:    41,
		Tables: map[string]bool{"inet nftcni_firewall": true, "ip filter": true, "ip6 filter": true, "inet filter": true},
		Chains: map[string][]string{
			"inet nftcni_firewall forward":     ruleComments(),
			"inet nftcni_firewall admin-jumps": {"nftcni firewall v1: admin chain CNI-ADMIN"},
			"inet nftcni_firewall CNI-ADMIN":   {"an administrator's rule"},
			"ip filter FORWARD":                {o, o, "docker", s, s},
			"ip6 filter FORWARD":               {s, s, "docker6"},
			"inet filter forward":              {"an administrator's rule"},
		},
		Sets: map[string][]nfttest.Elem{
			"inet nftcni_firewall allow4":          {{Key: addr("10.1.0.5"), Comment: s}, {Key: addr("10.1.0.7"), Comment: o}},
			"inet nftcni_firewall allow6":          {{Key: addr("fd00:1::5"), Comment: s}},
			"inet nftcni_firewall owners4":         {claim("10.1.0.5", sample), claim("10.1.0.7", other)},
			"inet nftcni_firewall owners6":         {claim("fd00:1::5", sample)},
			"inet nftcni_firewall bridges":         {{Key: nft.IfnameKey("br0"), Comment: s}},
			"inet nftcni_firewall bridge_self":     {{Key: nft.Concat(nft.IfnameKey("br0"), nft.IfnameKey("br0")), Comment: s}},
			"inet nftcni_firewall isolated_self":   {},
			"inet nftcni_firewall bridge_owners":   {bridgeClaim("br0", sample), bridgeClaim("br0", other)},
			"inet nftcni_firewall isolated_owners": {},
			"inet nftcni_firewall owners":          {marker(sample, sampleRecord), marker(other, otherRecord)},
			"inet nftcni_firewall counts4":         {countElem(addr("10.1.0.5"), 1), countElem(addr("10.1.0.7"), 1)},
			"inet nftcni_firewall counts6":         {countElem(addr("fd00:1::5"), 1)},
			"inet nftcni_firewall bridge_counts":   {countElem(nft.IfnameKey("br0"), 2)},
			"inet nftcni_firewall isolated_counts": {},
		},
	}
}

// existingV1 is existing() as an earlier version left it: claims, no
// markers, no counts.
func existingV1() nfttest.State {
	st := existing()
	for _, s := range bookkeeping {
		delete(st.Sets, "inet nftcni_firewall "+s.Name)
	}
	return st
}

var sampleAttachment = Attachment{
	Owner:  sample,
	Addrs:  []netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00:1::5")},
	Bridge: "br0",
	Policy: PolicySameBridge,
}

// createNotes create iptables-nft's filter table and FORWARD chain of
// family fam, as iptables-nft itself would; the chain with NLM_F_EXCL.
func createNotes(fam string) []string {
	return []string{
		`nft add table ` + fam + ` filter`,
		`nft create chain ` + fam + ` filter FORWARD { type filter hook forward priority filter; policy accept; }`,
	}
}

// On a host without iptables-nft tables, Setup creates the FORWARD chains
// (and their tables) as iptables-nft would, so that a DROP policy set
// later (Docker starting after the container) keeps the rules.
func TestGoldenSetupFresh(t *testing.T) {
	t.Parallel()
	f := run(t, nfttest.State{Gen: 7}, func(ns *netns.NS) error { return Setup(ns, sampleAttachment) })
	tag := sample.Tag()
	nfttest.Golden(t, "setup_fresh", f.Only(t), nfttest.Cat(staticNotes, ruleNotes, freshNotes(), nfttest.MarkTableNotes(),
		newClaimNotes(tag, true, true, "10.1.0.5"), newClaimNotes(tag, true, true, "fd00:1::5")))
}

// freshNotes are the elements of sampleAttachment's Setup on a host
// without our table.
func freshNotes() []string {
	tag, i := sample.Tag(), id(sample)
	return []string{
		adminJumpNote,
		`nft add element inet nftcni_firewall owners4 { 10.1.0.5 . "` + i + `" comment "` + tag + `" }`,
		`nft add element inet nftcni_firewall allow4 { 10.1.0.5 comment "` + tag + `" }`,
		`nft add element inet nftcni_firewall owners6 { fd00:1::5 . "` + i + `" comment "` + tag + `" }`,
		`nft add element inet nftcni_firewall allow6 { fd00:1::5 comment "` + tag + `" }`,
		`nft add element inet nftcni_firewall bridge_owners { "br0" . "` + i + `" comment "` + tag + `" }`,
		`nft add element inet nftcni_firewall bridges { "br0" comment "` + tag + `" }`,
		`nft add element inet nftcni_firewall bridge_self { "br0" . "br0" comment "` + tag + `" }`,
		`nft add element inet nftcni_firewall counts4 { 10.1.0.5 : 1 }`,
		`nft add element inet nftcni_firewall counts6 { fd00:1::5 : 1 }`,
		`nft add element inet nftcni_firewall bridge_counts { "br0" : 1 }`,
		markerNote("add", sample, sampleRecord),
	}
}

// On an nftables-only host — no iptables program, no table of
// iptables-nft's, the distribution's inet filter — Setup creates nothing
// of iptables-nft's (foreign.Use): setup_fresh without the filter tables,
// and no chain of others read.
func TestGoldenSetupNoIptables(t *testing.T) {
	t.Parallel()
	st := nfttest.State{Gen: 7, Tables: map[string]bool{"inet filter": true}, Chains: map[string][]string{"inet filter forward": nil}}
	f := run(t, st, func(ns *netns.NS) error { return Setup(ns, noIptables(sampleAttachment)) })
	nfttest.Golden(t, "setup_no_iptables", f.Only(t), nfttest.Cat(staticNotes, ruleNotes, freshNotes()))
	if slices.ContainsFunc(f.RuleReads, func(ch string) bool { return !strings.Contains(ch, " "+nft.TablePrefix) }) {
		t.Errorf("rules read of %q, want none outside our tables", f.RuleReads)
	}
}

// Without an iptables program, a table of iptables-nft's (made by an
// iptables the plugin cannot see: kube-proxy's, in its container) keeps
// the accepts where they are: the repeated Setup writes what setup_again
// does.
func TestGoldenSetupIptablesTableOnly(t *testing.T) {
	t.Parallel()
	f := run(t, existingMarked(), func(ns *netns.NS) error { return Setup(ns, noIptables(sampleAttachment)) })
	nfttest.Golden(t, "setup_again", f.Only(t), nfttest.ExistingChains(staticNotes))
}

// iptablesForwardAccepts "never": an owner's repeated Setup removes its
// accepts from iptables-nft's FORWARD chains, and nothing else there.
func TestGoldenSetupNever(t *testing.T) {
	t.Parallel()
	a := sampleAttachment
	a.Iptables = foreign.UseNever
	f := run(t, existing(), func(ns *netns.NS) error { return Setup(ns, a) })
	nfttest.Golden(t, "setup_never", f.Only(t), nfttest.Cat(nfttest.ExistingChains(staticNotes), []string{
		`nft delete rule ip filter FORWARD handle 5`,
		`nft delete rule ip filter FORWARD handle 6`,
		`nft delete rule ip6 filter FORWARD handle 2`,
		`nft delete rule ip6 filter FORWARD handle 3`,
	}))
}

// An iptables-nft filter table holding only INPUT (iptables-nft makes its
// built-in chains as they are used) gets the FORWARD chain; a table called
// filter without iptables-nft's chains is someone's native one and is left
// alone.
func TestGoldenSetupFilterTableWithoutForward(t *testing.T) {
	t.Parallel()
	st := nfttest.State{Gen: 7, Tables: map[string]bool{"ip filter": true, "ip6 filter": true}, Chains: map[string][]string{
		"ip filter INPUT":  {"a rule of iptables"},
		"ip6 filter input": {"a native rule"},
	}}
	a := Attachment{Owner: sample, Addrs: sampleAttachment.Addrs}
	f := run(t, st, func(ns *netns.NS) error { return Setup(ns, a) })
	tag, i := sample.Tag(), id(sample)
	nfttest.Golden(t, "setup_filter_input", f.Only(t), nfttest.Cat(staticNotes, ruleNotes, []string{
		adminJumpNote,
		`nft add element inet nftcni_firewall owners4 { 10.1.0.5 . "` + i + `" comment "` + tag + `" }`,
		`nft add element inet nftcni_firewall allow4 { 10.1.0.5 comment "` + tag + `" }`,
		`nft add element inet nftcni_firewall owners6 { fd00:1::5 . "` + i + `" comment "` + tag + `" }`,
		`nft add element inet nftcni_firewall allow6 { fd00:1::5 comment "` + tag + `" }`,
		`nft add element inet nftcni_firewall counts4 { 10.1.0.5 : 1 }`,
		`nft add element inet nftcni_firewall counts6 { fd00:1::5 : 1 }`,
		markerNote("add", sample, "10.1.0.5 fd00:1::5"),
	}, nfttest.MarkTableNotes(), withChainCreated(newClaimNotes(tag, false, true, "10.1.0.5"), createNotes("ip")[1:])))
	// ip6 filter, someone's own table, gets no FORWARD chain, so the
	// IPv6 address has no claim for it either.
}

// withChainCreated puts create, the notes of creating iptables-nft's
// FORWARD chain, into notes, a first claim's, before its shared rule.
func withChainCreated(notes, create []string) []string {
	for i, n := range notes {
		if strings.Contains(n, "-I FORWARD") {
			return nfttest.Cat(notes[:i:i], create, notes[i:])
		}
	}
	return nfttest.Cat(notes, create)
}

// Repeating a Setup re-asserts the static objects (no-ops for the kernel)
// and writes no rule and no element, in our table or the foreign chain;
// its marker recording the same Setup, it reads no claim set whole (a
// reload of every attachment would cost in proportion to their number
// squared). A Setup with other addresses reads them.
func TestGoldenSetupAgain(t *testing.T) {
	t.Parallel()
	f := run(t, existingMarked(), func(ns *netns.NS) error { return Setup(ns, sampleAttachment) })
	nfttest.Golden(t, "setup_again", f.Only(t), nfttest.ExistingChains(staticNotes))
	for _, r := range f.Reads {
		if strings.HasPrefix(r, "dump ") {
			t.Errorf("repeated Setup read %s", r)
		}
	}
	moved := sampleAttachment
	moved.Addrs = moved.Addrs[:1]
	f = run(t, existing(), func(ns *netns.NS) error { return Setup(ns, moved) })
	if !slices.Contains(f.Reads, "dump inet nftcni_firewall owners4") {
		t.Errorf("a Setup with other addresses did not read the claims: %v", f.Reads)
	}
}

// With iptables-nft FORWARD chains, a new attachment's rules go to their
// heads.
func TestGoldenSetupForeign(t *testing.T) {
	t.Parallel()
	st := existingMarked()
	a := Attachment{Owner: ownerid.Owner{Network: "mynet", ContainerID: "beef", IfName: "eth0"}, Addrs: []netip.Addr{netip.MustParseAddr("10.1.0.9"), netip.MustParseAddr("fd00:1::9")}}
	f := run(t, st, func(ns *netns.NS) error { return Setup(ns, a) })
	tag, i := a.Owner.Tag(), id(a.Owner)
	nfttest.Golden(t, "setup_foreign", f.Only(t), nfttest.Cat(nfttest.ExistingChains(staticNotes), []string{
		`nft create element inet nftcni_firewall owners4 { 10.1.0.9 . "` + i + `" comment "` + tag + `" }`,
		`nft add element inet nftcni_firewall counts4 { 10.1.0.9 : 1 }`,
		`nft create element inet nftcni_firewall allow4 { 10.1.0.9 comment "` + tag + `" }`,
		`nft create element inet nftcni_firewall owners6 { fd00:1::9 . "` + i + `" comment "` + tag + `" }`,
		`nft add element inet nftcni_firewall counts6 { fd00:1::9 : 1 }`,
		`nft create element inet nftcni_firewall allow6 { fd00:1::9 comment "` + tag + `" }`,
		markerNote("create", a.Owner, "10.1.0.9 fd00:1::9"),
	}, claimNotesUsers(tag, false, 2, "10.1.0.9"), claimNotesUsers(tag, false, 1, "fd00:1::9")))
	// A new owner (no marker): lookups of its own keys, no set or
	// iptables-nft chain read whole.
	for _, r := range f.Reads {
		if strings.HasPrefix(r, "dump ") {
			t.Errorf("read %s", r)
		}
	}
	// Rules read: of our tables' chains (the static rules checked once
	// per batch), and each FORWARD chain once, for the shared rule (the
	// fake has no table handles, so the index is never trusted here;
	// nft/foreign's live tests cover it).
	seen := map[string]bool{}
	for _, r := range f.RuleReads {
		if !strings.HasPrefix(strings.Fields(r)[1], nft.TablePrefix) && (seen[r] || !strings.HasSuffix(r, " filter FORWARD")) {
			t.Errorf("read the rules of %s", r)
		}
		seen[r] = true
	}
}

// nftablesAcceptChains: the administrator's chain gets native accepts at
// its head, for both families in an inet table.
func TestGoldenSetupAcceptChain(t *testing.T) {
	t.Parallel()
	a := sampleAttachment
	a.AcceptChains = []foreign.Chain{{Table: &nftables.Table{Family: nftables.TableFamilyINet, Name: "filter"}, Name: "forward"}}
	f := run(t, existingMarked(), func(ns *netns.NS) error { return Setup(ns, a) })
	tag := sample.Tag()
	nfttest.Golden(t, "setup_accept_chain", f.Only(t), nfttest.Cat(nfttest.ExistingChains(staticNotes), []string{
		`nft insert rule inet filter forward ip saddr 10.1.0.5 accept comment "` + tag + `"`,
		`nft insert rule inet filter forward ip daddr 10.1.0.5 ct state established,related accept comment "` + tag + `"`,
		`nft insert rule inet filter forward ip6 saddr fd00:1::5 accept comment "` + tag + `"`,
		`nft insert rule inet filter forward ip6 daddr fd00:1::5 ct state established,related accept comment "` + tag + `"`,
	}))
}

// A named chain that does not exist fails Setup, which sends nothing.
func TestSetupAcceptChainMissing(t *testing.T) {
	t.Parallel()
	a := sampleAttachment
	a.AcceptChains = []foreign.Chain{{Table: &nftables.Table{Family: nftables.TableFamilyIPv4, Name: "fw"}, Name: "fwd"}}
	f, ns := use(t, existing())
	err := Setup(ns, a)
	if want := "chain ip fw fwd (nftablesAcceptChains) not found"; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("Setup = %v, want …%s", err, want)
	}
	if len(f.Batches) != 0 {
		t.Errorf("%d batches sent", len(f.Batches))
	}
}

// A second attachment claiming an address already allowed adds its claim
// only: the lookup element stays as it is. (Its table filter has no
// iptables-nft chain: no rules there.)
func TestGoldenSetupSharedAddress(t *testing.T) {
	t.Parallel()
	a := Attachment{Owner: ownerid.Owner{Network: "othernet", ContainerID: "beef", IfName: "eth0"}, Addrs: []netip.Addr{netip.MustParseAddr("10.1.0.7")}}
	st := existing()
	delete(st.Chains, "ip filter FORWARD")
	f := run(t, st, func(ns *netns.NS) error { return Setup(ns, a) })
	nfttest.Golden(t, "setup_shared", f.Only(t), nfttest.Cat(nfttest.ExistingChains(staticNotes), []string{
		`nft create element inet nftcni_firewall owners4 { 10.1.0.7 . "` + id(a.Owner) + `" comment "` + a.Owner.Tag() + `" }`,
		`nft delete element inet nftcni_firewall counts4 { 10.1.0.7 }`,
		`nft add element inet nftcni_firewall counts4 { 10.1.0.7 : 2 }`,
		markerNote("create", a.Owner, "10.1.0.7"),
	}))
}

// The same owner with another address and no policy: its old claims go,
// with the lookup elements no one else claims; the bridge element it was
// tagged on passes to the other claimant; its accepts for the FORWARD
// chains are replaced, and ip6 filter FORWARD, left without owners, loses
// the shared rule.
func TestGoldenSetupReplace(t *testing.T) {
	t.Parallel()
	a := Attachment{Owner: sample, Addrs: []netip.Addr{netip.MustParseAddr("10.1.0.6")}}
	f := run(t, existingMarked(), func(ns *netns.NS) error { return Setup(ns, a) })
	s, o, i := sample.Tag(), other.Tag(), id(sample)
	nfttest.Golden(t, "setup_replace", f.Only(t), nfttest.Cat(nfttest.ExistingChains(staticNotes), []string{
		`nft delete element inet nftcni_firewall owners4 { 10.1.0.5 . "` + i + `" }`,
		`nft add element inet nftcni_firewall owners4 { 10.1.0.6 . "` + i + `" comment "` + s + `" }`,
		`nft delete element inet nftcni_firewall allow4 { 10.1.0.5 }`,
		`nft add element inet nftcni_firewall allow4 { 10.1.0.6 comment "` + s + `" }`,
		`nft delete element inet nftcni_firewall owners6 { fd00:1::5 . "` + i + `" }`,
		`nft delete element inet nftcni_firewall allow6 { fd00:1::5 }`,
		`nft delete element inet nftcni_firewall bridge_owners { "br0" . "` + i + `" }`,
		`nft delete element inet nftcni_firewall bridges { "br0" }`,
		`nft add element inet nftcni_firewall bridges { "br0" comment "` + o + `" }`,
		`nft delete element inet nftcni_firewall bridge_self { "br0" . "br0" }`,
		`nft add element inet nftcni_firewall bridge_self { "br0" . "br0" comment "` + o + `" }`,
		`nft delete element inet nftcni_firewall counts4 { 10.1.0.5 }`,
		`nft add element inet nftcni_firewall counts4 { 10.1.0.6 : 1 }`,
		`nft delete element inet nftcni_firewall counts6 { fd00:1::5 }`,
		`nft delete element inet nftcni_firewall bridge_counts { "br0" }`,
		`nft add element inet nftcni_firewall bridge_counts { "br0" : 1 }`,
		markerNote("delete", sample, ""),
		markerNote("add", sample, "10.1.0.6"),
	}, replaceNotes(s)))
}

// Teardown removes the owner's claims and foreign rules, and the lookup
// elements only it claimed; a bridge still used by other keeps its
// elements, re-tagged.
func TestGoldenTeardown(t *testing.T) {
	t.Parallel()
	f := run(t, existing(), func(ns *netns.NS) error { return Teardown(ns, sample, nil) })
	o, i := other.Tag(), id(sample)
	nfttest.Golden(t, "teardown", f.Only(t), []string{
		`nft delete element inet nftcni_firewall owners4 { 10.1.0.5 . "` + i + `" }`,
		`nft delete element inet nftcni_firewall allow4 { 10.1.0.5 }`,
		`nft delete element inet nftcni_firewall owners6 { fd00:1::5 . "` + i + `" }`,
		`nft delete element inet nftcni_firewall allow6 { fd00:1::5 }`,
		`nft delete element inet nftcni_firewall bridge_owners { "br0" . "` + i + `" }`,
		`nft delete element inet nftcni_firewall bridges { "br0" }`,
		`nft add element inet nftcni_firewall bridges { "br0" comment "` + o + `" }`,
		`nft delete element inet nftcni_firewall bridge_self { "br0" . "br0" }`,
		`nft add element inet nftcni_firewall bridge_self { "br0" . "br0" comment "` + o + `" }`,
		`nft delete element inet nftcni_firewall counts4 { 10.1.0.5 }`,
		`nft delete element inet nftcni_firewall counts6 { fd00:1::5 }`,
		`nft delete element inet nftcni_firewall bridge_counts { "br0" }`,
		`nft add element inet nftcni_firewall bridge_counts { "br0" : 1 }`,
		markerNote("delete", sample, ""),
		`nft delete rule ip filter FORWARD handle 5`,
		`nft delete rule ip filter FORWARD handle 6`,
		`nft delete rule ip6 filter FORWARD handle 2`,
		`nft delete rule ip6 filter FORWARD handle 3`,
	})
}

// GC with nothing valid collects everything of the network: claims, lookup
// elements, foreign rules — but not the foreign chain's other rules.
func TestGoldenGC(t *testing.T) {
	t.Parallel()
	f := run(t, existing(), func(ns *netns.NS) error { return GC(ns, "mynet", nil) })
	i, j := id(sample), id(other)
	nfttest.Golden(t, "gc", f.Only(t), []string{
		`nft delete element inet nftcni_firewall owners4 { 10.1.0.5 . "` + i + `", 10.1.0.7 . "` + j + `" }`,
		`nft delete element inet nftcni_firewall allow4 { 10.1.0.5, 10.1.0.7 }`,
		`nft delete element inet nftcni_firewall owners6 { fd00:1::5 . "` + i + `" }`,
		`nft delete element inet nftcni_firewall allow6 { fd00:1::5 }`,
		`nft delete element inet nftcni_firewall bridge_owners { "br0" . "` + i + `", "br0" . "` + j + `" }`,
		`nft delete element inet nftcni_firewall bridges { "br0" }`,
		`nft delete element inet nftcni_firewall bridge_self { "br0" . "br0" }`,
		`nft delete element inet nftcni_firewall counts4 { 10.1.0.5, 10.1.0.7 }`,
		`nft delete element inet nftcni_firewall counts6 { fd00:1::5 }`,
		`nft delete element inet nftcni_firewall bridge_counts { "br0" }`,
		`nft delete element inet nftcni_firewall owners { "` + sample.AttachmentHash() + `", "` + other.AttachmentHash() + `" }`,
		`nft delete rule ip filter FORWARD handle 2`,
		`nft delete rule ip filter FORWARD handle 3`,
		`nft delete rule ip filter FORWARD handle 5`,
		`nft delete rule ip filter FORWARD handle 6`,
		`nft delete rule ip6 filter FORWARD handle 2`,
		`nft delete rule ip6 filter FORWARD handle 3`,
	})
}

// GC finds the network's rules wherever they are — in a chain no
// configuration names any more, say — and never portmap's rules of the
// same attachment.
func TestGoldenGCEverywhere(t *testing.T) {
	t.Parallel()
	st := existing()
	st.Chains["inet filter forward"] = []string{sample.Tag(), "an administrator's rule", sample.ComponentTag("portmap")}
	st.Chains["ip filter FORWARD"] = []string{sample.ComponentTag("portmap"), "docker"}
	delete(st.Chains, "ip6 filter FORWARD")
	f := run(t, st, func(ns *netns.NS) error { return GC(ns, "mynet", []ownerid.Owner{other}) })
	i := id(sample)
	nfttest.Golden(t, "gc_everywhere", f.Only(t), []string{
		`nft delete element inet nftcni_firewall owners4 { 10.1.0.5 . "` + i + `" }`,
		`nft delete element inet nftcni_firewall allow4 { 10.1.0.5 }`,
		`nft delete element inet nftcni_firewall owners6 { fd00:1::5 . "` + i + `" }`,
		`nft delete element inet nftcni_firewall allow6 { fd00:1::5 }`,
		`nft delete element inet nftcni_firewall bridge_owners { "br0" . "` + i + `" }`,
		`nft delete element inet nftcni_firewall bridges { "br0" }`,
		`nft add element inet nftcni_firewall bridges { "br0" comment "` + other.Tag() + `" }`,
		`nft delete element inet nftcni_firewall bridge_self { "br0" . "br0" }`,
		`nft add element inet nftcni_firewall bridge_self { "br0" . "br0" comment "` + other.Tag() + `" }`,
		`nft delete element inet nftcni_firewall counts4 { 10.1.0.5 }`,
		`nft delete element inet nftcni_firewall counts6 { fd00:1::5 }`,
		`nft delete element inet nftcni_firewall bridge_counts { "br0" }`,
		`nft add element inet nftcni_firewall bridge_counts { "br0" : 1 }`,
		markerNote("delete", sample, ""),
		`nft delete rule inet filter forward handle 2`,
	})
}

// The last rules in an iptables-nft filter table that holds nothing else —
// what Setup created — go with the table; a table with anything of
// anyone's besides (a chain, a DROP policy) stays.
func TestGoldenTeardownPrunesIptablesTable(t *testing.T) {
	t.Parallel()
	accept, drop := uint32(nftables.ChainPolicyAccept), uint32(nftables.ChainPolicyDrop)
	s := sample.Tag()
	st := nfttest.State{Gen: 5,
		Tables:   map[string]bool{"ip filter": true, "ip6 filter": true},
		Chains:   map[string][]string{"ip filter FORWARD": {s, s}, "ip6 filter FORWARD": {s, s}},
		Policies: map[string]uint32{"ip filter FORWARD": accept, "ip6 filter FORWARD": accept},
	}
	f := run(t, st, func(ns *netns.NS) error { return Teardown(ns, sample, nil) })
	nfttest.Golden(t, "teardown_prune", f.Only(t), []string{
		`nft delete rule ip filter FORWARD handle 2`,
		`nft delete rule ip filter FORWARD handle 3`,
		`nft delete table ip filter`,
		`nft delete rule ip6 filter FORWARD handle 2`,
		`nft delete rule ip6 filter FORWARD handle 3`,
		`nft delete table ip6 filter`,
	})
	for name, edit := range map[string]func(*nfttest.State){
		"DROP policy":   func(st *nfttest.State) { st.Policies["ip filter FORWARD"] = drop },
		"another chain": func(st *nfttest.State) { st.Chains["ip filter DOCKER-USER"] = nil },
		"another rule":  func(st *nfttest.State) { st.Chains["ip filter FORWARD"] = []string{s, "docker", s} },
	} {
		st := nfttest.State{Gen: 5, Tables: map[string]bool{"ip filter": true},
			Chains: map[string][]string{"ip filter FORWARD": {s, s}}, Policies: map[string]uint32{"ip filter FORWARD": accept}}
		edit(&st)
		f := run(t, st, func(ns *netns.NS) error { return Teardown(ns, sample, nil) })
		for _, m := range f.Only(t) {
			if int(m.Header.Type)&0xff == unix.NFT_MSG_DELTABLE {
				t.Errorf("%s: the table was deleted", name)
			}
		}
	}
}

// Nothing to remove: no batch at all, and no table is created.
func TestTeardownNothingSendsNothing(t *testing.T) {
	t.Parallel()
	absent := sample
	absent.ContainerID = "absent"
	for name, st := range map[string]nfttest.State{"no table": {Gen: 3}, "not present": existing()} {
		f, ns := use(t, st)
		if err := Teardown(ns, absent, nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := GC(ns, "othernet", nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := GC(ns, "mynet", []ownerid.Owner{sample, other}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(f.Batches) != 0 {
			t.Errorf("%s: %d batches sent, want none", name, len(f.Batches))
		}
	}
}

// Foreign rules are found by tag even when our table is gone.
func TestTeardownForeignWithoutTable(t *testing.T) {
	t.Parallel()
	st := nfttest.State{Gen: 5, Tables: map[string]bool{"ip6 filter": true}, Chains: map[string][]string{
		"ip6 filter FORWARD": {"x", sample.Tag(), sample.Tag()},
	}}
	f := run(t, st, func(ns *netns.NS) error { return Teardown(ns, sample, nil) })
	nfttest.Golden(t, "teardown_foreign", f.Only(t), []string{
		`nft delete rule ip6 filter FORWARD handle 3`,
		`nft delete rule ip6 filter FORWARD handle 4`,
	})
}

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		edit func(*nfttest.State)
		a    Attachment
		want string // "" = passes
	}{
		{"complete", func(*nfttest.State) {}, sampleAttachment, ""},
		{"other", func(*nfttest.State) {}, Attachment{Owner: other, Addrs: []netip.Addr{netip.MustParseAddr("10.1.0.7")}, Bridge: "br0", Policy: PolicySameBridge}, ""},
		{"no table", func(s *nfttest.State) { delete(s.Tables, "inet nftcni_firewall") }, sampleAttachment, "table inet nftcni_firewall not found"},
		{"rules changed", func(s *nfttest.State) { s.Chains["inet nftcni_firewall forward"] = ruleComments()[1:] }, sampleAttachment,
			"chain inet nftcni_firewall forward does not hold the firewall's rules"},
		{"no admin chain", func(s *nfttest.State) { delete(s.Chains, "inet nftcni_firewall CNI-ADMIN") }, sampleAttachment,
			"admin chain inet nftcni_firewall CNI-ADMIN not found"},
		{"other admin chain", func(*nfttest.State) {}, Attachment{Owner: sample, AdminChain: "MINE"}, "admin chain inet nftcni_firewall MINE not found"},
		{"no claim", func(s *nfttest.State) {
			s.Sets["inet nftcni_firewall owners4"] = s.Sets["inet nftcni_firewall owners4"][1:]
		}, sampleAttachment, "address 10.1.0.5: no element for this attachment in set inet nftcni_firewall owners4"},
		{"no lookup element", func(s *nfttest.State) { s.Sets["inet nftcni_firewall allow6"] = nil }, sampleAttachment,
			"address fd00:1::5: no element in set inet nftcni_firewall allow6"},
		{"no bridge", func(s *nfttest.State) { s.Sets["inet nftcni_firewall bridge_self"] = nil }, sampleAttachment,
			`bridge "br0": no element in set inet nftcni_firewall bridge_self`},
		{"isolated", func(*nfttest.State) {}, Attachment{Owner: sample, Bridge: "br0", Policy: PolicyIsolated},
			`bridge "br0": no element for this attachment in set inet nftcni_firewall isolated_owners`},
		{"foreign rule gone", func(s *nfttest.State) { s.Chains["ip filter FORWARD"] = s.Chains["ip filter FORWARD"][:4] }, sampleAttachment,
			"chain ip filter FORWARD: 1 accept rules of this attachment, want 2"},
		// A table called filter without iptables-nft's chains: not
		// iptables-nft's, Setup would not have created FORWARD there.
		{"foreign chain gone", func(s *nfttest.State) { delete(s.Chains, "ip filter FORWARD") }, sampleAttachment, ""},
		{"foreign table gone", func(s *nfttest.State) { delete(s.Chains, "ip6 filter FORWARD"); delete(s.Tables, "ip6 filter") }, sampleAttachment,
			"chain ip6 filter FORWARD not found: want 2 accept rules of this attachment there"},
		{"portmap's rules do not count", func(s *nfttest.State) {
			s.Chains["ip6 filter FORWARD"] = []string{sample.ComponentTag("portmap"), sample.Tag()}
		}, sampleAttachment, "chain ip6 filter FORWARD: 1 accept rules of this attachment, want 2"},
		{"accept chain", func(s *nfttest.State) { s.Chains["inet filter forward"] = []string{sample.Tag()} }, withChain(sampleAttachment, "inet filter forward"),
			"chain inet filter forward: 1 accept rules of this attachment, want 4"},
		{"accept chain missing", func(s *nfttest.State) {}, withChain(sampleAttachment, "ip fw fwd"),
			"chain ip fw fwd (nftablesAcceptChains) not found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := existing()
			tt.edit(&st)
			f, ns := use(t, st)
			err := Check(ns, tt.a)
			if got := errText(err); got != tt.want {
				t.Errorf("Check = %q, want %q", got, tt.want)
			}
			if len(f.Batches) != 0 {
				t.Errorf("Check sent %d batches", len(f.Batches))
			}
		})
	}
}

// Where ADD puts no accepts into iptables-nft's chains (foreign.Use),
// CHECK wants none there; where it does, it wants them.
func TestCheckIptablesUse(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		edit    func(*nfttest.State)
		use     foreign.Use
		program bool // an iptables program on the host
		want    string
	}{
		{"no iptables", withoutIptables, foreign.UseAuto, false, ""},
		{"no iptables program, but its table", func(*nfttest.State) {}, foreign.UseAuto, false, ""},
		{"no iptables program, its table without our rules", func(s *nfttest.State) { s.Chains["ip filter FORWARD"] = []string{"docker"} }, foreign.UseAuto, false,
			"chain ip filter FORWARD: 0 accept rules of this attachment, want 2"},
		{"always", withoutIptables, foreign.UseAlways, false, "chain ip filter FORWARD not found: want 2 accept rules of this attachment there"},
		{"never", func(*nfttest.State) {}, foreign.UseNever, true, "chain ip filter FORWARD: 2 accept rules of this attachment, want 0"},
		{"never, none there", withoutIptables, foreign.UseNever, true, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := existing()
			tt.edit(&st)
			_, ns := use(t, st)
			a := sampleAttachment
			if !tt.program {
				a = noIptables(a)
			}
			a.Iptables = tt.use
			if got := errText(Check(ns, a)); got != tt.want {
				t.Errorf("Check = %q, want %q", got, tt.want)
			}
		})
	}
}

// withoutIptables removes iptables-nft's tables from s.
func withoutIptables(s *nfttest.State) {
	for _, fam := range []string{"ip", "ip6"} {
		delete(s.Tables, fam+" filter")
		delete(s.Chains, fam+" filter FORWARD")
	}
}

func withChain(a Attachment, chain string) Attachment {
	ch, err := foreign.Parse(chain)
	if err != nil {
		panic(err)
	}
	a.AcceptChains = []foreign.Chain{ch}
	return a
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestSetupRejects(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		a    Attachment
		want string
	}{
		{Attachment{Owner: sample, Addrs: []netip.Addr{{}}}, "invalid address invalid IP"},
		{Attachment{Owner: sample, Policy: PolicySameBridge}, `invalid bridge name ""`},
		{Attachment{Owner: sample, Policy: PolicyIsolated, Bridge: "a-very-long-bridge"}, `invalid bridge name "a-very-long-bridge"`},
		{Attachment{Owner: sample, AdminChain: "forward"}, `admin chain name "forward" is one of the firewall's own chains`},
		{Attachment{Owner: sample, AdminChain: "admin-jumps"}, `admin chain name "admin-jumps" is one of the firewall's own chains`},
	} {
		f, ns := use(t, nfttest.State{})
		err := Setup(ns, tt.a)
		if err == nil || !strings.HasSuffix(err.Error(), tt.want) {
			t.Errorf("Setup(%+v) = %v, want …%s", tt.a, err, tt.want)
		}
		if len(f.Batches) != 0 {
			t.Errorf("batch sent for %+v", tt.a)
		}
	}
}

// A concurrent commit between our reads and our batch makes the kernel
// refuse the batch; Setup reads again and commits at the new generation.
func TestSetupRetriesOnGenerationChange(t *testing.T) {
	t.Parallel()
	f, ns := use(t, nfttest.State{Gen: 7})
	f.Interfere = 1
	if err := Setup(ns, sampleAttachment); err != nil {
		t.Fatal(err)
	}
	if len(f.Batches) != 2 || f.State.Gen != 9 {
		t.Errorf("%d batches, generation %d; want 2 (refused, then committed), 9", len(f.Batches), f.State.Gen)
	}
}

// A table of an earlier version (claims, no markers, no counts): the first
// Setup, the old way, writes the markers and counts of every owner; the
// owner's accepts in iptables-nft's FORWARD chains become marked.
func TestGoldenSetupMigrates(t *testing.T) {
	t.Parallel()
	f := run(t, existingV1(), func(ns *netns.NS) error { return Setup(ns, sampleAttachment) })
	s, o := nft.MarkerWith(sample, sampleRecord), nft.MarkerWith(other, otherRecord)
	nfttest.Golden(t, "setup_migrates", f.Only(t), nfttest.Cat(nfttest.ExistingChains(staticNotes), []string{
		`nft add element inet nftcni_firewall counts4 { 10.1.0.5 : 1, 10.1.0.7 : 1 }`,
		`nft add element inet nftcni_firewall counts6 { fd00:1::5 : 1 }`,
		`nft add element inet nftcni_firewall bridge_counts { "br0" : 2 }`,
		`nft add element inet nftcni_firewall owners { "` + string(s.Key) + `" comment "` + s.Comment + `", "` + string(o.Key) + `" comment "` + o.Comment + `" }`,
	},
		// sample's per-address rules in iptables-nft's FORWARD chains,
		// from the earlier version, give way to its claims (other's stay
		// until its own next Setup or DEL).
		[]string{
			`nft delete rule ip filter FORWARD handle 5`, `nft delete rule ip filter FORWARD handle 6`,
			`nft delete rule ip6 filter FORWARD handle 2`, `nft delete rule ip6 filter FORWARD handle 3`,
		},
		nfttest.MarkTableNotes(), newClaimNotes(sample.Tag(), false, true, "10.1.0.5"), newClaimNotes(sample.Tag(), false, true, "fd00:1::5")))
}

// With its marker's record, Teardown finds the owner's claims by lookups:
// its own address goes with its count; the bridge, which sample still
// claims and whose elements are tagged with sample, only counts down.
// (The owner's rules in iptables-nft's chain are read: the fake has no
// index.) The same Teardown of sample, whose tag is on the bridge's
// elements, must hand them to other and so runs the old way
// (TestGoldenTeardown).
func TestGoldenTeardownFast(t *testing.T) {
	t.Parallel()
	f := run(t, existing(), func(ns *netns.NS) error { return Teardown(ns, other, nil) })
	j := id(other)
	nfttest.Golden(t, "teardown_fast", f.Only(t), []string{
		`nft delete element inet nftcni_firewall owners4 { 10.1.0.7 . "` + j + `" }`,
		`nft delete element inet nftcni_firewall counts4 { 10.1.0.7 }`,
		`nft delete element inet nftcni_firewall allow4 { 10.1.0.7 }`,
		`nft delete element inet nftcni_firewall bridge_owners { "br0" . "` + j + `" }`,
		`nft delete element inet nftcni_firewall bridge_counts { "br0" }`,
		`nft add element inet nftcni_firewall bridge_counts { "br0" : 1 }`,
		markerNote("delete", other, ""),
		`nft delete rule ip filter FORWARD handle 2`,
		`nft delete rule ip filter FORWARD handle 3`,
	})
	for _, r := range f.Reads {
		if strings.HasPrefix(r, "dump ") {
			t.Errorf("read %s", r)
		}
	}
	f = run(t, existing(), func(ns *netns.NS) error { return Teardown(ns, sample, nil) })
	if !slices.Contains(f.Reads, "dump inet nftcni_firewall owners4") {
		t.Errorf("sample's Teardown did not fall back to reading the claims: %v", f.Reads)
	}
}
