// Package differential runs every plugin next to the reference plugin of
// the same name (containernetworking/plugins v1.10.0, built from the Go
// module proxy by `make reference`) and wants the same outcome. It holds
// tests only.
//
// Each scenario runs twice, once per implementation, in twin throwaway
// namespaces ("host" and "container" on each side), through libcni as a
// runtime drives it. The two runs must agree on
//
//   - every plugin's printed answer (result JSON: interfaces, IPs, routes,
//     DNS; or the error code),
//   - the kernel state after ADD: links with their kind-specific
//     attributes, bridge port settings and VLANs, txqueuelen, addresses,
//     routes of every table, rules, permanent neighbours and FDB entries,
//     qdiscs and filters, and the sysctls under net/ipv4, net/ipv6 and
//     net/core (per interface included),
//   - what a packet probe sees (a ping, a port mapping, a masqueraded
//     source address) where the plugin's effect is a firewall rule, whose
//     bytes differ by design (native nftables here, iptables there),
//   - CHECK's and DEL's answers, and what DEL leaves behind.
//
// What legitimately differs between two runs of the same plugin is
// normalised before comparing: random host veth names, MAC addresses (and
// the link-local IPv6 addresses made from them), namespace paths, temporary
// directories. Any other difference fails the test unless allowances_test.go
// lists it with its reason, and the plugin's README says it under its
// differences section (TestAllowancesDocumented checks the wording is
// there).
//
// The reference binaries are found in NFTCNI_REFERENCE_DIR (set by `make
// test` and `make vmtest`). Without them the tests skip, saying how to get
// them, or fail under NFTCNI_REQUIRE_PRIV=1. Scenarios that need link kinds
// this kernel lacks (vlan, ipvlan, vrf, dummy on the development machine)
// skip on the host and run in the vmtest VM, which runs only those.
//
//	make test PKGS=./tests/differential/          # as root: builds the reference, runs the suite
//	make vmtest PKG=./tests/differential/         # the scenarios the host cannot run
//	NFTCNI_REFERENCE_DIR=$PWD/.cache/reference/v1.10.0 go test -run 'TestDifferential/scenario/bridge/' ./tests/differential/
//
// For finding out why a scenario differs: NFTCNI_DIFF_OUTPUTS=1 (with -v)
// logs every plugin's printed answer on both sides, NFTCNI_DIFF_DUMP=<regexp>
// logs the objects whose "<phase> <role> <key>" matches, and
// NFTCNI_DIFF_SELF=1 plays the reference on both sides, which shows what
// the normalisation misses (it must find nothing).
package differential
