package reference

import (
	"net/netip"
	"strings"

	"github.com/google/nftables"

	"github.com/nftcni/nftcni/nft"
)

// The masquerade of bridge and ptp (ipMasq).

// multicast is the multicast range of the family of a: the reference's
// masquerade leaves it alone. (A function, not a variable: parsing at
// init would run on every exec of every plugin.)
func multicast(a netip.Addr) netip.Prefix {
	if a.Is4() {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{224}), 4)
	}
	return netip.PrefixFrom(netip.AddrFrom16([16]byte{0xff}), 8)
}

func nftMasqRules() *nftables.Chain {
	return chain(nftables.TableFamilyINet, nftMasqTable, nftMasqChain)
}

func (h *host) masqFind(a Attachment) ([]Object, error) {
	var out []Object
	name := MasqChain(a.Network, a.ContainerID)
	for _, fam := range ipFamilies {
		ch := chain(fam, "nat", name)
		ok, err := h.chainExists(ch)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // and so no rule jumps to it
		}
		post := chain(fam, "nat", chainPostrouting)
		vs, err := h.read(post)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			if v.jump == name {
				out = append(out, ruleObject(Masq, post, v))
			}
		}
		out = append(out, chainObject(Masq, ch))
	}
	inst := nftMasqInstance(a.Network, a.IfName, a.ContainerID)
	vs, err := h.read(nftMasqRules())
	if err != nil {
		return nil, err
	}
	for _, v := range vs {
		if strings.HasPrefix(v.Comment, inst) {
			out = append(out, ruleObject(Masq, nftMasqRules(), v))
		}
	}
	return out, nil
}

// masqCheck: with the iptables backend, per address, the chain's two
// rules for the address's subnet and the jump from POSTROUTING; with the
// nftables backend, per address, its rule. A backend of which nothing is
// there is not checked.
func (h *host) masqCheck(a Attachment, r *Report) error {
	name := MasqChain(a.Network, a.ContainerID)
	var ipt expect
	for _, fam := range ipFamilies {
		ch := chain(fam, "nat", name)
		ok, err := h.chainExists(ch)
		if err != nil {
			return err
		}
		if ok {
			ipt.have(chainObject(Masq, ch))
		}
		in, err := h.read(ch)
		if err != nil {
			return err
		}
		post := chain(fam, "nat", chainPostrouting)
		vs, err := h.read(post)
		if err != nil {
			return err
		}
		for _, v := range vs {
			if v.jump == name {
				ipt.have(ruleObject(Masq, post, v))
			}
		}
		for _, p := range a.Addrs {
			if famOf(p.Addr()) != fam {
				continue
			}
			addr := p.Addr().Unmap()
			sub := netip.PrefixFrom(addr, bitsOf(p)).Masked()
			mc := multicast(addr)
			if !ok {
				ipt.lack("chain %s nat %s", nft.FamilyName(fam), name)
				continue
			}
			if _, ok := first(vs, func(v view) bool { return v.jump == name && v.src.p == netip.PrefixFrom(addr, addr.BitLen()) }); !ok {
				ipt.lack("%s nat %s rule -s %s -j %s", nft.FamilyName(fam), chainPostrouting, addr, name)
			}
			if _, ok := first(in, func(v view) bool { return v.dst.p == sub && !v.dst.neq && v.accepts() }); !ok {
				ipt.lack("%s nat %s rule -d %s -j ACCEPT", nft.FamilyName(fam), name, sub)
			}
			if _, ok := first(in, func(v view) bool { return v.dst.p == mc && v.dst.neq && v.masq }); !ok {
				ipt.lack("%s nat %s rule ! -d %s -j MASQUERADE", nft.FamilyName(fam), name, mc)
			}
		}
	}
	ipt.into(r)

	var nf expect
	inst := nftMasqInstance(a.Network, a.IfName, a.ContainerID)
	vs, err := h.read(nftMasqRules())
	if err != nil {
		return err
	}
	var mine []view
	for _, v := range vs {
		if strings.HasPrefix(v.Comment, inst) {
			mine = append(mine, v)
			nf.have(ruleObject(Masq, nftMasqRules(), v))
		}
	}
	for _, p := range a.Addrs {
		addr := p.Addr().Unmap()
		sub := netip.PrefixFrom(addr, bitsOf(p)).Masked()
		if _, ok := first(mine, func(v view) bool {
			return v.src.p == netip.PrefixFrom(addr, addr.BitLen()) && v.dst.p == sub && v.dst.neq && v.masq
		}); !ok {
			nf.lack("inet %s %s rule for %s (comment %s…)", nftMasqTable, nftMasqChain, addr, inst)
		}
	}
	nf.into(r)
	return nil
}

// bitsOf is p's prefix length for its unmapped address.
func bitsOf(p netip.Prefix) int {
	if p.Addr().Is4In6() {
		return max(p.Bits()-96, 0)
	}
	return p.Bits()
}

// masqObjects are network's masquerade chains (with the POSTROUTING
// jumps to them) and nftables rules.
func (h *host) masqObjects(network string) ([]Object, error) {
	var out []Object
	for _, fam := range ipFamilies {
		post := chain(fam, "nat", chainPostrouting)
		vs, err := h.read(post)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			net, id, ok := parseMasqComment(v.Comment)
			if !ok || net != network || v.jump != MasqChain(network, id) {
				continue
			}
			o := ruleObject(Masq, post, v)
			o.ContainerID = id
			c := chainObject(Masq, chain(fam, "nat", v.jump))
			c.ContainerID = id
			out = append(out, o, c)
		}
	}
	vs, err := h.read(nftMasqRules())
	if err != nil {
		return nil, err
	}
	for _, v := range vs {
		inst, ifName, id, ok := parseNFTMasqComment(v.Comment)
		if !ok || !strings.HasPrefix(inst, nftMasqInstance(network, "", "")[:17]) {
			continue
		}
		o := ruleObject(Masq, nftMasqRules(), v)
		o.ContainerID, o.IfName, o.instance = id, ifName, inst
		out = append(out, o)
	}
	return out, nil
}
