package reference

import (
	"net/netip"

	"github.com/google/nftables"

	"github.com/nftcni/nftcni/nft"
)

// The firewall plugin's iptables backend: two accepts per container
// address in CNI-FORWARD, without a comment — the only per-attachment
// objects the reference names by nothing but what they match. They are
// found as the reference's `iptables -D` finds them: a rule that matches
// exactly that address (and, for replies, the RELATED,ESTABLISHED state)
// and accepts, the first of each; a rule matching anything else besides
// is not one of them.

func firewallRules(fam nftables.TableFamily) *nftables.Chain {
	return chain(fam, "filter", firewallChain)
}

// isFrom: `-s A -j ACCEPT`.
func isFrom(v view, a netip.Addr) bool {
	return v.src.p == netip.PrefixFrom(a, a.BitLen()) && !v.src.neq && !v.dst.set() && !v.in.set() && !v.out.set() &&
		!v.ctEstRel && v.proto == 0 && v.dport == 0 && v.accepts() && v.other == 0
}

// isRepliesTo: `-d A -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`.
func isRepliesTo(v view, a netip.Addr) bool {
	return v.dst.p == netip.PrefixFrom(a, a.BitLen()) && !v.dst.neq && !v.src.set() && !v.in.set() && !v.out.set() &&
		v.ctEstRel && v.proto == 0 && v.dport == 0 && v.accepts() && v.other == 0
}

func (h *host) firewallFind(a Attachment) ([]Object, error) {
	var out []Object
	for _, fam := range ipFamilies {
		ch := firewallRules(fam)
		var vs []view
		read := false
		for _, p := range a.Addrs {
			if famOf(p.Addr()) != fam {
				continue
			}
			if !read {
				ok, err := h.chainExists(ch)
				if err != nil || !ok {
					if err != nil {
						return nil, err
					}
					break
				}
				if vs, err = h.read(ch); err != nil {
					return nil, err
				}
				read = true
			}
			addr := p.Addr().Unmap()
			for _, is := range []func(view, netip.Addr) bool{isRepliesTo, isFrom} {
				if v, ok := first(vs, func(v view) bool { return is(v, addr) }); ok {
					out = append(out, ruleObject(Firewall, ch, v))
				}
			}
		}
	}
	return out, nil
}

// firewallCheck: the two accepts per address, and what makes them count:
// CNI-FORWARD jumped to from FORWARD, the admin chain jumped to from
// CNI-FORWARD.
func (h *host) firewallCheck(a Attachment, r *Report) error {
	var e expect
	admin := a.AdminChain
	if admin == "" {
		admin = DefaultAdminChain
	}
	for _, fam := range ipFamilies {
		ch := firewallRules(fam)
		vs, err := h.read(ch)
		if err != nil {
			return err
		}
		any := false
		for _, p := range a.Addrs {
			if famOf(p.Addr()) != fam {
				continue
			}
			any = true
			addr := p.Addr().Unmap()
			fn := nft.FamilyName(fam)
			if v, ok := first(vs, func(v view) bool { return isRepliesTo(v, addr) }); ok {
				e.have(ruleObject(Firewall, ch, v))
			} else {
				e.lack("%s filter %s rule -d %s -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT", fn, firewallChain, addr)
			}
			if v, ok := first(vs, func(v view) bool { return isFrom(v, addr) }); ok {
				e.have(ruleObject(Firewall, ch, v))
			} else {
				e.lack("%s filter %s rule -s %s -j ACCEPT", fn, firewallChain, addr)
			}
		}
		if !any {
			continue
		}
		if err := h.needJump(&e, fam, "filter", chainForward, firewallChain); err != nil {
			return err
		}
		if err := h.needJump(&e, fam, "filter", firewallChain, admin); err != nil {
			return err
		}
		if err := h.needChain(&e, chain(fam, "filter", admin)); err != nil {
			return err
		}
	}
	e.into(r)
	return nil
}
