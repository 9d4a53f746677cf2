package nfttest

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/nftcni/nftcni/nft"
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

// Claim is one accept of an owner (Tag) for the iptables-nft FORWARD
// chain of Addr's family: Kind 0 from, 1 replies to, 2 DNATed to
// Addr:Port over Proto.
type Claim struct {
	Tag   string
	Kind  int
	Addr  netip.Addr
	Proto uint8
	Port  uint16
}

func (c Claim) lookupKey() []byte {
	k := c.Addr.AsSlice()
	if c.Kind == 2 {
		k = append(k, c.Proto, 0, 0, 0, byte(c.Port>>8), byte(c.Port), 0, 0)
	}
	return k
}

// Marked adds to st what Setups leave for the iptables-nft FORWARD chains
// in the marked layout (nft/foreign): table inet nftcni_accept with the
// lookup elements, claims (each owner's in the order given) and counts of
// cl, and the shared rule at the head of each chain with owners, in place
// of any rule of ours there.
func Marked(st State, cl ...Claim) State {
	st.Tables["inet nftcni_accept"] = true
	st.Chains["inet nftcni_accept mark"] = []string{
		"nftcni accept v1: from container4", "nftcni accept v1: replies4", "nftcni accept v1: dnat4", "nftcni accept v1: dnat replies4",
		"nftcni accept v1: from container6", "nftcni accept v1: replies6", "nftcni accept v1: dnat6", "nftcni accept v1: dnat replies6",
	}
	st.Chains["inet nftcni_accept unmark"] = []string{"nftcni accept v1: unmark"}
	sets := map[string][]Elem{}
	for _, s := range []string{"from4", "from6", "replies4", "replies6", "dnat4", "dnat6", "claims", "counts"} {
		sets[s] = []Elem{}
	}
	count := func(k string, n int, comment string) Elem {
		return Elem{Key: nft.IfnameKey(k), Val: binary.BigEndian.AppendUint32(nil, uint32(n)), Comment: comment}
	}
	type owner struct{ chain, tag string }
	slots, elems, users := map[owner]int{}, map[string]int{}, map[string]int{}
	var owners []owner
	var order []string
	for _, c := range cl {
		ch, n, fam := FwdChain(c.Addr.String()), "4", byte(4)
		if c.Addr.Is6() {
			n, fam = "6", 6
		}
		set := []string{"from", "replies", "dnat"}[c.Kind] + n
		ek := ElementCountKey(c.Kind, c.lookupKey())
		if elems[ek] == 0 {
			sets[set] = append(sets[set], Elem{Key: c.lookupKey()})
			order = append(order, ek)
		}
		elems[ek]++
		data := make([]byte, 2*nft.IfnameLen)
		data[0], data[1], data[2] = byte(c.Kind)+1, fam, c.Proto
		binary.BigEndian.PutUint16(data[4:], c.Port)
		copy(data[8:], c.Addr.AsSlice())
		o := owner{ch, c.Tag}
		if slots[o] == 0 {
			owners = append(owners, o)
			users[ch]++
		}
		h := ownerid.ShortHash("claims " + c.Tag + " " + ch)
		sets["claims"] = append(sets["claims"], Elem{Key: nft.Concat(nft.IfnameKey(h), nft.IfnameKey(strconv.Itoa(slots[o]))), Val: data, Comment: c.Tag})
		slots[o]++
	}
	for _, o := range owners {
		sets["counts"] = append(sets["counts"], count(OwnerCountKey(o.chain, o.tag), slots[o], o.tag))
	}
	for _, ek := range order {
		sets["counts"] = append(sets["counts"], count(ek, elems[ek], ""))
	}
	for _, ch := range slices.Sorted(maps.Keys(users)) {
		sets["counts"] = append(sets["counts"], count(UsersCountKey(ch), users[ch], ""))
		st.Chains[ch] = append([]string{SharedTag}, slices.DeleteFunc(slices.Clone(st.Chains[ch]), func(c string) bool {
			_, ours := ownerid.ParseTag(c)
			return ours
		})...)
	}
	for s, els := range sets {
		st.Sets["inet nftcni_accept "+s] = els
	}
	return st
}
