package reference

import (
	"net/netip"
	"slices"

	"github.com/google/nftables"

	"github.com/nftcni/nftcni/nft"
)

// portmap's DNAT and masquerade.

func (h *host) portmapFind(a Attachment) ([]Object, error) {
	var out []Object
	for _, fam := range ipFamilies {
		for _, c := range []struct{ name, entry string }{
			{DNATChain(a.Network, a.ContainerID), hostportDNAT},
			{oldSNATChain(a.Network, a.ContainerID), hostportOldSNAT},
		} {
			ch := chain(fam, "nat", c.name)
			ok, err := h.chainExists(ch)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			entry := chain(fam, "nat", c.entry)
			vs, err := h.read(entry)
			if err != nil {
				return nil, err
			}
			for _, v := range vs {
				if v.jump == c.name {
					out = append(out, ruleObject(Portmap, entry, v))
				}
			}
			out = append(out, chainObject(Portmap, ch))
		}
		mine, err := h.nftPortmapRules(fam, a)
		if err != nil {
			return nil, err
		}
		out = append(out, mine...)
	}
	return out, nil
}

// nftPortmapRules are a's rules in table cni_hostport of family fam:
// commented with its container ID and, when a has addresses, for one of
// them (their DNAT target or masqueraded destination). The reference's
// own DEL goes by the container ID alone, and so removes the rules of
// every network the container has port mappings on.
func (h *host) nftPortmapRules(fam nftables.TableFamily, a Attachment) ([]Object, error) {
	var out []Object
	for _, name := range nftPortmapChains {
		ch := chain(fam, nftPortmapTable, name)
		vs, err := h.read(ch)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			if v.Comment == a.ContainerID && forAddrs(v, a.Addrs) {
				out = append(out, ruleObject(Portmap, ch, v))
			}
		}
	}
	return out, nil
}

// forAddrs reports whether portmap's nftables rule v is for one of addrs
// (all rules are, without addresses).
func forAddrs(v view, addrs []netip.Prefix) bool {
	if len(addrs) == 0 {
		return true
	}
	return slices.ContainsFunc(addrs, func(p netip.Prefix) bool {
		a := p.Addr().Unmap()
		return v.dnat.Addr() == a || v.dst.p == netip.PrefixFrom(a, a.BitLen()) && !v.dst.neq
	})
}

// forFamily are the mappings of ms portmap applies to an address of
// family fam: a host IP of the other family is skipped.
func forFamily(ms []Mapping, fam nftables.TableFamily) []Mapping {
	var out []Mapping
	for _, m := range ms {
		if m.HostIP.IsValid() && famOf(m.HostIP) != fam {
			continue
		}
		out = append(out, m)
	}
	return out
}

// portmapCheck: per container address (the first of each family, as
// portmap uses them), with the iptables backend the per-attachment chain,
// the jump to it, its DNAT rule per mapping and, with snat, its hairpin
// and localhost mark rules, and the shared chains they need; with the
// nftables backend, per mapping its DNAT rule and, with snat, the hairpin
// masquerade.
func (h *host) portmapCheck(a Attachment, r *Report) error {
	var ipt, nf expect
	name := DNATChain(a.Network, a.ContainerID)
	setMark := a.SetMarkChain
	if setMark == "" {
		setMark = hostportSetMark
	}
	for _, fam := range ipFamilies {
		addr, cnet, ok := firstOf(a.Addrs, fam)
		if !ok {
			continue
		}
		ms := forFamily(a.Mappings, fam)
		fn := nft.FamilyName(fam)

		// iptables backend.
		ch := chain(fam, "nat", name)
		exists, err := h.chainExists(ch)
		if err != nil {
			return err
		}
		if exists {
			ipt.have(chainObject(Portmap, ch))
		}
		entry := chain(fam, "nat", hostportDNAT)
		evs, err := h.read(entry)
		if err != nil {
			return err
		}
		jumped := false
		for _, v := range evs {
			if v.jump == name {
				ipt.have(ruleObject(Portmap, entry, v))
				jumped = true
			}
		}
		if !exists {
			ipt.lack("chain %s nat %s", fn, name)
		} else {
			if !jumped {
				ipt.lack("%s nat %s rule -j %s", fn, hostportDNAT, name)
			}
			vs, err := h.read(ch)
			if err != nil {
				return err
			}
			if !a.MappingsSent {
				if _, ok := first(vs, func(v view) bool { return v.dnat.Addr() == addr }); !ok {
					ipt.lack("%s nat %s rule -j DNAT --to-destination %s", fn, name, addr)
				}
			}
			for _, m := range ms {
				base := func(v view) bool {
					return v.proto == m.Proto && v.dport == m.HostPort && hostIPMatch(v, m)
				}
				to := netip.AddrPortFrom(addr, m.ContainerPort)
				if _, ok := first(vs, func(v view) bool { return base(v) && v.dnat == to && !v.src.set() }); !ok {
					ipt.lack("%s nat %s rule for %s -j DNAT --to-destination %s", fn, name, m, to)
				}
				if !a.SNAT {
					continue
				}
				hairpin := cnet
				if a.MasqAll {
					hairpin = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
					if fam == nftables.TableFamilyIPv4 {
						hairpin = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
					}
				}
				if _, ok := first(vs, func(v view) bool { return base(v) && v.jump == setMark && srcIs(v, hairpin) }); !ok {
					ipt.lack("%s nat %s rule for %s -s %s -j %s", fn, name, m, hairpin, setMark)
				}
				if fam == nftables.TableFamilyIPv4 && !a.MasqAll {
					lo := netip.MustParsePrefix("127.0.0.1/32")
					if _, ok := first(vs, func(v view) bool { return base(v) && v.jump == setMark && srcIs(v, lo) }); !ok {
						ipt.lack("%s nat %s rule for %s -s %s -j %s", fn, name, m, lo, setMark)
					}
				}
			}
			// The shared chains this attachment's rules need.
			for _, from := range []string{chainPrerouting, chainOutput} {
				if err := h.needJump(&ipt, fam, "nat", from, hostportDNAT); err != nil {
					return err
				}
			}
			if a.SNAT && a.SetMarkChain == "" {
				if err := h.needChain(&ipt, chain(fam, "nat", hostportSetMark)); err != nil {
					return err
				}
				if err := h.needJump(&ipt, fam, "nat", chainPostrouting, hostportMasq); err != nil {
					return err
				}
			}
		}

		// nftables backend.
		hp := chain(fam, nftPortmapTable, "hostports")
		masq := chain(fam, nftPortmapTable, "masquerading")
		var dnats, masqs []view
		for _, c := range []struct {
			ch  *nftables.Chain
			out *[]view
		}{{hp, &dnats}, {chain(fam, nftPortmapTable, "hostip_hostports"), &dnats}, {masq, &masqs}} {
			vs, err := h.read(c.ch)
			if err != nil {
				return err
			}
			for _, v := range vs {
				if v.Comment == a.ContainerID && forAddrs(v, []netip.Prefix{netip.PrefixFrom(addr, addr.BitLen())}) {
					nf.have(ruleObject(Portmap, c.ch, v))
					*c.out = append(*c.out, v)
				}
			}
		}
		if !a.MappingsSent && len(dnats) == 0 {
			nf.lack("%s %s hostports rule dnat to %s (comment %q)", fn, nftPortmapTable, addr, a.ContainerID)
		}
		for _, m := range ms {
			to := netip.AddrPortFrom(addr, m.ContainerPort)
			if _, ok := first(dnats, func(v view) bool {
				return v.proto == m.Proto && v.dport == m.HostPort && hostIPMatch(v, m) && v.dnat == to
			}); !ok {
				nf.lack("%s %s hostports rule for %s dnat to %s (comment %q)", fn, nftPortmapTable, m, to, a.ContainerID)
			}
		}
		if a.SNAT && (len(ms) > 0 || !a.MappingsSent) && len(masqs) == 0 {
			nf.lack("%s %s masquerading rule for daddr %s (comment %q)", fn, nftPortmapTable, addr, a.ContainerID)
		}
	}
	ipt.into(r)
	nf.into(r)
	return nil
}

