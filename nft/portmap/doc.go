// Package portmap forwards host ports to containers with nftables maps: the
// portmap plugin's data plane.
//
// # Data model
//
// One table per family (ip, ip6), so that the maps' address types are
// fixed; both are written in the same batch. For ip:
//
//	table ip nftcni_portmap {
//		map hostip_ports {
//			type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service
//			elements = { 192.0.2.1 . tcp . 8080 : 10.1.0.5 . 80 comment "<owner tag>" }
//		}
//		map ports {
//			type inet_proto . inet_service : ipv4_addr . inet_service
//			elements = { tcp . 8080 : 10.1.0.5 . 80 comment "<owner tag>" }
//		}
//		map hairpins {
//			type ipv4_addr : verdict
//			elements = { 10.1.0.5 : jump hairpin_24 comment "<owner tag>" }
//		}
//		set hairpin_local {
//			type ipv4_addr . ipv4_addr
//			elements = { 10.1.0.5 . 10.1.0.0 comment "<owner tag>" }
//		}
//		set localhost {
//			type ipv4_addr
//			elements = { 10.1.0.5 comment "<owner tag>" }
//		}
//		set localnet {
//			type ifname . ifname
//			elements = { "cni0" . "<attachment hash>" comment "<owner tag>" }
//		}
//		map localnet_prior {
//			type ifname : mark
//			elements = { "cni0" : 0x00000000 comment "nftcni portmap: route_localnet before nftcni" }
//		}
//		set owners {
//			type ifname
//			elements = { "<attachment hash>" comment "<tag hashes> =<the Setup's mappings and addresses>" }
//		}
//		chain prerouting {
//			type nat hook prerouting priority dstnat; policy accept;
//			ip daddr 127.0.0.0/8 return
//			fib daddr type local jump hostports
//		}
//		chain output {
//			type nat hook output priority dstnat; policy accept;
//			fib daddr type local jump hostports
//		}
//		chain hostports {
//			jump conditional
//			dnat ip to ip daddr . meta l4proto . th dport map @hostip_ports
//			dnat ip to meta l4proto . th dport map @ports
//		}
//		chain conditional {
//			ip saddr 192.168.0.0/16 tcp dport 8080 dnat ip to 10.1.0.5:80 comment "<owner tag>"
//		}
//		chain postrouting {
//			type nat hook postrouting priority srcnat; policy accept;
//			ct status dnat ip daddr vmap @hairpins
//			ct status dnat ip saddr 127.0.0.0/8 ip daddr @localhost masquerade
//		}
//		chain hairpin_24 {
//			ip daddr . ip saddr & 255.255.255.0 @hairpin_local masquerade
//		}
//		chain input {
//			type filter hook input priority filter; policy accept;
//			iifname != "lo" ip daddr 127.0.0.0/8 ip saddr != 127.0.0.0/8 ct state != { established, related } ct status != dnat drop
//		}
//	}
//
// The ip6 table is the same without localhost, localnet, localnet_prior
// and input, and prerouting returns for ip6 daddr ::1. There is no
// localhost forwarding for IPv6 (nor in the reference): IPv6 has no
// route_localnet, so a packet from ::1 cannot leave through the interface
// towards the container, and a reply translated back to ::1 on its way in
// finds no route (the kernel accepts a loopback destination on lo only).
//
// Loopback destinations: mappings, with a hostIP in 127.0.0.0/8 or ::1 or
// none, forward packets sent to a loopback address only when they come
// from this host, which the hook decides (see loopbackOnlyFromHost).
//
// Why maps: the reference walks one rule per mapping (nft) or per
// container (iptables) for the first packet of every connection to a
// local address; here it is two hash lookups however many mappings the
// host has, and a host-IP-specific mapping always beats a wildcard one
// because its map is consulted first.
//
// Conditions (conditionsV4/V6) cannot be map keys. A container whose
// config has them gets ordinary rules in the conditional chain, tagged
// with its owner tag and consulted before the maps; only such configs pay
// a per-rule cost. Their host ports are not checked for conflicts:
// conditions may make two claims disjoint.
//
// Masquerade: hairpin (a container, or anything in its subnet, reaching a
// host port that leads back into that subnet: the destination container
// jumps to the chain of its prefix length, which masquerades when the
// source masked to that length is the container's subnet address — one
// chain per prefix length in use, never removed, and only hash lookups,
// where layout v1's interval set of (subnet . container) cost every
// change time in proportion to the set) and localhost clients are
// masqueraded only for connections we DNATed (`ct status dnat`), and
// hairpin covers the container's whole subnet as the reference's iptables
// backend does. masqAll (Spec.MasqAll) widens an address's hairpin to
// every source: the address jumps to hairpin_0, whose mask leaves nothing
// of the source, so its element (address . 0.0.0.0) masquerades every
// client of its mapped ports — still one element per address and set,
// and still only for connections we DNATed.
// Localhost forwarding needs route_localnet on the interface towards the
// container; localnet and localnet_prior record who needs it and what to
// give back when nobody does (localnet.go). The input chain is
// kube-proxy's guard for CVE-2020-8558: route_localnet would otherwise let
// neighbours on that interface reach services bound to 127.0.0.1.
//
// # Ownership
//
// Every element and conditional rule carries the owner tag. A map key is
// unique, so a host port held by another owner fails Setup with a
// *ConflictError naming the holder, instead of being silently shadowed as
// in the reference; the same owner setting up again replaces its own
// state. Teardown removes what carries the owner's tag, GC what carries
// the network's hash and no valid attachment's. Each Setup, Teardown and GC
// is one batch for both tables, guarded by the ruleset generation.
//
// # Other owners' forward chains
//
// A mapped connection is forwarded: a DROP policy in another table's
// forward chain drops it whatever we DNAT — iptables-nft's `filter
// FORWARD` once Docker or kube-proxy set `iptables -P FORWARD DROP`, or an
// administrator's `inet filter forward` with policy drop. The reference
// adds no filter rule for its mappings, so with such a policy its host
// ports stop working (unless something else accepts them). Setup lets
// the connections DNATed to each container address, protocol and port
// mapped to through those chains (package nft/foreign). In iptables-nft's
// FORWARD chains (created as iptables-nft would when missing, so a DROP
// policy set later finds them) that is the one shared rule
// `-m mark --mark 0x1000/0x1000 -j ACCEPT` and an element
// `10.1.0.5 . tcp . 80` of set dnat4 in table inet nftcni_accept, whose
// chain marks both directions of connections DNATed there (`ct status
// dnat`), and nothing else; in the chains of Spec.AcceptChains, native
// rules per address. The claims and rules carry the owner's component tag
// (ownerid.Owner.ComponentTag, component "portmap"), so the firewall
// plugin's accepts of the same attachment stay apart; Teardown removes
// them, GC finds stale ones wherever they are.
//
// The owners set holds one marker per owner with state in the table
// (nft.OwnersSet), recording the Setup's mappings, addresses, localnet
// interfaces and masqAll when they fit in a comment and no condition is
// set. A Setup of an owner without one (every first ADD) looks up only its
// wanted keys — enough to find a held port or an address to take over
// (the hairpin_local element of a hairpins element taken over follows
// from the chain it jumps to) — instead of reading every map and set; a
// Teardown, or a repeated Setup, looks up the elements the record gives:
// so their costs do not grow with the mappings on the host; see Setup and
// Teardown. Two reads still do: the localnet records, read whole when an
// owner gives up an interface (route_localnet goes back only with the
// interface's last record), and named chains of other owners, whose
// rules are found by their comments. Without a record, both read whole sets. Known limit:
// tables written by an nftcni without markers. The first Setup of an owner
// after the upgrade does not see its own elements with other keys (a
// re-ADD with changed ports), which stay, still mapped to it, until GC.
package portmap
