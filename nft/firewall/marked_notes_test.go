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

// replaceNotes are the notes of sample's accepts for the FORWARD chains
// going from 10.1.0.5 and fd00:1::5 to 10.1.0.6 (TestGoldenSetupReplace):
// its lookup elements no one else claims replaced, its claims rewritten,
// and ip6 filter FORWARD, left without owners, without the shared rule.
func replaceNotes(tag string) []string {
	ip, ip6 := "ip filter FORWARD", "ip6 filter FORWARD"
	del := func(set, k string) string { return `nft delete element inet nftcni_accept ` + set + ` { ` + k + ` }` }
	cnt := func(kind int, a string) string {
		return `"` + nfttest.ElementCountKey(kind, netip.MustParseAddr(a).AsSlice()) + `"`
	}
	slots := func(ch string) string {
		return del("claims", nfttest.SlotKey(ch, tag, 0)+", "+nfttest.SlotKey(ch, tag, 1))
	}
	k6 := netip.MustParseAddr("10.1.0.6").AsSlice()
	return []string{
		del("from4", "10.1.0.5"), del("replies4", "10.1.0.5"),
		`nft add element inet nftcni_accept from4 { 10.1.0.6 }`, `nft add element inet nftcni_accept replies4 { 10.1.0.6 }`,
		slots(ip),
		nfttest.ClaimNote(ip, tag, 0, "accept from 10.1.0.6"), nfttest.ClaimNote(ip, tag, 1, "accept replies to 10.1.0.6"),
		del("counts", cnt(0, "10.1.0.5")), del("counts", cnt(1, "10.1.0.5")),
		nfttest.CountNote(nfttest.ElementCountKey(0, k6), 1, ""), nfttest.CountNote(nfttest.ElementCountKey(1, k6), 1, ""),
		del("counts", `"`+nfttest.OwnerCountKey(ip, tag)+`"`), nfttest.CountNote(nfttest.OwnerCountKey(ip, tag), 2, tag),
		del("counts", `"`+nfttest.UsersCountKey(ip)+`"`), nfttest.CountNote(nfttest.UsersCountKey(ip), 2, ""),
		del("from6", "fd00:1::5"), del("replies6", "fd00:1::5"),
		slots(ip6),
		`nft delete rule ip6 filter FORWARD handle 2`,
		del("counts", cnt(0, "fd00:1::5")), del("counts", cnt(1, "fd00:1::5")),
		del("counts", `"`+nfttest.OwnerCountKey(ip6, tag)+`"`), del("counts", `"`+nfttest.UsersCountKey(ip6)+`"`),
	}
}
