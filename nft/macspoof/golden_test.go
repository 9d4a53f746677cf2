package macspoof

import (
	"net"
	"testing"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
	"github.com/nftcni/nftcni/ownerid"
)

// The golden files pin the exact netlink messages of each operation, each
// annotated with the nft command sending the same request. Regenerate with
// `go test ./nft/macspoof -run Golden -update` and review the diff.

var (
	sample, other = nfttest.Sample, nfttest.Other
	sampleMAC     = net.HardwareAddr{0x02, 0x42, 0x0a, 0x16, 0x00, 0x05}
)

const tbl = "bridge nftcni_macspoof"

var setupNotes = []string{
	`nft add table bridge nftcni_macspoof`,
	`nft add chain bridge nftcni_macspoof prerouting { type filter hook prerouting priority -300; policy accept; }`,
	`nft add set bridge nftcni_macspoof guarded { type ifname; }`,
	`nft add set bridge nftcni_macspoof allowed { type ifname . ether_addr; }`,
	nfttest.OwnersSetNote(tbl),
}

var ruleNotes = []string{
	`nft add rule bridge nftcni_macspoof prerouting iifname . ether saddr @allowed accept comment "nftcni macspoof v1: own MAC"`,
	`nft add rule bridge nftcni_macspoof prerouting iifname @guarded drop comment "nftcni macspoof v1: spoofed MAC"`,
}

func key(name string, mac ...byte) []byte {
	k := nft.IfnameKey(name)
	if mac != nil {
		k = append(append(k, mac...), 0, 0)
	}
	return k
}

// existing: Setup ran for sample (veth1, sampleMAC) and other (veth2).
func existing() nfttest.State {
	return nfttest.State{
		Gen:    12,
		Tables: map[string]bool{"bridge nftcni_macspoof": true},
		Chains: map[string][]string{"bridge nftcni_macspoof prerouting": {
			"nftcni macspoof v1: own MAC", "nftcni macspoof v1: spoofed MAC",
		}},
		Sets: map[string][]nfttest.Elem{
			"bridge nftcni_macspoof guarded": {
				{Key: key("veth1"), Comment: sample.Tag()},
				{Key: key("veth2"), Comment: other.Tag()},
			},
			"bridge nftcni_macspoof allowed": {
				{Key: key("veth1", sampleMAC...), Comment: sample.Tag()},
				{Key: key("veth2", 2, 0, 0, 0, 0, 2), Comment: other.Tag()},
			},
			"bridge nftcni_macspoof owners": {
				nfttest.MarkerWith(sample, "veth1 02:42:0a:16:00:05"), nfttest.MarkerWith(other, "veth2 02:00:00:00:00:02"),
			},
		},
	}
}

func TestGoldenSetupFresh(t *testing.T) {
	t.Parallel()
	f := nfttest.Run(t, nfttest.State{Gen: 1}, func(ns *netns.NS) error {
		return Setup(ns, sample, "veth1", sampleMAC)
	})
	tag := sample.Tag()
	nfttest.Golden(t, "setup_fresh", f.Only(t), nfttest.Cat(setupNotes, ruleNotes, []string{
		`nft add element bridge nftcni_macspoof guarded { "veth1" comment "` + tag + `" }`,
		`nft add element bridge nftcni_macspoof allowed { "veth1" . 02:42:0a:16:00:05 comment "` + tag + `" }`,
		nfttest.CreateMarkerWithNote(tbl, sample, "veth1 02:42:0a:16:00:05"),
	}))
}

// Repeating a Setup writes no element, and reads no whole set: the
// record in the marker gives the owner's elements to look up.
func TestGoldenSetupAgain(t *testing.T) {
	t.Parallel()
	f := nfttest.Run(t, existing(), func(ns *netns.NS) error {
		return Setup(ns, sample, "veth1", sampleMAC)
	})
	nfttest.Golden(t, "setup_again", f.Only(t), nfttest.ExistingChains(setupNotes))
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("dumps %q, want none", d)
	}
}

