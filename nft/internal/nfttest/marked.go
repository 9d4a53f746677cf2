package nfttest

import (
	"fmt"
	"strings"

	"github.com/nftcni/nftcni/ownerid"
)

// Golden-file notes for the accepts in iptables-nft's FORWARD chains,
// marked (nft/foreign): table inet nftcni_accept, whose elements are each
// attachment's accepts, and the one shared rule per FORWARD chain.

// SharedTag is the shared rule's comment.
const SharedTag = "98d28d7ce706381e:effb6c9e37d86e32 nftcni-marked-accepts"

// MarkTableNotes create table inet nftcni_accept with its sets, chains
// and static rules.
func MarkTableNotes() []string {
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

// FwdChain is the iptables-nft FORWARD chain of addr's family.
func FwdChain(addr string) string {
	if strings.Contains(addr, ":") {
		return "ip6 filter FORWARD"
	}
	return "ip filter FORWARD"
}

// The keys of counts and claims: hashes as interface names, as
// nft/foreign makes them: an owner's count of claims for a chain, a
// chain's count of owners, a lookup element's count of claimants (kind:
// 0 from, 1 replies, 2 DNAT; key the element's), an owner's claim slot.
func OwnerCountKey(chain, tag string) string { return ownerid.ShortHash("owner " + tag + " " + chain) }
func UsersCountKey(chain string) string      { return ownerid.ShortHash("users " + chain) }
func ElementCountKey(kind int, key []byte) string {
	return ownerid.ShortHash(fmt.Sprintf("element %d %x", kind, key))
}
func SlotKey(chain, tag string, i int) string {
	return fmt.Sprintf(`"%s" . "%d"`, ownerid.ShortHash("claims "+tag+" "+chain), i)
}

// ClaimNote adds tag's claim in slot i for chain; the data is the encoded
// accept, shown as what it says.
func ClaimNote(chain, tag string, i int, accept string) string {
	return `nft add element inet nftcni_accept claims { ` + SlotKey(chain, tag, i) + ` : <` + accept + `> comment "` + tag + `" }`
}

// SharedNote inserts the shared rule at the head of chain ("ip filter
// FORWARD" or "ip6 filter FORWARD").
func SharedNote(chain string) string {
	cmd := "iptables-nft"
	if strings.HasPrefix(chain, "ip6") {
		cmd = "ip6tables-nft"
	}
	return cmd + ` -I FORWARD -m mark --mark 0x1000/0x1000 -m comment --comment "` + SharedTag + `" -j ACCEPT`
}

// CountNote sets count key to n (with comment when not empty).
func CountNote(key string, n int, comment string) string {
	c := ""
	if comment != "" {
		c = ` comment "` + comment + `"`
	}
	return fmt.Sprintf(`nft add element inet nftcni_accept counts { "%s" : %d%s }`, key, n, c)
}
