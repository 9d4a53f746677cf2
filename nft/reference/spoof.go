package reference

import (
	"github.com/google/nftables"
)

// bridge's macspoofchk: two chains per attachment in table bridge nat and
// the PREROUTING rule jumping to the first.

func spoofChains(a Attachment) (iface, mac *nftables.Chain) {
	name := spoofChain(a.ContainerID, a.IfName)
	return chain(nftables.TableFamilyBridge, spoofTable, name), chain(nftables.TableFamilyBridge, spoofTable, name+"-mac")
}

func (h *host) spoofFind(a Attachment) ([]Object, error) {
	iface, mac := spoofChains(a)
	var out []Object
	ok, err := h.chainExists(iface)
	if err != nil {
		return nil, err
	}
	if ok {
		pre := chain(nftables.TableFamilyBridge, spoofTable, chainPrerouting)
		vs, err := h.read(pre)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			if v.jump == iface.Name {
				out = append(out, ruleObject(SpoofCheck, pre, v))
			}
		}
		out = append(out, chainObject(SpoofCheck, iface))
	}
	// The iface chain jumps to the mac chain: it goes first.
	ok, err = h.chainExists(mac)
	if err != nil {
		return nil, err
	}
	if ok {
		out = append(out, chainObject(SpoofCheck, mac))
	}
	return out, nil
}

func (h *host) spoofCheck(a Attachment, r *Report) error {
	var e expect
	iface, mac := spoofChains(a)
	for _, ch := range []*nftables.Chain{iface, mac} {
		ok, err := h.chainExists(ch)
		if err != nil {
			return err
		}
		if ok {
			e.have(chainObject(SpoofCheck, ch))
		} else {
			e.lack("chain bridge %s %s", spoofTable, ch.Name)
		}
	}
	pre := chain(nftables.TableFamilyBridge, spoofTable, chainPrerouting)
	vs, err := h.read(pre)
	if err != nil {
		return err
	}
	if v, ok := first(vs, func(v view) bool { return v.jump == iface.Name }); ok {
		e.have(ruleObject(SpoofCheck, pre, v))
	} else {
		e.lack("bridge %s %s rule jumping to %s (comment %q)", spoofTable, chainPrerouting, iface.Name, spoofComment(a.ContainerID, a.IfName))
	}
	e.into(r)
	return nil
}