// firstOf is the first address of family fam in addrs, with its network.
func firstOf(addrs []netip.Prefix, fam nftables.TableFamily) (netip.Addr, netip.Prefix, bool) {
	for _, p := range addrs {
		if famOf(p.Addr()) == fam {
			a := p.Addr().Unmap()
			return a, netip.PrefixFrom(a, bitsOf(p)).Masked(), true
		}
	}
	return netip.Addr{}, netip.Prefix{}, false
}

// hostIPMatch reports whether v matches m's host IP as portmap writes it:
// a destination match for a host IP that is not unspecified, none
// otherwise.
func hostIPMatch(v view, m Mapping) bool {
	if !m.HostIP.IsValid() || m.HostIP.IsUnspecified() {
		return !v.dst.set()
	}
	h := m.HostIP.Unmap()
	return v.dst.p == netip.PrefixFrom(h, h.BitLen()) && !v.dst.neq
}

// srcIs reports whether v's source match is p (`-s 0.0.0.0/0` is no match
// at all as iptables-nft writes it).
func srcIs(v view, p netip.Prefix) bool {
	if p.Bits() == 0 {
		return !v.src.set() || v.src.p == p
	}
	return v.src.p == p && !v.src.neq
}

// needJump notes a rule of table's chain from that jumps to to, or its
// absence.
func (h *host) needJump(e *expect, fam nftables.TableFamily, table, from, to string) error {
	vs, err := h.read(chain(fam, table, from))
	if err != nil {
		return err
	}
	if _, ok := first(vs, func(v view) bool { return v.jump == to }); !ok {
		e.lack("%s %s %s rule -j %s", nft.FamilyName(fam), table, from, to)
	}
	return nil
}

// needChain notes ch's absence.
func (h *host) needChain(e *expect, ch *nftables.Chain) error {
	ok, err := h.chainExists(ch)
	if err == nil && !ok {
		e.lack("chain %s %s %s", nft.FamilyName(ch.Table.Family), ch.Table.Name, ch.Name)
	}
	return err
}

// portmapObjects are network's portmap chains (iptables backend), each
// with the rules jumping to it, found through their comments.
func (h *host) portmapObjects(network string) ([]Object, error) {
	var out []Object
	for _, fam := range ipFamilies {
		entry := chain(fam, "nat", hostportDNAT)
		vs, err := h.read(entry)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			id, ok := parseDNATComment(v.Comment, network)
			if !ok || v.jump != DNATChain(network, id) {
				continue
			}
			o := ruleObject(Portmap, entry, v)
			o.ContainerID = id
			c := chainObject(Portmap, chain(fam, "nat", v.jump))
			c.ContainerID = id
			out = append(out, o, c)
		}
	}
	return out, nil
}
