// Package privtest holds helpers for privileged tests: tests that need root
// to create network namespaces and links. Every helper works in throwaway
// namespaces of its own, never in the machine's.
//
// Without root the tests skip, so `go test ./...` stays green for
// developers; CI and the VM runner set NFTCNI_REQUIRE_PRIV=1 so a missing
// privilege fails loudly instead of silently skipping everything.
package privtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
)

// Require skips the test unless it runs as root, or fails it when
// NFTCNI_REQUIRE_PRIV=1.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("NFTCNI_REQUIRE_PRIV") == "1" {
		t.Fatal("privileged test needs root (NFTCNI_REQUIRE_PRIV=1)")
	}
	t.Skip("needs root: creates network namespaces")
}

// NoSystemBus is a D-Bus address where nothing listens. Plugins under
// test run in namespaces of the test's own, but a unix socket is reached
// through the file system: a plugin that found the machine's system bus
// (the firewall plugin looks for firewalld there) would change the
// machine's firewall. Tests that need a bus start their own
// (internal/firewalldtest).
const NoSystemBus = "unix:path=/nonexistent/nftcni-test-no-system-bus"

// HideSystemBus points DBUS_SYSTEM_BUS_ADDRESS at NoSystemBus, for this
// process and every child inheriting its environment.
func HideSystemBus() { os.Setenv("DBUS_SYSTEM_BUS_ADDRESS", NoSystemBus) }

var seq atomic.Uint64

// NewNS creates a fresh network namespace for the test, containing only the
// loopback device as the kernel made it (down). It is closed and removed
// when the test ends.
func NewNS(t testing.TB) *netns.NS {
	t.Helper()
	Require(t)
	// t.TempDir is registered for cleanup before our own cleanup, so it runs
	// after it: the bind mount is gone before the directory is removed.
	dir := t.TempDir()
	name := fmt.Sprintf("nftcni-test-%d-%d", os.Getpid(), seq.Add(1))
	ns, err := netns.New(dir, name)
	if err != nil {
		t.Fatalf("creating test netns: %v", err)
	}
	claims := BridgeClaimsDir(ns)
	t.Cleanup(func() {
		// The bridge plugin's address claims of bridges in this
		// namespace: kept in the machine's /run until a reboot, so the
		// namespace's end takes them.
		if claims != "" {
			os.RemoveAll(claims)
		}
		if err := ns.Close(); err != nil {
			t.Errorf("closing test netns: %v", err)
		}
		if err := netns.Remove(ns.Path()); err != nil {
			t.Errorf("removing test netns: %v", err)
		}
	})
	return ns
}

// BridgeClaimsDir is where the bridge plugin keeps the address claims of
// bridges in ns when ns is its host (plugins/bridge claimsDir: a directory
// per host namespace, named by the namespace's device and inode; a test
// there checks that both agree); "" when ns cannot be read.
func BridgeClaimsDir(ns *netns.NS) string {
	var st unix.Stat_t
	if err := unix.Stat(ns.Path(), &st); err != nil {
		return ""
	}
	return filepath.Join("/run/nftcni/bridges", fmt.Sprintf("%x-%x", st.Dev, st.Ino))
}

// probes caches feature probes: key → error (nil: supported).
var probes sync.Map

// requireFeature skips (or, with NFTCNI_REQUIRE_KIND_ALL=1, fails) the test
// when probe reports EOPNOTSUPP; the probe runs once per key.
func requireFeature(t testing.TB, key, msg string, probe func(testing.TB) error) {
	t.Helper()
	Require(t)
	v, ok := probes.Load(key)
	if !ok {
		v, _ = probes.LoadOrStore(key, probe(t))
	}
	err, _ := v.(error)
	if err == nil {
		return
	}
	if !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("probing %s: %v", key, err)
	}
	if os.Getenv("NFTCNI_REQUIRE_KIND_ALL") == "1" {
		t.Fatal(msg + " (NFTCNI_REQUIRE_KIND_ALL=1)")
	}
	t.Skip(msg)
}