// A first Setup of an owner on an existing table takes the fast path:
// lookups of its keys only.
func TestGoldenSetupNewOwner(t *testing.T) {
	t.Parallel()
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 9}
	f := nfttest.Run(t, existing(), func(ns *netns.NS) error {
		return Setup(ns, nfttest.Third, "veth9", mac)
	})
	tag := nfttest.Third.Tag()
	nfttest.Golden(t, "setup_new_owner", f.Only(t), nfttest.Cat(nfttest.ExistingChains(setupNotes), []string{
		`nft create element bridge nftcni_macspoof guarded { "veth9" comment "` + tag + `" }`,
		`nft create element bridge nftcni_macspoof allowed { "veth9" . 02:00:00:00:00:09 comment "` + tag + `" }`,
		nfttest.CreateMarkerWithNote(tbl, nfttest.Third, "veth9 02:00:00:00:00:09"),
	}))
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("fast path dumped %q", d)
	}
}

// A recycled port name: the new owner takes over veth2's elements. The
// MAC differs, so the lookup of (veth2 . new MAC) cannot find the old
// owner's (veth2 . old MAC): finding the port taken sends Setup to the
// slow path, which sees and deletes both.
func TestGoldenSetupTakeOver(t *testing.T) {
	t.Parallel()
	newcomer := ownerid.Owner{Network: "mynet", ContainerID: "beef", IfName: "eth0"}
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 3}
	f := nfttest.Run(t, existing(), func(ns *netns.NS) error {
		return Setup(ns, newcomer, "veth2", mac)
	})
	tag := newcomer.Tag()
	nfttest.Golden(t, "setup_takeover", f.Batches[0], nfttest.Cat(nfttest.ExistingChains(setupNotes), []string{
		`nft delete element bridge nftcni_macspoof guarded { "veth2" }`,
		`nft add element bridge nftcni_macspoof guarded { "veth2" comment "` + tag + `" }`,
		`nft delete element bridge nftcni_macspoof allowed { "veth2" . 02:00:00:00:00:02 }`,
		`nft add element bridge nftcni_macspoof allowed { "veth2" . 02:00:00:00:00:03 comment "` + tag + `" }`,
		nfttest.CreateMarkerWithNote(tbl, newcomer, "veth2 02:00:00:00:00:03"),
	}))
	if len(f.Batches) != 1 {
		t.Errorf("%d batches, want 1: the fast path must give up before sending", len(f.Batches))
	}
	if d := f.Dumps(); len(d) != len(sets) {
		t.Errorf("dumps %q, want one per set (slow path)", d)
	}
}

func TestGoldenTeardown(t *testing.T) {
	t.Parallel()
	f := nfttest.Run(t, existing(), func(ns *netns.NS) error {
		return Teardown(ns, sample)
	})
	nfttest.Golden(t, "teardown", f.Only(t), []string{
		`nft delete element bridge nftcni_macspoof guarded { "veth1" }`,
		`nft delete element bridge nftcni_macspoof allowed { "veth1" . 02:42:0a:16:00:05 }`,
		nfttest.DelMarkerNote(tbl, sample),
	})
	if d := f.Dumps(); len(d) != 0 {
		t.Errorf("dumps %q, want none", d)
	}
}

func TestTeardownNothingSendsNothing(t *testing.T) {
	t.Parallel()
	owner := sample
	owner.IfName = "eth9"
	nfttest.SendsNothing(t, existing(),
		func(ns *netns.NS) error { return Teardown(ns, owner) },
		func(ns *netns.NS) error { return GC(ns, "mynet", []ownerid.Owner{sample, other}) })
}

func TestSetupRejects(t *testing.T) {
	t.Parallel()
	f := &nfttest.Fake{}
	ns := f.NS(t)
	for _, tc := range []struct {
		ifname string
		mac    net.HardwareAddr
	}{
		{"", sampleMAC},
		{"a-name-too-long-for-linux", sampleMAC},
		{"veth1", nil},
		{"veth1", net.HardwareAddr{1, 2, 3, 4, 5, 6, 7, 8}},
	} {
		if err := Setup(ns, sample, tc.ifname, tc.mac); err == nil {
			t.Errorf("Setup(%q, %v) accepted", tc.ifname, tc.mac)
		}
	}
	if len(f.Batches) != 0 {
		t.Error("batch sent for invalid input")
	}
}
