package firewall

import (
	"net/netip"
	"strings"

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
	return claimNotesUsers(tag, create, 0, addrs...)
}

// claimNotesUsers is newClaimNotes for a chain that had users owners
// before (0: tag's is the first, the shared rule is inserted; else the
// chain's count of owners is replaced).
func claimNotesUsers(tag string, create bool, users int, addrs ...string) []string {
	first := users == 0
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
	if users > 0 {
		out = append(out, `nft delete element inet nftcni_accept counts { "`+nfttest.UsersCountKey(ch)+`" }`)
	}
	return append(out, nfttest.CountNote(nfttest.UsersCountKey(ch), users+1, ""))
}

// existingMarked is existing() as this version leaves it: the owners'
// accepts for the FORWARD chains marked, not per-address rules.
func existingMarked() nfttest.State {
	var cl []nfttest.Claim
	for _, c := range []struct {
		o    ownerid.Owner
		addr string
	}{{sample, "10.1.0.5"}, {sample, "fd00:1::5"}, {other, "10.1.0.7"}} {
		for kind := range 2 {
			cl = append(cl, nfttest.Claim{Tag: c.o.Tag(), Kind: kind, Addr: netip.MustParseAddr(c.addr)})
		}
	}
	return nfttest.Marked(existing(), cl...)
}
