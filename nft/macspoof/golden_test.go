package macspoof

import (
	"net"
	"testing"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
)

// The golden files pin the exact netlink messages of each operation, each
// annotated with the nft command sending the same request. Regenerate with
// `go test ./nft/macspoof -run Golden -update` and review the diff.

var (
	sample    = nft.Owner{Network: "mynet", ContainerID: "c0ffee", IfName: "eth0"}
	other     = nft.Owner{Network: "mynet", ContainerID: "decade", IfName: "eth0"}
	sampleMAC = net.HardwareAddr{0x02, 0x42, 0x0a, 0x16, 0x00, 0x05}
)

func useFake(t *testing.T, f *nfttest.Fake) {
	t.Helper()
	old := open
	open = func(*netns.NS) (*nft.Conn, error) { return f.Conn(), nil }
	t.Cleanup(func() { open = old })
}

var setupNotes = []string{
	`nft add table bridge nftcni_macspoof`,
	`nft add chain bridge nftcni_macspoof prerouting { type filter hook prerouting priority -300; policy accept; }`,
	`nft add set bridge nftcni_macspoof guarded { type ifname; }`,
	`nft add set bridge nftcni_macspoof allowed { type ifname . ether_addr; }`,
}

var ruleNotes = []string{
	`nft add rule bridge nftcni_macspoof prerouting iifname . ether saddr @allowed accept comment "nftcni macspoof v1: own MAC"`,
	`nft add rule bridge nftcni_macspoof prerouting iifname @guarded drop comment "nftcni macspoof v1: spoofed MAC"`,
}

func key(name string, mac ...byte) []byte {
	k := ifnameKey(name)
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
		},
	}
}

func cat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestGoldenSetupFresh(t *testing.T) {
	f := &nfttest.Fake{State: nfttest.State{Gen: 1}}
	useFake(t, f)
	if err := Setup(nil, sample, "veth1", sampleMAC); err != nil {
		t.Fatal(err)
	}
	if len(f.Batches) != 1 {
		t.Fatalf("%d batches, want 1", len(f.Batches))
	}
	tag := sample.Tag()
	nfttest.Golden(t, "setup_fresh", f.Batches[0], cat(setupNotes, ruleNotes, []string{
		`nft add element bridge nftcni_macspoof guarded { "veth1" comment "` + tag + `" }`,
		`nft add element bridge nftcni_macspoof allowed { "veth1" . 02:42:0a:16:00:05 comment "` + tag + `" }`,
	}))
}

func TestGoldenSetupAgain(t *testing.T) {
	f := &nfttest.Fake{State: existing()}
	useFake(t, f)
	if err := Setup(nil, sample, "veth1", sampleMAC); err != nil {
		t.Fatal(err)
	}
	if len(f.Batches) != 1 {
		t.Fatalf("%d batches, want 1", len(f.Batches))
	}
	nfttest.Golden(t, "setup_again", f.Batches[0], setupNotes)
}

// A recycled port name: the new owner takes over veth2's elements.
func TestGoldenSetupTakeOver(t *testing.T) {
	f := &nfttest.Fake{State: existing()}
	useFake(t, f)
	newcomer := nft.Owner{Network: "mynet", ContainerID: "beef", IfName: "eth0"}
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 3}
	if err := Setup(nil, newcomer, "veth2", mac); err != nil {
		t.Fatal(err)
	}
	tag := newcomer.Tag()
	nfttest.Golden(t, "setup_takeover", f.Batches[0], cat(setupNotes, []string{
		`nft delete element bridge nftcni_macspoof guarded { "veth2" }`,
		`nft add element bridge nftcni_macspoof guarded { "veth2" comment "` + tag + `" }`,
		`nft delete element bridge nftcni_macspoof allowed { "veth2" . 02:00:00:00:00:02 }`,
		`nft add element bridge nftcni_macspoof allowed { "veth2" . 02:00:00:00:00:03 comment "` + tag + `" }`,
	}))
}

func TestGoldenTeardown(t *testing.T) {
	f := &nfttest.Fake{State: existing()}
	useFake(t, f)
	if err := Teardown(nil, sample); err != nil {
		t.Fatal(err)
	}
	if len(f.Batches) != 1 {
		t.Fatalf("%d batches, want 1", len(f.Batches))
	}
	nfttest.Golden(t, "teardown", f.Batches[0], []string{
		`nft delete element bridge nftcni_macspoof guarded { "veth1" }`,
		`nft delete element bridge nftcni_macspoof allowed { "veth1" . 02:42:0a:16:00:05 }`,
	})
}

func TestTeardownNothingSendsNothing(t *testing.T) {
	for name, st := range map[string]nfttest.State{
		"no table":    {Gen: 3},
		"not present": existing(),
	} {
		f := &nfttest.Fake{State: st}
		useFake(t, f)
		owner := sample
		owner.IfName = "eth9"
		if err := Teardown(nil, owner); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := GC(nil, "mynet", []nft.Owner{sample, other}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(f.Batches) != 0 {
			t.Errorf("%s: %d batches sent, want none", name, len(f.Batches))
		}
	}
}

func TestSetupRejects(t *testing.T) {
	f := &nfttest.Fake{}
	useFake(t, f)
	for _, tc := range []struct {
		ifname string
		mac    net.HardwareAddr
	}{
		{"", sampleMAC},
		{"a-name-too-long-for-linux", sampleMAC},
		{"veth1", nil},
		{"veth1", net.HardwareAddr{1, 2, 3, 4, 5, 6, 7, 8}},
	} {
		if err := Setup(nil, sample, tc.ifname, tc.mac); err == nil {
			t.Errorf("Setup(%q, %v) accepted", tc.ifname, tc.mac)
		}
	}
	if len(f.Batches) != 0 {
		t.Error("batch sent for invalid input")
	}
}
