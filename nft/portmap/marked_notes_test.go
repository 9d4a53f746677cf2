package portmap

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/nftcni/nftcni/nft/internal/nfttest"
	"github.com/nftcni/nftcni/ownerid"
)

// newDnatNotes are the notes of o's first Sync of one accept for
// connections DNATed to addr:port over proto (6 tcp, 17 udp) for the
// iptables-nft FORWARD chain of addr's family, the chain's first owner
// when first: the lookup element, the claim, the chain (created when
// create), the shared rule, the counts.
func newDnatNotes(o ownerid.Owner, proto, addr, port string, create, first bool) []string {
	return dnatNotes(o, proto, addr, port, create, 0, 0)
}

// dnatNotes are newDnatNotes where elem owners claimed the same accept
// before (its lookup element exists, its count is replaced) and users
// owners had claims for the chain (0: o is the first, the shared rule is
// inserted).
func dnatNotes(o ownerid.Owner, proto, addr, port string, create bool, elem, users int) []string {
	first := users == 0
	ch, tag := nfttest.FwdChain(addr), pm(o)
	fam, n := strings.Fields(ch)[0], "4"
	if fam == "ip6" {
		n = "6"
	}
	name := map[string]string{"6": "tcp", "17": "udp"}[proto]
	p, _ := strconv.Atoi(proto)
	pt, _ := strconv.Atoi(port)
	key := append(netip.MustParseAddr(addr).AsSlice(), byte(p), 0, 0, 0, byte(pt>>8), byte(pt), 0, 0)
	var out []string
	if elem == 0 {
		out = append(out, `nft add element inet nftcni_accept dnat`+n+` { `+addr+` . `+name+` . `+port+` }`)
	}
	out = append(out, nfttest.ClaimNote(ch, tag, 0, "accept DNATed to "+name+" "+netip.AddrPortFrom(netip.MustParseAddr(addr), uint16(pt)).String()))
	if create {
		out = append(out, createNotes(fam)...)
	}
	if first {
		out = append(out, nfttest.SharedNote(ch))
	}
	del := func(k string) string { return `nft delete element inet nftcni_accept counts { "` + k + `" }` }
	if elem > 0 {
		out = append(out, del(nfttest.ElementCountKey(2, key)))
	}
	out = append(out, nfttest.CountNote(nfttest.ElementCountKey(2, key), elem+1, ""), nfttest.CountNote(nfttest.OwnerCountKey(ch, tag), 1, tag))
	if users > 0 {
		out = append(out, del(nfttest.UsersCountKey(ch)))
	}
	return append(out, nfttest.CountNote(nfttest.UsersCountKey(ch), users+1, ""))
}

// existingMarked is existing() as this version leaves it: sample's and
// other's DNAT accepts for ip filter FORWARD marked, not per-address
// rules (sample's firewall accepts too, of which portmap knows nothing).
func existingMarked() nfttest.State {
	return nfttest.Marked(existing(),
		nfttest.Claim{Tag: pm(sample), Kind: 2, Addr: netip.MustParseAddr("10.88.0.5"), Proto: 6, Port: 80},
		nfttest.Claim{Tag: pm(other), Kind: 2, Addr: netip.MustParseAddr("10.88.0.7"), Proto: 17, Port: 5353})
}
