package firewall

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
	"github.com/nftcni/nftcni/ownerid"
)

// Notes for the firewall's accepts for iptables-nft's FORWARD chains,
// marked (nft/foreign, nfttest.MarkTableNotes).

const sharedTag = nfttest.SharedTag

// newClaimNotes are the notes of a first Sync of tag with addrs (one
// family) for their chain, the chain's first owner when first: lookup
// elements, claims, the chain (created when create), the shared rule,
// the counts.
func newClaimNotes(tag string, create, first bool, addrs ...string) []string {
	ch := nfttest.FwdChain(addrs[0])
	n := "4"
	if strings.HasPrefix(ch, "ip6") {
		n = "6"
	}
	var out []string
	for _, a := range addrs {
		out = append(out,
			`nft add element inet nftcni_accept from`+n+` { `+a+` }`,
			`nft add element inet nftcni_accept replies`+n+` { `+a+` }`)
	}
	for i, a := range addrs {
		out = append(out,
			nfttest.ClaimNote(ch, tag, 2*i, "accept from "+a),
			nfttest.ClaimNote(ch, tag, 2*i+1, "accept replies to "+a))
	}
	if create {
		out = append(out, createNotes(strings.Fields(ch)[0])...)
	}
	if first {
		out = append(out, nfttest.SharedNote(ch))
	}
	for _, a := range addrs {
		k := netip.MustParseAddr(a).AsSlice()
		out = append(out, nfttest.CountNote(nfttest.ElementCountKey(0, k), 1, ""), nfttest.CountNote(nfttest.ElementCountKey(1, k), 1, ""))
	}
	out = append(out, nfttest.CountNote(nfttest.OwnerCountKey(ch, tag), 2*len(addrs), tag))
	if first {
		out = append(out, nfttest.CountNote(nfttest.UsersCountKey(ch), 1, ""))
	}
	return out
}

// markedState adds to st what Setups of the marked layout leave for the
// iptables-nft FORWARD chains: table inet nftcni_accept with the lookup
// elements, claims and counts of each owner's addrs, and the shared rule
// at the head of each chain that has owners.
func markedState(st nfttest.State, owners map[ownerid.Owner][]string) nfttest.State {
	st.Tables["inet nftcni_accept"] = true
	st.Chains["inet nftcni_accept mark"] = []string{
		"nftcni accept v1: from container4", "nftcni accept v1: replies4", "nftcni accept v1: dnat4", "nftcni accept v1: dnat replies4",
		"nftcni accept v1: from container6", "nftcni accept v1: replies6", "nftcni accept v1: dnat6", "nftcni accept v1: dnat replies6",
	}
	st.Chains["inet nftcni_accept unmark"] = []string{"nftcni accept v1: unmark"}
	sets := map[string][]nfttest.Elem{}
	for _, s := range []string{"from4", "from6", "replies4", "replies6", "dnat4", "dnat6", "claims", "counts"} {
		sets[s] = nil
	}
	users := map[string]int{}
	elems := map[string]int{}
	for o, addrs := range owners {
		tag := o.Tag()
		slots := map[string]int{}
		for _, a := range addrs {
			ip := netip.MustParseAddr(a)
			ch, n, fam := nfttest.FwdChain(a), "4", byte(4)
			if ip.Is6() {
				n, fam = "6", 6
			}
			for kind, set := range []string{"from" + n, "replies" + n} {
				ek := nfttest.ElementCountKey(kind, ip.AsSlice())
				if elems[ek] == 0 {
					sets[set] = append(sets[set], nfttest.Elem{Key: ip.AsSlice()})
				}
				elems[ek]++
				data := make([]byte, 2*nft.IfnameLen)
				data[0], data[1] = byte(kind)+1, fam
				copy(data[8:], ip.AsSlice())
				h := ownerid.ShortHash("claims " + tag + " " + ch)
				sets["claims"] = append(sets["claims"], nfttest.Elem{
					Key: nft.Concat(nft.IfnameKey(h), nft.IfnameKey(strconv.Itoa(slots[ch]))), Val: data, Comment: tag})
				slots[ch]++
			}
		}
		for ch, k := range slots {
			sets["counts"] = append(sets["counts"], withComment(countElem(nft.IfnameKey(nfttest.OwnerCountKey(ch, tag)), uint32(k)), tag))
			users[ch]++
		}
	}
	for ek, n := range elems {
		sets["counts"] = append(sets["counts"], countElem(nft.IfnameKey(ek), uint32(n)))
	}
	for ch, n := range users {
		sets["counts"] = append(sets["counts"], countElem(nft.IfnameKey(nfttest.UsersCountKey(ch)), uint32(n)))
		st.Chains[ch] = append([]string{sharedTag}, slices.DeleteFunc(slices.Clone(st.Chains[ch]), func(c string) bool {
			_, ours := ownerid.ParseTag(c)
			return ours
		})...)
	}
	for s, els := range sets {
		st.Sets["inet nftcni_accept "+s] = els
	}
	return st
}

func withComment(e nfttest.Elem, c string) nfttest.Elem { e.Comment = c; return e }

// existingMarked is existing() as this version leaves it: the owners'
// accepts for the FORWARD chains marked, not per-address rules.
func existingMarked() nfttest.State {
	return markedState(existing(), map[ownerid.Owner][]string{sample: {"10.1.0.5", "fd00:1::5"}, other: {"10.1.0.7"}})
}
