package portmap

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/foreign"
	"github.com/nftcni/nftcni/ownerid"
)

// Check verifies that s.Owner's state in ns is exactly what Setup(s)
// would leave: every wanted element present with its data and tag, no
// other element of the owner (owner marker included), the right number of
// conditional rules and of rules in other owners' chains (rules are never
// compared by content; see foreign.Check), and route_localnet on for every
// interface the owner has a localnet record for.
func Check(ns *netns.NS, s Spec) error {
	p, err := plan(s)
	if err != nil {
		return err
	}
	c, err := nft.Open(ns)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := check(c, ns, s.Owner, p, func(f *family) int { return len(p.rules[f]) }); err != nil {
		return err
	}
	return checkForeign(c, s, nil)
}

// CheckRecorded verifies s.Owner's state when the runtime did not send the
// mappings (CHECK without the portMappings capability): the mappings the
// owner's map elements record stand in for s.Mappings, and each must
// forward to one of addrs, the container's addresses. s describes the
// rest as Setup would have it if the attachment forwards any port
// (Hairpin, Localhost, Localnet); it applies only if the owner has a
// mapping or a conditional rule, and then everything is compared as in
// Check, except that conditional rules, which are not decoded, are taken
// as they are. An owner without mappings must have no state at all, in
// other owners' chains neither.
//
// What it cannot see: mappings that are gone together with all the
// owner's other state (a deleted table), since nothing then says they
// existed; and the accepts in other owners' chains that a family with
// conditional rules reaches (what those rules forward is not decoded), so
// such chains are not checked.
func CheckRecorded(ns *netns.NS, s Spec, addrs []netip.Addr) error {
	c, err := nft.Open(ns)
	if err != nil {
		return err
	}
	defer c.Close()
	var rules map[*family]int
	s.Mappings, rules, err = mappingsInElements(c, s.Owner, addrs)
	if err != nil {
		return err
	}
	if len(s.Mappings) == 0 && rules[fam4] == 0 && rules[fam6] == 0 {
		s = Spec{Owner: s.Owner, AcceptChains: s.AcceptChains, Iptables: s.Iptables, iptablesReachable: s.iptablesReachable}
	}
	s.Conditions4, s.Conditions6 = nil, nil // the recorded ones are elements
	p, err := plan(s)
	if err != nil {
		return err
	}
	if len(rules) > 0 {
		// Without this, families whose only state is rules would be
		// expected to have no marker.
		p.rules = map[*family][]*nftables.Rule{}
		for f, n := range rules {
			p.rules[f] = make([]*nftables.Rule, n)
		}
	}
	if err := check(c, ns, s.Owner, p, func(f *family) int { return rules[f] }); err != nil {
		return err
	}
	return checkForeign(c, s, rules)
}

// mappingsInElements reads back owner's mappings from its map elements,
// failing for one that does not forward to one of addrs, and counts its
// conditional rules per family.
func mappingsInElements(c *nft.Conn, owner ownerid.Owner, addrs []netip.Addr) ([]Mapping, map[*family]int, error) {
	var out []Mapping
	rules := map[*family]int{}
	for _, f := range fams {
		for _, set := range []*nftables.Set{f.hostIPPorts, f.ports} {
			cur, err := c.Elements(set)
			if err != nil {
				return nil, nil, err
			}
			for _, e := range cur {
				if !owner.OwnedBy(e.Comment) {
					continue
				}
				m, ok := decodeMapping(set, e)
				if !ok {
					return nil, nil, fmt.Errorf("malformed hostport element in %s %s map %q: key %x, data %x", familyName(f), TableName, set.Name, e.Key, e.Val)
				}
				if !slices.Contains(addrs, m.Target.Addr()) {
					return nil, nil, fmt.Errorf("hostport element in %s %s map %q forwards to %s, which is not an address of the container %v: %s",
						familyName(f), TableName, set.Name, m.Target.Addr(), addrs, describeElem(set, e))
				}
				out = append(out, m)
			}
		}
		n, err := ownerRules(c, f, owner)
		if err != nil {
			return nil, nil, err
		}
		if n > 0 {
			rules[f] = n
		}
	}
	return out, rules, nil
}

