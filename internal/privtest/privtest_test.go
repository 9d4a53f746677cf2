package privtest_test

import (
	"testing"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
)

func TestNewNS(t *testing.T) {
	a := privtest.NewNS(t)
	b := privtest.NewNS(t)
	if a.Path() == b.Path() {
		t.Fatalf("two namespaces share the path %s", a.Path())
	}
	for _, ns := range []interface {
		IsOwn() (bool, error)
	}{a, b} {
		if own, err := ns.IsOwn(); err != nil || own {
			t.Errorf("test netns is the process's own (%v)", err)
		}
	}
	if same, err := a.SameAs(b); err != nil || same {
		t.Errorf("two test namespaces are the same (%v)", err)
	}
	h, err := netlinkx.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links, err := h.Links()
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 1 || links[0].Name != "lo" || links[0].Up {
		t.Errorf("links = %+v, want only lo, down", links)
	}
}

func TestRequireLinkKind(t *testing.T) {
	privtest.Require(t)
	t.Setenv("NFTCNI_REQUIRE_KIND_ALL", "")
	tests := []struct {
		kind    string
		skipped bool
	}{
		{"veth", false},
		{"bridge", false},
		{"nftcni-no-such-kind", true},
	}
	for _, tt := range tests {
		var skipped bool
		t.Run(tt.kind, func(t *testing.T) {
			defer func() { skipped = t.Skipped() }()
			privtest.RequireLinkKind(t, tt.kind)
		})
		if skipped != tt.skipped {
			t.Errorf("%s: skipped = %v, want %v", tt.kind, skipped, tt.skipped)
		}
	}
}

func TestWithoutKernelReasons(t *testing.T) {
	for in, want := range map[string]string{
		`adding address 10.1.0.2/24 to eth0: file exists (ipv4: Address already assigned)`:                                                                `adding address 10.1.0.2/24 to eth0: file exists`,
		`failed to add route '192.168.0.0/16 via 10.99.0.1 dev eth0 metric 0 (Scope: 0, Table: 0)': network is unreachable (Nexthop has invalid gateway)`: `failed to add route '192.168.0.0/16 via 10.99.0.1 dev eth0 metric 0 (Scope: 0, Table: 0)': network is unreachable`,
		`failed to restore MTU: invalid argument (mtu greater than device maximum); failed to restore MAC address: x`:                                     `failed to restore MTU: invalid argument; failed to restore MAC address: x`,
		`no explanation: file exists`: `no explanation: file exists`,
	} {
		if got := privtest.WithoutKernelReasons(in); got != want {
			t.Errorf("WithoutKernelReasons(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestKindMessage: the skip (or failure) for a missing kind says what the
// kernel needs.
func TestKindMessage(t *testing.T) {
	for kind, want := range map[string]string{
		"vrf":   "vrf: kernel has no support for vrf links (needs Linux ≥ 4.3 built with CONFIG_NET_VRF)",
		"vlan":  "vlan: kernel has no support for vlan links (needs a kernel built with CONFIG_VLAN_8021Q)",
		"other": "other: kernel has no support for other links",
	} {
		if got := privtest.KindMessage(kind); got != want {
			t.Errorf("%s: %q, want %q", kind, got, want)
		}
	}
}
