package sysctl_test

import (
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/sysctl"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestGetSet(t *testing.T) {
	ns := privtest.NewNS(t)
	h, err := netlinkx.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	hostBefore, err := sysctl.Get(nil, "net/ipv4/ip_forward")
	must(t, err)
	flip := map[string]string{"0": "1", "1": "0"}[hostBefore]

	must(t, sysctl.Set(ns, "net/ipv4/ip_forward", flip))
	for _, name := range []string{"net/ipv4/ip_forward", "net.ipv4.ip_forward"} {
		got, err := sysctl.Get(ns, name)
		if err != nil || got != flip {
			t.Errorf("Get(ns, %q) = %q, %v; want %q", name, got, err, flip)
		}
	}
	hostAfter, err := sysctl.Get(nil, "net/ipv4/ip_forward")
	must(t, err)
	if hostAfter != hostBefore {
		t.Fatalf("host ip_forward changed from %s to %s", hostBefore, hostAfter)
	}

	// Interface names with dots: slash form as is, dotted form swapped.
	must(t, h.AddBridge(netlinkx.BridgeSpec{Name: "br.5"}))
	must(t, sysctl.Set(ns, "net/ipv6/conf/br.5/accept_ra", "0"))
	got, err := sysctl.Get(ns, "net.ipv6.conf.br/5.accept_ra")
	if err != nil || got != "0" {
		t.Errorf("dotted read = %q, %v", got, err)
	}

	err = sysctl.Set(ns, "net/ipv6/conf/nope0/accept_ra", "0")
	if !errors.Is(err, unix.ENOENT) || err.Error() != "open /proc/sys/net/ipv6/conf/nope0/accept_ra: no such file or directory" {
		t.Errorf("missing sysctl: %v", err)
	}
	if _, err := sysctl.Get(ns, "net/../../etc/hostname"); err == nil {
		t.Error("path escape accepted")
	}
	err = sysctl.Set(ns, "net/ipv4/ip_forward", "bogus")
	if !errors.Is(err, unix.EINVAL) {
		t.Errorf("bad value: %v", err)
	}
}

// IPv4Devconf reads what the file under /proc/sys/net/ipv4/conf holds:
// route_localnet flipped both ways, and other settings by their index
// (rp_filter 8, arp_notify 22), so a wrong index or offset fails.
func TestIPv4Devconf(t *testing.T) {
	ns := privtest.NewNS(t)
	h, err := netlinkx.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	must(t, h.AddBridge(netlinkx.BridgeSpec{Name: "br0"}))
	for _, tc := range []struct {
		file  string
		index int
		value uint32
	}{
		{"route_localnet", sysctl.IPv4RouteLocalnet, 1},
		{"route_localnet", sysctl.IPv4RouteLocalnet, 0},
		{"rp_filter", 8, 2},
		{"arp_notify", 22, 1},
	} {
		must(t, sysctl.Set(ns, "net/ipv4/conf/br0/"+tc.file, fmt.Sprint(tc.value)))
		got, err := sysctl.IPv4Devconf(ns, "br0", tc.index)
		if err != nil || got != tc.value {
			t.Errorf("IPv4Devconf(br0, %d) after %s=%d: %d, %v", tc.index, tc.file, tc.value, got, err)
		}
	}
	if _, err := sysctl.IPv4Devconf(ns, "nope0", sysctl.IPv4RouteLocalnet); !errors.Is(err, sysctl.ErrNoSetting) {
		t.Errorf("missing interface: %v", err)
	}
}

// IPv6Devconf reads what the files under /proc/sys/net/ipv6/conf hold:
// accept_ra through its three values and another setting by its index
// (hop_limit 1), so a wrong index or offset fails.
func TestIPv6Devconf(t *testing.T) {
	ns := privtest.NewNS(t)
	h := privtest.Handle(t, ns)
	must(t, h.AddBridge(netlinkx.BridgeSpec{Name: "br0"}))
	for _, tc := range []struct {
		file  string
		index int
		value int32
	}{
		{"accept_ra", sysctl.IPv6AcceptRA, 0},
		{"accept_ra", sysctl.IPv6AcceptRA, 2},
		{"accept_ra", sysctl.IPv6AcceptRA, 1},
		{"hop_limit", 1, 100},
		{"hop_limit", 1, 64},
	} {
		must(t, sysctl.Set(ns, "net/ipv6/conf/br0/"+tc.file, fmt.Sprint(tc.value)))
		got, err := sysctl.IPv6Devconf(ns, "br0", tc.index)
		if err != nil || got != tc.value {
			t.Errorf("IPv6Devconf(br0, %d) after %s=%d: %d, %v", tc.index, tc.file, tc.value, got, err)
		}
	}
	if _, err := sysctl.IPv6Devconf(ns, "nope0", sysctl.IPv6AcceptRA); !errors.Is(err, sysctl.ErrNoSetting) {
		t.Errorf("missing interface: %v", err)
	}
	// Below IPv6's minimum MTU the link loses its IPv6 state, settings
	// included (disable_ipv6 would keep them).
	must(t, h.SetMTU("br0", 1200))
	if _, err := sysctl.IPv6Devconf(ns, "br0", sysctl.IPv6AcceptRA); !errors.Is(err, sysctl.ErrNoSetting) {
		t.Errorf("link without IPv6: %v, want ErrNoSetting", err)
	}
}

// AllForwarding reads the namespace's ip_forward and all.forwarding as
// their files hold them, both ways, not the default interface's.
func TestAllForwarding(t *testing.T) {
	ns := privtest.NewNS(t)
	for _, tc := range []struct {
		family     uint8
		file, dflt string
		value      int32
	}{
		{unix.AF_INET, "net/ipv4/ip_forward", "net/ipv4/conf/default/forwarding", 1},
		{unix.AF_INET, "net/ipv4/ip_forward", "net/ipv4/conf/default/forwarding", 0},
		{unix.AF_INET6, "net/ipv6/conf/all/forwarding", "net/ipv6/conf/default/forwarding", 1},
		{unix.AF_INET6, "net/ipv6/conf/all/forwarding", "net/ipv6/conf/default/forwarding", 0},
	} {
		must(t, sysctl.Set(ns, tc.file, fmt.Sprint(tc.value)))
		// Writing "all" sets "default" too; set it apart, so a read of
		// the wrong one fails.
		must(t, sysctl.Set(ns, tc.dflt, fmt.Sprint(1-tc.value)))
		got, err := sysctl.AllForwarding(ns, tc.family)
		if err != nil || got != tc.value {
			t.Errorf("AllForwarding(%d) after %s=%d: %d, %v", tc.family, tc.file, tc.value, got, err)
		}
	}
}