// ownerRules counts owner's rules in f's conditional chain.
func ownerRules(c *nft.Conn, f *family, owner ownerid.Owner) (int, error) {
	rs, err := c.Rules(f.conditional)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range rs {
		if owner.OwnedBy(r.Comment) {
			n++
		}
	}
	return n, nil
}

// decodeMapping is the mapping a port-map element holds.
func decodeMapping(set *nftables.Set, e nft.Element) (Mapping, bool) {
	var m Mapping
	k := e.Key
	if set.Name == "hostip_ports" {
		if len(k) != 12 && len(k) != 24 {
			return m, false
		}
		n := len(k) - 8
		m.HostIP, _ = netip.AddrFromSlice(k[:n])
		k = k[n:]
	}
	if len(k) != 8 || (len(e.Val) != 8 && len(e.Val) != 20) {
		return m, false
	}
	m.Proto, m.HostPort = k[0], binary.BigEndian.Uint16(k[4:6])
	n := len(e.Val) - 4
	a, _ := netip.AddrFromSlice(e.Val[:n])
	m.Target = netip.AddrPortFrom(a, binary.BigEndian.Uint16(e.Val[n:n+2]))
	return m, true
}

// check compares owner's state with p: elements exactly, owner markers,
// the number of conditional rules (rules(f) per family), and
// route_localnet for the owner's localnet records.
func check(c *nft.Conn, ns *netns.NS, owner ownerid.Owner, p *planned, rules func(f *family) int) error {
	active := p.families()
	for _, f := range fams {
		want := map[*nftables.Set][]nft.Element{f.owners: nil}
		if slices.Contains(active, f) {
			want[f.owners] = []nft.Element{nft.Marker(owner)}
		}
		for _, set := range f.sets() {
			want[set] = p.elems[set]
		}
		for _, set := range append(f.sets(), f.owners) {
			mine, err := checkElements(c, f, set, want[set], owner)
			if err != nil {
				return err
			}
			switch set {
			case f.localnet:
				if err := checkLocalnet(ns, mine); err != nil {
					return err
				}
			case f.owners:
				if err := checkRecord(f, owner, mine, p); err != nil {
					return err
				}
			}
		}
		n, err := ownerRules(c, f, owner)
		if err != nil {
			return err
		}
		if want := rules(f); n != want {
			return fmt.Errorf("missing hostport rules in %s %s chain %q: %d of the container's rules found, %d expected", familyName(f), TableName, f.conditional.Name, n, want)
		}
	}
	return nil
}

// checkElements fails when set lacks an element of want or has one of
// owner's that is not in want; it returns owner's elements.
func checkElements(c *nft.Conn, f *family, set *nftables.Set, want []nft.Element, owner ownerid.Owner) ([]nft.Element, error) {
	cur, err := c.Elements(set)
	if err != nil {
		return nil, err
	}
	same := nft.SameElement
	if set == f.owners {
		// A marker's record is compared by what it plans (checkRecord).
		same = func(e, w nft.Element) bool { return string(e.Key) == string(w.Key) && owner.OwnedBy(e.Comment) }
	}
	for _, w := range want {
		if !slices.ContainsFunc(cur, func(e nft.Element) bool { return same(e, w) }) {
			return nil, fmt.Errorf("missing hostport element in %s %s %s %q: %s", familyName(f), TableName, setKind(set), set.Name, describeElem(set, w))
		}
	}
	var mine []nft.Element
	for _, e := range cur {
		if !owner.OwnedBy(e.Comment) {
			continue
		}
		if !slices.ContainsFunc(want, func(w nft.Element) bool { return same(e, w) }) {
			return nil, fmt.Errorf("unexpected hostport element in %s %s %s %q: %s", familyName(f), TableName, setKind(set), set.Name, describeElem(set, e))
		}
		mine = append(mine, e)
	}
	return mine, nil
}

