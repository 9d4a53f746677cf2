package portmap

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/nft"
)

// planned is one owner's wanted state per family.
type planned struct {
	elems    map[*nftables.Set][]nft.Element
	rules    map[*family][]*nftables.Rule
	localnet []string // interfaces to set route_localnet on
}

func plan(s Spec) (*planned, error) {
	tag := s.Owner.Tag()
	p := &planned{elems: map[*nftables.Set][]nft.Element{}, rules: map[*family][]*nftables.Rule{}}
	for _, m := range s.Mappings {
		tgt := m.Target.Addr().Unmap()
		f := famOf(tgt)
		if m.HostIP.IsValid() && m.HostIP.Unmap().Is4() != tgt.Is4() {
			return nil, fmt.Errorf("host IP %s and container address %s are of different families", m.HostIP, tgt)
		}
		conds := s.Conditions4
		if f.v6 {
			conds = s.Conditions6
		}
		if len(conds) > 0 {
			r, err := conditionalRule(f, conds, m)
			if err != nil {
				return nil, err
			}
			p.rules[f] = append(p.rules[f], r)
			continue
		}
		val := nft.Concat(tgt.AsSlice(), nft.Pad(port(m.Target.Port())))
		if m.HostIP.IsValid() {
			key := nft.Concat(m.HostIP.Unmap().AsSlice(), nft.Pad([]byte{m.Proto}), nft.Pad(port(m.HostPort)))
			p.elems[f.hostIPPorts] = append(p.elems[f.hostIPPorts], nft.Element{Key: key, Val: val, Comment: tag})
		} else {
			key := nft.Concat(nft.Pad([]byte{m.Proto}), nft.Pad(port(m.HostPort)))
			p.elems[f.ports] = append(p.elems[f.ports], nft.Element{Key: key, Val: val, Comment: tag})
		}
	}
	for _, pf := range s.Hairpin {
		a := pf.Addr().Unmap()
		bits := pf.Bits()
		if pf.Addr().Is4In6() {
			bits = max(bits-96, 0)
		}
		if s.MasqAll {
			bits = 0
		}
		sub := netip.PrefixFrom(a, bits).Masked()
		f := famOf(a)
		p.elems[f.hairpins] = append(p.elems[f.hairpins], nft.Element{Key: a.AsSlice(), Jump: hairpinChain(f, bits).Name, Comment: tag})
		p.elems[f.hairpinLocal] = append(p.elems[f.hairpinLocal], nft.Element{Key: nft.Concat(a.AsSlice(), sub.Addr().AsSlice()), Comment: tag})
	}
	for _, a := range s.Localhost {
		a = a.Unmap()
		if !a.Is4() {
			return nil, fmt.Errorf("localhost forwarding is IPv4 only, not %s", a)
		}
		p.elems[fam4.localhost] = append(p.elems[fam4.localhost], nft.Element{Key: a.AsSlice(), Comment: tag})
	}
	for _, name := range s.Localnet {
		if name == "" || len(name) >= unix.IFNAMSIZ {
			return nil, fmt.Errorf("invalid interface name %q", name)
		}
		if !slices.Contains(p.localnet, name) {
			p.localnet = append(p.localnet, name)
			p.elems[fam4.localnet] = append(p.elems[fam4.localnet], localnetRecord(name, s.Owner))
		}
	}
	return p, nil
}

func (p *planned) families() []*family {
	var out []*family
	for _, f := range fams {
		need := len(p.rules[f]) > 0
		for _, s := range f.sets() {
			need = need || len(p.elems[s]) > 0
		}
		if need {
			out = append(out, f)
		}
	}
	return out
}

func port(p uint16) []byte { return binary.BigEndian.AppendUint16(nil, p) }