// RequireLinkKind skips the test when the kernel cannot create links of the
// given kind (e.g. "dummy", "vlan", "ipvlan", "vrf"), or fails it when
// NFTCNI_REQUIRE_KIND_ALL=1 — set in the VM, whose kernel must have them all.
// The answer is probed once per kind, in a throwaway namespace.
func RequireLinkKind(t testing.TB, kind string) {
	t.Helper()
	requireFeature(t, "link kind "+kind, KindMessage(kind),
		func(t testing.TB) error { return probeKind(t, kind, nil) })
}

// KindMessage is RequireLinkKind's message for a kernel without kind:
// what it lacks and what it needs.
func KindMessage(kind string) string {
	return fmt.Sprintf("%s: kernel has no support for %s links%s", kind, kind, kindNeeds(kind))
}

// linkKinds says, for the link kinds the plugins create, which kernel
// option builds the driver and since when Linux has it ("": long before
// the supported floor, Linux 5.10, see docs/kernels.md). On a supported
// kernel a missing kind is a kernel built without the option, or its
// module not installed.
var linkKinds = map[string]struct{ config, since string }{
	"bridge":  {"CONFIG_BRIDGE", ""},
	"dummy":   {"CONFIG_DUMMY", ""},
	"ifb":     {"CONFIG_IFB", ""},
	"ipvlan":  {"CONFIG_IPVLAN", "3.19"},
	"ipvtap":  {"CONFIG_IPVTAP", "4.13"},
	"macvlan": {"CONFIG_MACVLAN", "2.6.23"},
	"macvtap": {"CONFIG_MACVTAP", "2.6.34"},
	"veth":    {"CONFIG_VETH", "2.6.24"},
	"vlan":    {"CONFIG_VLAN_8021Q", ""},
	"vrf":     {"CONFIG_NET_VRF", "4.3"},
}

// kindNeeds is what a kernel needs for kind, " (needs Linux ≥ 4.3 built
// with CONFIG_NET_VRF)", or "" for a kind not in linkKinds.
func kindNeeds(kind string) string {
	k, ok := linkKinds[kind]
	switch {
	case !ok:
		return ""
	case k.since == "":
		return fmt.Sprintf(" (needs a kernel built with %s)", k.config)
	}
	return fmt.Sprintf(" (needs Linux ≥ %s built with %s)", k.since, k.config)
}

// RequireBridgeVlanFiltering skips the test when bridges cannot filter by
// VLAN (CONFIG_BRIDGE_VLAN_FILTERING is off, as on kernels without 802.1Q),
// or fails it when NFTCNI_REQUIRE_KIND_ALL=1.
func RequireBridgeVlanFiltering(t testing.TB) {
	t.Helper()
	requireFeature(t, "bridge vlan_filtering",
		"bridge vlan_filtering: kernel has no support for VLAN-filtering bridges (needs Linux ≥ 3.9 built with CONFIG_BRIDGE_VLAN_FILTERING)",
		func(t testing.TB) error {
			ae := netlink.NewAttributeEncoder()
			ae.Uint8(unix.IFLA_BR_VLAN_FILTERING, 1)
			data, err := ae.Encode()
			if err != nil {
				return err
			}
			return probeKind(t, "bridge", &rtnetlink.LinkData{Name: "bridge", Data: data})
		})
}

// probeKind asks the kernel to create a link of the kind, with optional
// IFLA_INFO_DATA. The kernel answers EOPNOTSUPP ("Unknown device type") only
// when no driver for the kind exists, even after trying to load its module,
// or when the data asks for a feature compiled out; any other answer,
// including EINVAL for kinds that need more attributes (vlan wants a parent),
// means the kind is there. It returns nil when supported.
func probeKind(t testing.TB, kind string, data rtnetlink.LinkDriver) error {
	ns := NewNS(t)
	c, err := rtnetlink.Dial(&netlink.Config{NetNS: ns.Fd()})
	if err != nil {
		return fmt.Errorf("dialing rtnetlink: %w", err)
	}
	defer c.Close()
	err = c.Link.New(&rtnetlink.LinkMessage{
		Family: unix.AF_UNSPEC,
		Attributes: &rtnetlink.LinkAttributes{
			Name: "probe0",
			Info: &rtnetlink.LinkInfo{Kind: kind, Data: data},
		},
	})
	if errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	return nil
}
