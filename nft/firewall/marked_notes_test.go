package firewall

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/nftcni/nftcni/ownerid"
)

// Notes for the accepts in iptables-nft's FORWARD chains, marked
// (nft/foreign): table inet nftcni_accept, whose elements name each
// attachment's accepts, and the one shared rule per FORWARD chain.

// sharedTag is the shared rule's comment.
const sharedTag = "98d28d7ce706381e:effb6c9e37d86e32 nftcni-marked-accepts"

// markTableNotes create table inet nftcni_accept with its sets, chains
// and static rules.
func markTableNotes() []string {
	out := []string{
		`nft add table inet nftcni_accept`,
		`nft add set inet nftcni_accept from4 { type ipv4_addr; }`,
		`nft add set inet nftcni_accept from6 { type ipv6_addr; }`,
		`nft add set inet nftcni_accept replies4 { type ipv4_addr; }`,
		`nft add set inet nftcni_accept replies6 { type ipv6_addr; }`,
		`nft add set inet nftcni_accept dnat4 { type ipv4_addr . inet_proto . inet_service; }`,
		`nft add set inet nftcni_accept dnat6 { type ipv6_addr . inet_proto . inet_service; }`,
		`nft add map inet nftcni_accept claims { type ifname . ifname : ifname . ifname; }`,
		`nft add map inet nftcni_accept counts { type ifname : integer; }`,
		`nft add chain inet nftcni_accept mark { type filter hook forward priority filter - 1; policy accept; }`,
	}
	const set = `meta mark set meta mark | 0x00001000`
	for _, f := range []struct{ n, ip string }{{"4", "ip"}, {"6", "ip6"}} {
		head := `nft add rule inet nftcni_accept mark meta nfproto ipv` + f.n + ` `
		out = append(out,
			head+f.ip+` saddr @from`+f.n+` `+set+` comment "nftcni accept v1: from container`+f.n+`"`,
			head+f.ip+` daddr @replies`+f.n+` ct state established,related `+set+` comment "nftcni accept v1: replies`+f.n+`"`,
			head+`ct status dnat `+f.ip+` daddr . meta l4proto . th dport @dnat`+f.n+` `+set+` comment "nftcni accept v1: dnat`+f.n+`"`,
			head+`ct status dnat `+f.ip+` saddr . meta l4proto . th sport @dnat`+f.n+` `+set+` comment "nftcni accept v1: dnat replies`+f.n+`"`,
		)
	}
	return append(out,
		`nft add chain inet nftcni_accept unmark { type filter hook forward priority filter + 1; policy accept; }`,
		`nft add rule inet nftcni_accept unmark meta mark & 0x00001000 == 0x00001000 meta mark set meta mark & 0xffffefff comment "nftcni accept v1: unmark"`)
}

// fwdChain is the iptables-nft FORWARD chain of a's family.
func fwdChain(a string) string {
	if strings.Contains(a, ":") {
		return "ip6 filter FORWARD"
	}
	return "ip filter FORWARD"
}

// The keys of counts and claims: hashes as interface names.
func ownerCount(chain, tag string) string { return ownerid.ShortHash("owner " + tag + " " + chain) }
func usersCount(chain string) string      { return ownerid.ShortHash("users " + chain) }
func elementCount(kind int, a string) string {
	return ownerid.ShortHash(fmt.Sprintf("element %d %x", kind, netip.MustParseAddr(a).AsSlice()))
}
func slot(chain, tag string, i int) string {
	return fmt.Sprintf(`"%s" . "%d"`, ownerid.ShortHash("claims "+tag+" "+chain), i)
}

// lookupNotes add addr to the from and replies sets of its family.
func lookupNotes(verb, a string) []string {
	n := "4"
	if strings.Contains(a, ":") {
		n = "6"
	}
	return []string{
		`nft ` + verb + ` element inet nftcni_accept from` + n + ` { ` + a + ` }`,
		`nft ` + verb + ` element inet nftcni_accept replies` + n + ` { ` + a + ` }`,
	}
}

// claimNotes add tag's claims of from and replies accepts of addrs (one
// family), from slot 0 on; the data is the encoded accept, shown here as
// what it says.
func claimNotes(tag string, addrs ...string) []string {
	var out []string
	ch := fwdChain(addrs[0])
	for i, a := range addrs {
		out = append(out,
			`nft add element inet nftcni_accept claims { `+slot(ch, tag, 2*i)+` : <accept from `+a+`> comment "`+tag+`" }`,
			`nft add element inet nftcni_accept claims { `+slot(ch, tag, 2*i+1)+` : <accept replies to `+a+`> comment "`+tag+`" }`)
	}
	return out
}

// sharedNote inserts the shared rule at the head of chain ("ip filter
// FORWARD" or "ip6 filter FORWARD").
func sharedNote(chain string) string {
	cmd := "iptables-nft"
	if strings.HasPrefix(chain, "ip6") {
		cmd = "ip6tables-nft"
	}
	return cmd + ` -I FORWARD -m mark --mark 0x1000/0x1000 -m comment --comment "` + sharedTag + `" -j ACCEPT`
}

// countNote sets count key to n (with comment when not empty).
func countNote(key string, n int, comment string) string {
	c := ""
	if comment != "" {
		c = ` comment "` + comment + `"`
	}
	return fmt.Sprintf(`nft add element inet nftcni_accept counts { "%s" : %d%s }`, key, n, c)
}

// delCountNote deletes count key.
func delCountNote(key string) string {
	return `nft delete element inet nftcni_accept counts { "` + key + `" }`
}

// newClaimNotes are the notes of a first Sync of tag with addrs (one
// family) for their chain, the chain's first owner (users 1) when first:
// lookup elements, claims, the chain (created when create), the shared
// rule, the counts.
func newClaimNotes(tag string, create, first bool, addrs ...string) []string {
	ch := fwdChain(addrs[0])
	var out []string
	for _, a := range addrs {
		out = append(out, lookupNotes("add", a)...)
	}
	out = append(out, claimNotes(tag, addrs...)...)
	if create {
		out = append(out, createNotes(strings.Fields(ch)[0])...)
	}
	if first {
		out = append(out, sharedNote(ch))
	}
	for _, a := range addrs {
		out = append(out, countNote(elementCount(0, a), 1, ""), countNote(elementCount(1, a), 1, ""))
	}
	out = append(out, countNote(ownerCount(ch, tag), 2*len(addrs), tag))
	if first {
		out = append(out, countNote(usersCount(ch), 1, ""))
	}
	return out
}