// checkRecord fails when the record in owner's marker among markers
// plans other elements of family f than p has: Teardown, which looks up
// only what the record plans, would leave the difference behind. A
// marker without a record is fine (Teardown then reads whole sets).
func checkRecord(f *family, owner ownerid.Owner, markers []nft.Element, p *planned) error {
	rec, ok := nft.MarkerRecord(owner, markers)
	if !ok {
		return nil
	}
	elems := nft.Recorded(owner, markers, recompute)
	if elems == nil {
		return fmt.Errorf("owner marker in %s %s set %q: record %q does not read", familyName(f), TableName, f.owners.Name, rec)
	}
	for _, set := range f.sets() {
		a, b := elems[set], p.elems[set]
		in := func(e nft.Element, list []nft.Element) bool {
			return slices.ContainsFunc(list, func(o nft.Element) bool { return nft.SameElement(e, o) })
		}
		if len(a) != len(b) || slices.ContainsFunc(a, func(e nft.Element) bool { return !in(e, b) }) ||
			slices.ContainsFunc(b, func(e nft.Element) bool { return !in(e, a) }) {
			return fmt.Errorf("owner marker in %s %s set %q: record %q does not match the elements of %s %q",
				familyName(f), TableName, f.owners.Name, rec, setKind(set), set.Name)
		}
	}
	return nil
}

// checkForeign verifies that s.Owner has in each chain of others as many
// rules as Setup(s) gives it (foreign.Check, inside an Update that writes
// nothing, so that the index of package foreign spares reading the
// chains). Chains that a family in undecoded reaches are skipped: that
// family's mappings are conditional rules, which are not decoded, so what
// they accept is not known.
func checkForeign(c *nft.Conn, s Spec, undecoded map[*family]int) error {
	mark := foreign.Mark{Owner: s.Owner, Component: component}
	return c.Update(func(tx *nft.Tx) error {
		protect, err := s.protects(tx)
		if err != nil {
			return err
		}
		for _, ch := range chains(s.AcceptChains) {
			if slices.ContainsFunc(fams, func(f *family) bool { return undecoded[f] > 0 && reaches(ch, f) }) {
				continue
			}
			want := s.accepts()
			if ch.Iptables && !protect {
				want = nil
			}
			if err := foreign.Check(tx, ch, mark, want); err != nil {
				return err
			}
		}
		return nil
	})
}

// reaches reports whether ch sees f's packets: an ip or ip6 chain its own
// family's, any other (inet) both.
func reaches(ch foreign.Chain, f *family) bool {
	switch ch.Table.Family {
	case nftables.TableFamilyIPv4:
		return !f.v6
	case nftables.TableFamilyIPv6:
		return f.v6
	}
	return true
}

func setKind(s *nftables.Set) string {
	if s.IsMap {
		return "map"
	}
	return "set"
}

func familyName(f *family) string { return nft.FamilyName(f.table.Family) }

// describeElem prints an element as nft would, for messages.
func describeElem(set *nftables.Set, e nft.Element) string {
	k := e.Key
	switch {
	case set.Name == nft.OwnersSetName:
		return fmt.Sprintf("%q", k)
	case set.Name == "localnet" && len(k) == 32:
		return fmt.Sprintf("%q . %q", recordIface(e), k[16:])
	case e.Jump != "":
		a, _ := netip.AddrFromSlice(k)
		return a.String() + " : jump " + e.Jump
	}
	if !set.IsMap {
		if set.Name == "hairpin_local" && (len(k) == 8 || len(k) == 32) { // address . subnet
			a, _ := netip.AddrFromSlice(k[:len(k)/2])
			b, _ := netip.AddrFromSlice(k[len(k)/2:])
			return fmt.Sprintf("%s . %s", a, b)
		}
		if set.Interval {
			a, _ := netip.AddrFromSlice(k[:len(k)/2])
			b, _ := netip.AddrFromSlice(k[len(k)/2:])
			return fmt.Sprintf("%s… . %s", a, b)
		}
		a, _ := netip.AddrFromSlice(k)
		return a.String()
	}
	var s string
	if set.Name == "hostip_ports" {
		n := len(k) - 8
		a, _ := netip.AddrFromSlice(k[:n])
		s = a.String() + " . "
		k = k[n:]
	}
	s += fmt.Sprintf("%s . %d", nft.ProtoName(k[0]), binary.BigEndian.Uint16(k[4:6]))
	if len(e.Val) >= 8 {
		n := len(e.Val) - 4
		a, _ := netip.AddrFromSlice(e.Val[:n])
		s += fmt.Sprintf(" : %s . %d", a, binary.BigEndian.Uint16(e.Val[n:n+2]))
	}
	return s
}
