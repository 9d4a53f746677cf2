package vmtest

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

// SubsetPkg is one package of a subset and the tests of it that run.
type SubsetPkg struct {
	Pkg   string   // relative to the module root, "./plugins/bridge"
	Tests []string // top-level test names; none: all of the package
}

// run is the package's -test.run.
func (p SubsetPkg) run() string {
	if len(p.Tests) == 0 {
		return ""
	}
	return "^(" + strings.Join(p.Tests, "|") + ")$"
}

// lifecycle is a plugin package's tests of ADD with traffic, CHECK and
// DEL, where they are separate tests.
func lifecycle(pkg string, traffic ...string) SubsetPkg {
	return SubsetPkg{Pkg: pkg, Tests: append(traffic, "TestCheck", "TestDel")}
}

// Subsets are named selections of the privileged suite for runs that
// cannot afford all of it.
//
// smoke is what CI runs on the emulated arm64 guest: every plugin's ADD,
// CHECK and DEL with packets flowing. The examples run their chains
// (bridge, ptp, macvlan, ipvlan, dhcp with a real dnsmasq, host-local,
// portmap, firewall, tuning, bandwidth) through the CLI with traffic,
// CHECK, DEL twice and nothing left; the plugins no example uses run
// their traffic test with their CHECK and DEL tests, and a few tests where
// the architecture could matter (ioctls and struct layouts: tap's
// TUNSETIFF and owner, the qdiscs bandwidth reads back, hostdevice moving
// a device, the dhcp daemon's binary end to end) come along, as do the
// layers below the plugins whole (netlink and nftables messages, tc
// structures, namespaces), quick and where a layout would show first.
// TestSubsetCoversEveryPlugin keeps it complete.
var Subsets = map[string][]SubsetPkg{
	"smoke": {
		{Pkg: "./examples"},
		{Pkg: "./ipam/dhcp", Tests: []string{"TestBinary"}},
		{Pkg: "./ipam/static"}, // its traffic: the dummy and vlan tests use static IPAM
		lifecycle("./plugins/bandwidth", "TestKernelStateAfterAdd"),
		lifecycle("./plugins/dummy", "TestKernelState"),
		lifecycle("./plugins/hostdevice", "TestMoveInAndBack"),
		{Pkg: "./plugins/loopback"},
		lifecycle("./plugins/sbr", "TestRepliesLeaveByTheirInterface"),
		lifecycle("./plugins/tap", "TestTapAsConfigured", "TestPacketsLeaveTheTap"),
		lifecycle("./plugins/vlan", "TestTraffic"),
		lifecycle("./plugins/vrf", "TestIsolation"),
		{Pkg: "./netns"},
		{Pkg: "./sysctl"},
		{Pkg: "./netlinkx"},
		{Pkg: "./netlinkx/qdisc"},
		{Pkg: "./nft"},
		{Pkg: "./nft/firewall"},
		{Pkg: "./nft/masq"},
		{Pkg: "./nft/portmap"},
	},
}

func subsetNames() string {
	names := make([]string, 0, len(Subsets))
	for n := range Subsets {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func subsetPatterns(name string) []string {
	var pats []string
	for _, p := range Subsets[name] {
		pats = append(pats, p.Pkg)
	}
	return pats
}

// applySubset keeps the packages of the subset, in its order, each with
// its -test.run.
func applySubset(name string, pkgs []testPkg) ([]testPkg, error) {
	byRel := map[string]testPkg{}
	for _, p := range pkgs {
		byRel[filepath.ToSlash(p.Rel)] = p
	}
	var out []testPkg
	for _, s := range Subsets[name] {
		p, ok := byRel[strings.TrimPrefix(s.Pkg, "./")]
		if !ok {
			return nil, fmt.Errorf("subset %s: package %s has no tests", name, s.Pkg)
		}
		if strings.ContainsAny(s.run(), " \t\n") {
			return nil, fmt.Errorf("subset %s: package %s: white space in the run pattern %q", name, s.Pkg, s.run())
		}
		p.Run = s.run()
		out = append(out, p)
	}
	return out, nil
}
