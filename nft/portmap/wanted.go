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

// plan works out what s wants: its map and set elements, tagged as
// s.Owner's, its conditional rules and the interfaces that need
// route_localnet.
func plan(s Spec) (*planned, error) {
	p := &planned{elems: map[*nftables.Set][]nft.Element{}, rules: map[*family][]*nftables.Rule{}}
	tag := s.Owner.Tag()
	for _, m := range s.Mappings {
		if err := p.addMapping(s, m, tag); err != nil {
			return nil, err
		}
	}
	for _, pf := range s.Hairpin {
		p.addHairpin(pf, s.MasqAll, tag)
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

// addMapping adds m: a conditional rule when s has conditions for its
// family, an element of hostip_ports or ports otherwise.
func (p *planned) addMapping(s Spec, m Mapping, tag string) error {
	tgt := m.Target.Addr().Unmap()
	f := famOf(tgt)
	if m.HostIP.IsValid() && m.HostIP.Unmap().Is4() != tgt.Is4() {
		return fmt.Errorf("host IP %s and container address %s are of different families", m.HostIP, tgt)
	}
	conds := s.Conditions4
	if f.v6 {
		conds = s.Conditions6
	}
	if len(conds) > 0 {
		r, err := conditionalRule(f, conds, m)
		if err != nil {
			return err
		}
		p.rules[f] = append(p.rules[f], r)
		return nil
	}
	val := nft.Concat(tgt.AsSlice(), nft.Pad(port(m.Target.Port())))
	if m.HostIP.IsValid() {
		key := nft.Concat(m.HostIP.Unmap().AsSlice(), nft.Pad([]byte{m.Proto}), nft.Pad(port(m.HostPort)))
		p.elems[f.hostIPPorts] = append(p.elems[f.hostIPPorts], nft.Element{Key: key, Val: val, Comment: tag})
	} else {
		key := nft.Concat(nft.Pad([]byte{m.Proto}), nft.Pad(port(m.HostPort)))
		p.elems[f.ports] = append(p.elems[f.ports], nft.Element{Key: key, Val: val, Comment: tag})
	}
	return nil
}

// addHairpin adds the hairpins and hairpin_local elements of container
// prefix pf: the address jumps to the chain of the prefix length (0 with
// masqAll), which masquerades sources in its subnet.
func (p *planned) addHairpin(pf netip.Prefix, masqAll bool, tag string) {
	a := pf.Addr().Unmap()
	bits := pf.Bits()
	if pf.Addr().Is4In6() {
		bits = max(bits-96, 0)
	}
	if masqAll {
		bits = 0
	}
	sub := netip.PrefixFrom(a, bits).Masked()
	f := famOf(a)
	p.elems[f.hairpins] = append(p.elems[f.hairpins], nft.Element{Key: a.AsSlice(), Jump: hairpinChain(f, bits).Name, Comment: tag})
	p.elems[f.hairpinLocal] = append(p.elems[f.hairpinLocal], nft.Element{Key: nft.Concat(a.AsSlice(), sub.Addr().AsSlice()), Comment: tag})
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
