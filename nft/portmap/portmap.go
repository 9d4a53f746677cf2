// Package portmap forwards host ports to containers with nftables maps: the
// portmap plugin's data plane.
//
// # Data model
//
// One table per family (ip, ip6), so that the maps' address types are
// fixed; both are written in the same batch. For ip:
//
//	table ip nftcni_portmap {
//		map hostip_ports {
//			type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service
//			elements = { 192.0.2.1 . tcp . 8080 : 10.1.0.5 . 80 comment "<owner tag>" }
//		}
//		map ports {
//			type inet_proto . inet_service : ipv4_addr . inet_service
//			elements = { tcp . 8080 : 10.1.0.5 . 80 comment "<owner tag>" }
//		}
//		map hairpins {
//			type ipv4_addr : verdict
//			elements = { 10.1.0.5 : jump hairpin_24 comment "<owner tag>" }
//		}
//		set hairpin_local {
//			type ipv4_addr . ipv4_addr
//			elements = { 10.1.0.5 . 10.1.0.0 comment "<owner tag>" }
//		}
//		set localhost {
//			type ipv4_addr
//			elements = { 10.1.0.5 comment "<owner tag>" }
//		}
//		set localnet {
//			type ifname . ifname
//			elements = { "cni0" . "<attachment hash>" comment "<owner tag>" }
//		}
//		map localnet_prior {
//			type ifname : mark
//			elements = { "cni0" : 0x00000000 comment "nftcni portmap: route_localnet before nftcni" }
//		}
//		set owners {
//			type ifname
//			elements = { "<attachment hash>" comment "<tag hashes> =<the Setup's mappings and addresses>" }
//		}
//		chain prerouting {
//			type nat hook prerouting priority dstnat; policy accept;
//			ip daddr 127.0.0.0/8 return
//			fib daddr type local jump hostports
//		}
//		chain output {
//			type nat hook output priority dstnat; policy accept;
//			fib daddr type local jump hostports
//		}
//		chain hostports {
//			jump conditional
//			dnat ip to ip daddr . meta l4proto . th dport map @hostip_ports
//			dnat ip to meta l4proto . th dport map @ports
//		}
//		chain conditional {
//			ip saddr 192.168.0.0/16 tcp dport 8080 dnat ip to 10.1.0.5:80 comment "<owner tag>"
//		}
//		chain postrouting {
//			type nat hook postrouting priority srcnat; policy accept;
//			ct status dnat ip daddr vmap @hairpins
//			ct status dnat ip saddr 127.0.0.0/8 ip daddr @localhost masquerade
//		}
//		chain hairpin_24 {
//			ip daddr . ip saddr & 255.255.255.0 @hairpin_local masquerade
//		}
//		chain input {
//			type filter hook input priority filter; policy accept;
//			iifname != "lo" ip daddr 127.0.0.0/8 ip saddr != 127.0.0.0/8 ct state != { established, related } ct status != dnat drop
//		}
//	}
//
// The ip6 table is the same without localhost, localnet, localnet_prior
// and input, and prerouting returns for ip6 daddr ::1. There is no
// localhost forwarding for IPv6 (nor in the reference): IPv6 has no
// route_localnet, so a packet from ::1 cannot leave through the interface
// towards the container, and a reply translated back to ::1 on its way in
// finds no route (the kernel accepts a loopback destination on lo only).
//
// Loopback destinations: mappings, with a hostIP in 127.0.0.0/8 or ::1 or
// none, forward packets sent to a loopback address only when they come
// from this host, which the hook decides (see loopbackOnlyFromHost).
//
// Why maps: the reference walks one rule per mapping (nft) or per
// container (iptables) for the first packet of every connection to a
// local address; here it is two hash lookups however many mappings the
// host has, and a host-IP-specific mapping always beats a wildcard one
// because its map is consulted first.
//
// Conditions (conditionsV4/V6) cannot be map keys. A container whose
// config has them gets ordinary rules in the conditional chain, tagged
// with its owner tag and consulted before the maps; only such configs pay
// a per-rule cost. Their host ports are not checked for conflicts:
// conditions may make two claims disjoint.
//
// Masquerade: hairpin (a container, or anything in its subnet, reaching a
// host port that leads back into that subnet: the destination container
// jumps to the chain of its prefix length, which masquerades when the
// source masked to that length is the container's subnet address — one
// chain per prefix length in use, never removed, and only hash lookups,
// where layout v1's interval set of (subnet . container) cost every
// change time in proportion to the set) and localhost clients are
// masqueraded only for connections we DNATed (`ct status dnat`), and
// hairpin covers the container's whole subnet as the reference's iptables
// backend does. masqAll (Spec.MasqAll) widens an address's hairpin to
// every source: the address jumps to hairpin_0, whose mask leaves nothing
// of the source, so its element (address . 0.0.0.0) masquerades every
// client of its mapped ports — still one element per address and set,
// and still only for connections we DNATed.
// Localhost forwarding needs route_localnet on the interface towards the
// container; localnet and localnet_prior record who needs it and what to
// give back when nobody does (localnet.go). The input chain is
// kube-proxy's guard for CVE-2020-8558: route_localnet would otherwise let
// neighbours on that interface reach services bound to 127.0.0.1.
//
// # Ownership
//
// Every element and conditional rule carries the owner tag. A map key is
// unique, so a host port held by another owner fails Setup with a
// *ConflictError naming the holder, instead of being silently shadowed as
// in the reference; the same owner setting up again replaces its own
// state. Teardown removes what carries the owner's tag, GC what carries
// the network's hash and no valid attachment's. Each Setup, Teardown and GC
// is one batch for both tables, guarded by the ruleset generation.
//
// # Other owners' forward chains
//
// A mapped connection is forwarded: a DROP policy in another table's
// forward chain drops it whatever we DNAT — iptables-nft's `filter
// FORWARD` once Docker or kube-proxy set `iptables -P FORWARD DROP`, or an
// administrator's `inet filter forward` with policy drop. The reference
// adds no filter rule for its mappings, so with such a policy its host
// ports stop working (unless something else accepts them). Setup puts,
// per container address, protocol and port mapped to, an accept for the
// connections DNATed there into those chains (package nft/foreign): always
// iptables-nft's FORWARD chains (created as iptables-nft would when
// missing, so a DROP policy set later finds them), and the chains of
// Spec.AcceptChains. In iptables-nft's spelling
//
//	-m conntrack --ctstate DNAT --ctproto 6 --ctreplsrc 10.1.0.5 --ctreplsrcport 80 -j ACCEPT
//
// which covers both directions of the mapped connections and nothing
// else. They carry the owner's component tag (ownerid.Owner.ComponentTag,
// component "portmap"), so the firewall plugin's rules of the same
// attachment in the same chain stay apart; Teardown removes them, GC finds
// stale ones wherever they are.
//
// The owners set holds one marker per owner with state in the table
// (nft.OwnersSet), recording the Setup's mappings, addresses, localnet
// interfaces and masqAll when they fit in a comment and no condition is
// set. A Setup of an owner without one (every first ADD) looks up only its
// wanted keys — enough to find a held port or an address to take over
// (the hairpin_local element of a hairpins element taken over follows
// from the chain it jumps to) — instead of reading every map and set; a
// Teardown, or a repeated Setup, looks up the elements the record gives:
// so their costs do not grow with the mappings on the host; see Setup and
// Teardown. Two reads still do: the localnet records, read whole when an
// owner gives up an interface (route_localnet goes back only with the
// interface's last record), and other owners' chains, whose rules are
// found by their comments. Without a record, both read whole sets. Known limit:
// tables written by an nftcni without markers. The first Setup of an owner
// after the upgrade does not see its own elements with other keys (a
// re-ADD with changed ports), which stay, still mapped to it, until GC.
package portmap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/foreign"
	"github.com/nftcni/nftcni/ownerid"
)

// TableName is the name of both tables.
const TableName = "nftcni_portmap"

// Mapping is one forwarded port.
type Mapping struct {
	// HostIP restricts the mapping to one local address; the zero Addr
	// means any.
	HostIP   netip.Addr
	HostPort uint16
	// Proto is unix.IPPROTO_TCP, IPPROTO_UDP or IPPROTO_SCTP.
	Proto uint8
	// Target is the container's address and port; its family selects the
	// table.
	Target netip.AddrPort
}

// Spec is everything one attachment wants.
type Spec struct {
	Owner    ownerid.Owner
	Mappings []Mapping
	// Hairpin are container addresses with their prefix length whose
	// subnet is masqueraded when it reaches a mapped port of theirs (snat).
	Hairpin []netip.Prefix
	// MasqAll widens Hairpin from the subnet to every source address (the
	// masqAll key): any client reaching a mapped port of these addresses is
	// masqueraded, so the container sees the host's address instead of the
	// client's. The address's hairpin chain becomes hairpin_0, its
	// hairpin_local element (address . 0.0.0.0) or (address . ::).
	MasqAll bool
	// Localhost are IPv4 container addresses that 127.0.0.0/8 clients
	// reach through a mapped port, masqueraded (snat).
	Localhost []netip.Addr
	// Localnet are the interfaces that route to Localhost's addresses:
	// each gets route_localnet while it has such an attachment (see
	// localnet.go).
	Localnet []string
	// Conditions4 and Conditions6 restrict the family's mappings; when
	// set, that family's mappings are rules instead of map elements.
	Conditions4, Conditions6 []Condition
	// AcceptChains are chains of others (an administrator's forward
	// chain with policy drop) that get the accepts of the mapped
	// connections too, besides iptables-nft's FORWARD chains.
	AcceptChains []foreign.Chain
	// Iptables says when iptables-nft's FORWARD chains get the accepts
	// (the zero value: where iptables can be used, see foreign.Use).
	Iptables foreign.Use
}

// component names our rules in foreign chains (ownerid.Owner.ComponentTag).
const component = "portmap"

// chains are the foreign chains s's accepts go to.
func chains(accept []foreign.Chain) []foreign.Chain {
	return append(slices.Clip(foreign.Iptables), accept...)
}

// protects reports whether s's accepts go into iptables-nft's FORWARD
// chains (foreign.Use); asked only when s has accepts.
func (s Spec) protects(r foreign.Reader) (bool, error) {
	if len(s.Mappings) == 0 {
		return false, nil
	}
	return s.Iptables.Protects(r)
}

// accepts are the accepts of s's mapped connections.
func (s Spec) accepts() []foreign.Accept {
	var out []foreign.Accept
	for _, m := range s.Mappings {
		out = append(out, foreign.DNATedTo(m.Proto, m.Target))
	}
	return out
}

// family is one of the two tables with its objects.
type family struct {
	v6                           bool
	table                        *nftables.Table
	prerouting, output, hostport *nftables.Chain
	conditional, postrouting     *nftables.Chain
	input                        *nftables.Chain // nil for ip6
	hostIPPorts, ports           *nftables.Set
	hairpins                     *nftables.Set   // container address : jump hairpin_<prefix length>
	hairpinLocal                 *nftables.Set   // container address . its subnet address
	localhost                    *nftables.Set   // nil for ip6
	localnet, localnetPrior      *nftables.Set   // nil for ip6, see localnet.go
	owners                       *nftables.Set   // owner markers, nft.OwnersSet
	legacy                       []*nftables.Set // layout v1's sets, still emptied by DEL and GC
}

var (
	fam4 = newFamily(false)
	fam6 = newFamily(true)
	fams = []*family{fam4, fam6}
)

func newFamily(v6 bool) *family {
	tf, addr := nftables.TableFamilyIPv4, nftables.TypeIPAddr
	if v6 {
		tf, addr = nftables.TableFamilyIPv6, nftables.TypeIP6Addr
	}
	t := &nftables.Table{Family: tf, Name: TableName}
	dstnat := nftables.ChainPriorityNATDest
	f := &family{
		v6:          v6,
		table:       t,
		prerouting:  nft.BaseChain(t, "prerouting", nftables.ChainTypeNAT, nftables.ChainHookPrerouting, dstnat),
		output:      nft.BaseChain(t, "output", nftables.ChainTypeNAT, nftables.ChainHookOutput, dstnat),
		hostport:    &nftables.Chain{Table: t, Name: "hostports"},
		conditional: &nftables.Chain{Table: t, Name: "conditional"},
		postrouting: nft.BaseChain(t, "postrouting", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource),
		hostIPPorts: &nftables.Set{
			Table: t, Name: "hostip_ports", IsMap: true, Concatenation: true,
			KeyType:  nftables.MustConcatSetType(addr, nftables.TypeInetProto, nftables.TypeInetService),
			DataType: nftables.MustConcatSetType(addr, nftables.TypeInetService),
		},
		ports: &nftables.Set{
			Table: t, Name: "ports", IsMap: true, Concatenation: true,
			KeyType:  nftables.MustConcatSetType(nftables.TypeInetProto, nftables.TypeInetService),
			DataType: nftables.MustConcatSetType(addr, nftables.TypeInetService),
		},
		hairpins: &nftables.Set{
			Table: t, Name: "hairpins", IsMap: true, KeyType: addr, DataType: nftables.TypeVerdict, KeyByteOrder: binaryutil.BigEndian,
		},
		hairpinLocal: &nftables.Set{Table: t, Name: "hairpin_local", KeyType: nftables.MustConcatSetType(addr, addr)},
		owners:       nft.OwnersSet(t),
		legacy: []*nftables.Set{{
			Table: t, Name: "hairpin", Interval: true, Concatenation: true,
			KeyType: nftables.MustConcatSetType(addr, addr),
		}},
	}
	if !v6 {
		f.input = nft.BaseChain(t, "input", nftables.ChainTypeFilter, nftables.ChainHookInput, nftables.ChainPriorityFilter)
		f.localhost = &nftables.Set{Table: t, Name: "localhost", KeyType: addr, KeyByteOrder: binaryutil.BigEndian}
		f.localnet, f.localnetPrior = newLocalnetSets(t)
	}
	return f
}

func (f *family) sets() []*nftables.Set {
	s := []*nftables.Set{f.hostIPPorts, f.ports, f.hairpins, f.hairpinLocal}
	if f.localhost != nil {
		s = append(s, f.localhost, f.localnet)
	}
	return s
}

// chains are the family's chains in creation order (a jump's target
// before the jump).
func (f *family) chains() []*nftables.Chain {
	c := []*nftables.Chain{f.conditional, f.hostport, f.prerouting, f.output, f.postrouting}
	if f.input != nil {
		c = append(c, f.input)
	}
	return c
}

func famOf(a netip.Addr) *family {
	if a.Is4() {
		return fam4
	}
	return fam6
}

// hairpinChain is family f's hairpin chain for prefix length bits.
func hairpinChain(f *family, bits int) *nftables.Chain {
	return &nftables.Chain{Table: f.table, Name: fmt.Sprintf("hairpin_%d", bits)}
}

// hairpinChains are the hairpin chains the elements in want jump to, each
// once.
func hairpinChains(f *family, want []nft.Element) []*nftables.Chain {
	var out []*nftables.Chain
	for _, e := range want {
		if !slices.ContainsFunc(out, func(c *nftables.Chain) bool { return c.Name == e.Jump }) {
			out = append(out, &nftables.Chain{Table: f.table, Name: e.Jump})
		}
	}
	return out
}

// chainBits is the prefix length a hairpin chain is named after.
func chainBits(name string) (int, bool) {
	n, ok := strings.CutPrefix(name, "hairpin_")
	if !ok {
		return 0, false
	}
	b, err := strconv.Atoi(n)
	return b, err == nil
}

// isPortMap tells the port maps, keyed by host port, from the sets keyed
// by container address.
func (f *family) isPortMap(s *nftables.Set) bool { return s == f.hostIPPorts || s == f.ports }

// sameAddress reports whether e, an element of the address set s, is for
// the same container address as one of want: the address is the whole key
// of hairpins and localhost and the first half of hairpin_local's.
func (f *family) sameAddress(s *nftables.Set, e nft.Element, want []nft.Element) bool {
	addrOf := func(k []byte) []byte {
		if s == f.hairpinLocal {
			return k[:len(k)/2]
		}
		return k
	}
	return slices.ContainsFunc(want, func(w nft.Element) bool { return string(addrOf(e.Key)) == string(addrOf(w.Key)) })
}

// record is what the owner's marker keeps of s, for Teardown and a
// repeated Setup to look up its elements: one word per mapping
// ("<proto>:<host port>><target>[@<host IP>]"), hairpin prefix ("h<prefix>"),
// localhost address ("l<address>") and localnet interface ("n<name>"; a
// name has no spaces), and "m" for masqAll. Empty when s has conditions
// (its mappings are rules, which Teardown finds by reading the chain).
func record(s Spec) string {
	if len(s.Conditions4) > 0 || len(s.Conditions6) > 0 {
		return ""
	}
	var w []string
	for _, m := range s.Mappings {
		r := fmt.Sprintf("%d:%d>%s", m.Proto, m.HostPort, m.Target)
		if m.HostIP.IsValid() {
			r += "@" + m.HostIP.String()
		}
		w = append(w, r)
	}
	for _, p := range s.Hairpin {
		w = append(w, "h"+p.String())
	}
	for _, a := range s.Localhost {
		w = append(w, "l"+a.String())
	}
	for _, name := range s.Localnet {
		w = append(w, "n"+name)
	}
	if s.MasqAll {
		w = append(w, "m")
	}
	return strings.Join(w, " ")
}

// specOf reads a record back into the Spec of owner it was made from.
func specOf(owner ownerid.Owner, rec string) (Spec, error) {
	s := Spec{Owner: owner}
	for _, w := range strings.Fields(rec) {
		switch {
		case w == "m":
			s.MasqAll = true
		case strings.HasPrefix(w, "n"):
			s.Localnet = append(s.Localnet, w[1:])
		case strings.HasPrefix(w, "h"):
			p, err := netip.ParsePrefix(w[1:])
			if err != nil {
				return s, err
			}
			s.Hairpin = append(s.Hairpin, p)
		case strings.HasPrefix(w, "l"):
			a, err := netip.ParseAddr(w[1:])
			if err != nil {
				return s, err
			}
			s.Localhost = append(s.Localhost, a)
		default:
			head, tgt, ok := strings.Cut(w, ">")
			if !ok {
				return s, fmt.Errorf("malformed record word %q", w)
			}
			var m Mapping
			tgt, hostIP, at := strings.Cut(tgt, "@")
			if at {
				a, err := netip.ParseAddr(hostIP)
				if err != nil {
					return s, err
				}
				m.HostIP = a
			}
			t, err := netip.ParseAddrPort(tgt)
			if err != nil {
				return s, err
			}
			m.Target = t
			proto, port, ok := strings.Cut(head, ":")
			pr, err1 := strconv.ParseUint(proto, 10, 8)
			po, err2 := strconv.ParseUint(port, 10, 16)
			if !ok || err1 != nil || err2 != nil {
				return s, fmt.Errorf("malformed record word %q", w)
			}
			m.Proto, m.HostPort = uint8(pr), uint16(po)
			s.Mappings = append(s.Mappings, m)
		}
	}
	return s, nil
}

// recompute reads the record in owner's marker back as what the owner
// has, per set (see nft.Recorded).
func recompute(owner ownerid.Owner, rec string) (map[*nftables.Set][]nft.Element, error) {
	s, err := specOf(owner, rec)
	if err != nil {
		return nil, err
	}
	p, err := plan(s)
	if err != nil {
		return nil, err
	}
	return p.elems, nil
}

// displacedLocal are the hairpin_local keys that go with the hairpins
// elements of cur that this batch removes without re-adding them: another
// attachment's at an address taken over, or the owner's own at another
// prefix length (masqAll switched). Their key is (address . address masked
// to the prefix length of the chain they jump to), so the lookups find
// them without reading the whole set.
func displacedLocal(cur, want []nft.Element, drop func(nft.Element) bool) []nft.Element {
	var out []nft.Element
	for _, e := range cur {
		if !drop(e) || slices.ContainsFunc(want, func(w nft.Element) bool { return nft.SameElement(e, w) }) {
			continue
		}
		a, ok := netip.AddrFromSlice(e.Key)
		bits, okBits := chainBits(e.Jump)
		if !ok || !okBits || bits > a.BitLen() {
			continue
		}
		sub := netip.PrefixFrom(a, bits).Masked()
		out = append(out, nft.Element{Key: nft.Concat(a.AsSlice(), sub.Addr().AsSlice())})
	}
	return out
}

// departs reports whether an element of prev has no element with its key
// in want.
func departs(prev, want []nft.Element) bool {
	return slices.ContainsFunc(prev, func(e nft.Element) bool {
		return !slices.ContainsFunc(want, func(w nft.Element) bool { return string(w.Key) == string(e.Key) })
	})
}

// ConflictError says a host port is held by another attachment.
type ConflictError struct {
	HostIP   netip.Addr // zero: any address
	HostPort uint16
	Proto    uint8
	// Holder is the holder's comment: its owner tag (which ends with the
	// container ID's first characters) or whatever an untagged element
	// carries.
	Holder string
}

func (e *ConflictError) Error() string {
	where := "any address"
	if e.HostIP.IsValid() {
		where = e.HostIP.String()
	}
	holder := "an element not created by nftcni"
	if p, ok := ownerid.ParseTag(e.Holder); ok {
		_, id, _ := strings.Cut(e.Holder, " ")
		holder = fmt.Sprintf("container %q (attachment %s of network hash %s)", id, p.Attachment, p.Network)
	} else if e.Holder != "" {
		holder = fmt.Sprintf("%q", e.Holder)
	}
	return fmt.Sprintf("host port %d/%s on %s is already mapped by %s", e.HostPort, ProtoName(e.Proto), where, holder)
}

// ProtoName is the protocol's name as nft prints it (nft.ProtoName).
func ProtoName(p uint8) string { return nft.ProtoName(p) }

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

// Setup makes ns (nil: the caller's) forward s's mappings, replacing
// whatever s.Owner had before, and sets route_localnet on s.Localnet. A
// host port held by another owner fails the whole Setup with a
// *ConflictError and changes nothing; when route_localnet cannot be set,
// Setup removes what it committed (the owner's state, its accepts in other
// owners' chains included) and fails with the reference's "unable to
// enable route_localnet: …".
//
// Per table, it reads what is there as nft.TaggedTable.Setup does (an
// nft.OwnerRead): when the table exists and holds no marker of s.Owner
// (every first ADD), the fast path reads only the elements with the wanted
// keys — which is what conflicts and take-overs need, the owner having
// nothing else — and no conditional rules; with a marker carrying a
// record, the recorded path looks up the record's keys too; with a marker
// without one, the slow path reads whole sets and the chain. If anything
// but a conflict or route_localnet fails on a lookup path, Setup runs once
// more on the slow path, the reference semantics.
func Setup(ns *netns.NS, s Spec) error {
	pl, err := Plan(ns, s)
	if err != nil {
		return err
	}
	c, err := nft.Open(ns)
	if err != nil {
		return err
	}
	defer c.Close()
	err = c.Apply(pl)
	var ce *ConflictError
	var le *localnetError
	switch {
	case errors.As(err, &ce):
		return err // our decision, nothing for the kernel to explain
	case errors.As(err, &le):
		// Committed, but localhost clients cannot use it: a failed Setup
		// leaves nothing, its accepts in other owners' chains included.
		if _, rerr := Teardown(ns, s.Owner, s.AcceptChains); rerr != nil {
			return errors.Join(le, rerr)
		}
		return le
	case err != nil:
		return fmt.Errorf("unable to set up nftables rules for port mappings: %w", err)
	}
	return nil
}

// Plan is Setup's plan, for a transaction the caller owns (nft.Plan); ns
// is the namespace of that transaction, whose route_localnet sysctls the
// plan reads and, once the batch is committed, sets (nft.Tx.AfterCommit).
// Unlike Setup, a failure to set route_localnet leaves what was committed
// in place: the caller decides.
func Plan(ns *netns.NS, s Spec) (nft.Plan, error) {
	p, err := plan(s)
	if err != nil {
		return nft.Plan{}, fmt.Errorf("port mappings of container %s: %w", s.Owner.ContainerID, err)
	}
	active := p.families()
	marker := []nft.Element{nft.MarkerWith(s.Owner, record(s))}
	mark := foreign.Mark{Owner: s.Owner, Component: component}
	run := func(tx *nft.Tx, slowOnly bool, lookups *bool) error {
		b := tx.Batch()
		// changed: the owner's elements or rules change, and so
		// its foreign rules are rewritten.
		changed := false
		// owned: the owner has a marker in one of the tables. Without
		// one it has no rules in other owners' chains either: they are
		// written and removed in the same batches as its marker.
		owned := false
		for _, f := range fams {
			wanted := slices.Contains(active, f)
			r, err := tx.ReadOwner(f.table, s.Owner, slowOnly, recompute)
			if err != nil {
				return err
			}
			if !r.Exists && !wanted {
				continue // nothing of ours to remove, nothing to add
			}
			owned = owned || r.Mine
			*lookups = *lookups || r.Lookups()
			if r.Lookups() && !r.Mine && !wanted {
				continue // the owner has nothing here and wants nothing
			}
			if wanted {
				if err := ensureStatic(tx, f); err != nil {
					return err
				}
				for _, ch := range hairpinChains(f, p.elems[f.hairpins]) {
					bits, ok := chainBits(ch.Name)
					if !ok {
						continue
					}
					if err := tx.EnsureChain(ch); err != nil {
						return err
					}
					if err := tx.EnsureRules(ch, hairpinRules(f, bits)); err != nil {
						return err
					}
				}
			}
			before := b.Len()
			// leaving: the record has localnet records this Setup
			// drops (the attachment now routes elsewhere); whether
			// their interfaces get route_localnet back depends on
			// everyone's records, so localnet is read whole.
			leaving := r.Prev != nil && f.localnet != nil && departs(r.Prev[f.localnet], p.elems[f.localnet])
			var localnetUsers map[string]bool
			var displaced []nft.Element // hairpin_local keys of the hairpins replaced
			for _, set := range f.sets() {
				want := p.elems[set]
				var cur []nft.Element
				switch {
				case r.Lookups() && set == f.localnet && leaving:
					cur, err = tx.Elements(set)
				case set == f.hairpinLocal:
					cur, err = r.Read(tx, set, want, displaced...)
				default:
					cur, err = r.Read(tx, set, want)
				}
				if err != nil {
					return err
				}
				if err := conflicts(f, set, cur, want, s.Owner); err != nil {
					return err
				}
				drop := func(e nft.Element) bool {
					// Address sets: the newest attachment of an address wins (a
					// stale element of a missed DEL must not block it).
					return s.Owner.OwnedBy(e.Comment) || (!f.isPortMap(set) && f.sameAddress(set, e, want))
				}
				r.Replace(b, set, cur, want, drop) // see nft.Batch.ReplaceLookedUp
				switch set {
				case f.hairpins:
					displaced = displacedLocal(cur, want, drop)
				case f.localnet:
					localnetUsers = usersAfter(cur, want, drop)
				}
			}
			if f.localnetPrior != nil {
				// The fast path saw only the wanted keys: it adds records
				// and removes none, so it only needs to know which of its
				// interfaces have a prior value already.
				var priors []nft.Element
				complete := !r.Lookups() || leaving
				switch {
				case !r.Exists:
				case complete:
					priors, err = tx.Elements(f.localnetPrior)
				default:
					var keys []nft.Element
					for _, name := range p.localnet {
						keys = append(keys, nft.Element{Key: priorKey(name)})
					}
					priors, err = tx.Lookup(f.localnetPrior, keys)
				}
				if err != nil {
					return err
				}
				// A restore that fails here (another interface the owner
				// left) keeps its prior value for Teardown or GC to retry.
				if _, err := localnetPlan(tx, ns, priors, localnetUsers, p.localnet, complete); err != nil {
					return err
				}
			}
			if err := replaceRules(tx, f, s.Owner, p.rules[f], r.Whole()); err != nil {
				return err
			}
			changed = changed || b.Len() > before
			// The marker goes with state: kept while the owner has some
			// here, removed with the last of it.
			var wantMarker []nft.Element
			if wanted {
				wantMarker = marker
			}
			b.ReplaceLookedUp(f.owners, r.Markers, wantMarker, func(e nft.Element) bool {
				return wanted || s.Owner.OwnedBy(e.Comment)
			})
		}
		protect, err := s.protects(tx)
		if err != nil {
			return err
		}
		for _, ch := range chains(s.AcceptChains) {
			// iptables-nft's chains, which every Teardown cleans, are
			// not read for an owner without state (every first ADD):
			// reading one costs in proportion to everyone's rules in
			// it. A named chain may hold rules a Teardown with another
			// configuration left there, and is read.
			var err error
			switch {
			case ch.Iptables && !protect:
				// None wanted there; an owner with state may have
				// rules there from an ADD with another rule or
				// config.
				if owned || slowOnly {
					_, err = foreign.Remove(tx, ch, mark)
				}
			case !owned && !slowOnly && ch.Iptables:
				err = foreign.Insert(tx, ch, mark, s.accepts())
			default:
				err = foreign.Sync(tx, ch, mark, s.accepts(), changed)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	return nft.Plan{
		What:  "port mappings of container " + s.Owner.ContainerID,
		Run:   run,
		Needs: []nft.Feature{nft.ConcatRanges},
		// A conflict is our decision; route_localnet failed after the
		// commit.
		Retry: func(err error) bool {
			var ce *ConflictError
			var le *localnetError
			return !errors.As(err, &ce) && !errors.As(err, &le)
		},
	}, nil
}

// ensureStatic adds the family's table, chains, sets and static rules to
// the batch (no-ops for what already exists as wanted).
func ensureStatic(tx *nft.Tx, f *family) error {
	b := tx.Batch()
	b.AddTable(f.table)
	for _, s := range f.sets() {
		b.AddSet(s)
	}
	if f.localnetPrior != nil {
		b.AddSet(f.localnetPrior)
	}
	b.AddSet(f.owners)
	for _, ch := range f.chains() {
		if err := tx.EnsureChain(ch); err != nil {
			return err
		}
	}
	for _, ch := range f.chains() {
		if ch == f.conditional {
			continue // per-owner rules only
		}
		if err := tx.EnsureRules(ch, staticRules(f, ch)); err != nil {
			return err
		}
	}
	return nil
}

// conflicts fails when a wanted map key is held by someone else. Sets
// other than the port maps are keyed by container address, which is
// taken over like the masquerade sets do (see nft/masq).
func conflicts(f *family, set *nftables.Set, cur, want []nft.Element, owner ownerid.Owner) error {
	if !f.isPortMap(set) {
		return nil
	}
	for _, w := range want {
		for _, e := range cur {
			if string(e.Key) != string(w.Key) || owner.OwnedBy(e.Comment) {
				continue
			}
			ce := &ConflictError{Holder: e.Comment}
			k := w.Key
			if set.Name == "hostip_ports" {
				n := len(k) - 8
				ce.HostIP, _ = netip.AddrFromSlice(k[:n])
				k = k[n:]
			}
			ce.Proto, ce.HostPort = k[0], binary.BigEndian.Uint16(k[4:6])
			return ce
		}
	}
	return nil
}

// replaceRules replaces owner's rules in the conditional chain by want.
// Without read, the chain is known to hold none of owner's rules (no
// table, or no marker) and is not read.
func replaceRules(tx *nft.Tx, f *family, owner ownerid.Owner, want []*nftables.Rule, read bool) error {
	var cur []nft.Rule
	if read {
		var err error
		if cur, err = tx.Rules(f.conditional); err != nil {
			return err
		}
	}
	for _, r := range cur {
		if owner.OwnedBy(r.Comment) {
			tx.Batch().DeleteRule(f.conditional, r.Handle)
		}
	}
	for _, r := range want {
		tx.Batch().AddRule(r, owner.Tag())
	}
	return nil
}

// Removed is what Teardown or GC took away: the UDP host ports per family,
// whose conntrack entries the caller flushes.
type Removed struct {
	UDP4, UDP6 []uint16
	Elements   int
	Rules      int
	// Foreign are the rules removed from other owners' chains.
	Foreign int
	// Warning says route_localnet could not be given back to an
	// interface; its prior value stays recorded and the next Teardown or
	// GC tries again.
	Warning error
}

// Teardown removes everything owner has, its rules in iptables-nft's
// FORWARD chains and in acceptChains included. Nothing to remove writes
// nothing.
//
// Per table: without owner's marker, owner has nothing there (the marker
// goes with its state) and nothing is read; with a marker recording the
// owner's last Setup, the elements the record gives are looked up and
// those still tagged as owner's deleted; with a marker without a record,
// the maps, sets (layout v1's too) and the conditional chain are read
// whole. Whether the owner's interfaces get route_localnet back depends on
// everyone else's localnet records (localnet.go): with a record, a partial
// read per interface asks whether another attachment has one there;
// without, the set is read whole. The owner's rules in other owners'
// chains are found through the index of package foreign when it is right,
// by reading the chain otherwise.
func Teardown(ns *netns.NS, owner ownerid.Owner, acceptChains []foreign.Chain) (Removed, error) {
	mark := foreign.Mark{Owner: owner, Component: component}
	r, err := remove(ns, owner.OwnedBy, &owner, func(tx *nft.Tx, owned bool) (int, error) {
		n := 0
		for _, ch := range chains(acceptChains) {
			if !owned && ch.Iptables {
				continue // no marker, no rules there (see Setup)
			}
			k, err := foreign.Remove(tx, ch, mark)
			if err != nil {
				return 0, err
			}
			n += k
		}
		return n, nil
	})
	if err != nil {
		return r, fmt.Errorf("removing port mappings of container %s (%s, network %s): %w", owner.ContainerID, owner.IfName, owner.Network, err)
	}
	return r, nil
}

// GC removes everything of network that none of valid owns, its rules in
// chains of others wherever they are.
func GC(ns *netns.NS, network string, valid []ownerid.Owner) (Removed, error) {
	stale := ownerid.StaleFunc(network, valid)
	r, err := remove(ns, stale, nil, func(tx *nft.Tx, _ bool) (int, error) {
		return foreign.RemoveEverywhere(tx, foreign.Of(component, stale))
	})
	if err != nil {
		return r, fmt.Errorf("collecting stale port mappings of network %s: %w", network, err)
	}
	return r, nil
}

// remove drops what match selects in our tables and runs removeForeign
// in the same batch, telling it whether the owner had a marker in one of
// the tables; for a Teardown, owner is the owner (whose marker may spare
// reading whole sets).
func remove(ns *netns.NS, match func(comment string) bool, owner *ownerid.Owner, removeForeign func(tx *nft.Tx, owned bool) (int, error)) (Removed, error) {
	c, err := nft.Open(ns)
	if err != nil {
		return Removed{}, err
	}
	defer c.Close()
	var out Removed
	err = c.Update(func(tx *nft.Tx) error {
		out = Removed{}
		owned := owner == nil
		for _, f := range fams {
			ok, err := tx.TableExists(f.table)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			var prev map[*nftables.Set][]nft.Element
			if owner != nil {
				markers, mine, err := tx.OwnerMarker(f.table, *owner)
				if err != nil {
					return err
				}
				if !mine {
					continue // nothing of the owner's here
				}
				owned = true
				prev = nft.Recorded(*owner, markers, recompute)
			}
			// The owners set is last: a marker goes with the owner's
			// other elements (and is not counted in Removed.Elements).
			sets := append(slices.Concat(f.sets(), f.legacy), f.owners)
			if prev != nil {
				sets = append(f.sets(), f.owners)
			}
			// Restoring route_localnet needs to know which interfaces
			// keep records: without a record, the set is read whole; a
			// recorded owner with localnet records asks, per interface
			// of its own, whether another attachment has a record there
			// too (a partial read: usually the first reply tells); a
			// recorded owner without any has nothing to give back.
			restore := f.localnet != nil && (prev == nil || len(prev[f.localnet]) > 0)
			var users map[string]bool // interfaces with localnet records left
			var ifaces []string       // the interfaces users speaks for; nil: all
			for _, set := range sets {
				var cur []nft.Element
				switch {
				case prev == nil:
					cur, err = tx.Elements(set)
				case set == f.localnet && restore:
					if cur, err = tx.Lookup(set, prev[set]); err != nil {
						return err
					}
					cur = nft.UniqueElements(cur)
					users, ifaces, err = othersOn(tx, set, cur, match)
				case set == f.owners:
					cur, err = tx.Lookup(set, []nft.Element{nft.Marker(*owner)})
				default:
					cur, err = tx.Lookup(set, prev[set])
					cur = nft.UniqueElements(cur)
				}
				if err != nil {
					return err
				}
				if set == f.localnet && users == nil {
					users = usersAfter(cur, nil, func(e nft.Element) bool { return match(e.Comment) })
				}
				var del []nft.Element
				for _, e := range cur {
					if !match(e.Comment) {
						continue
					}
					del = append(del, e)
					if f.isPortMap(set) {
						k := e.Key[len(e.Key)-8:]
						if k[0] == unix.IPPROTO_UDP {
							p := binary.BigEndian.Uint16(k[4:6])
							if f.v6 {
								out.UDP6 = append(out.UDP6, p)
							} else {
								out.UDP4 = append(out.UDP4, p)
							}
						}
					}
				}
				tx.Batch().DeleteElements(set, del)
				if set != f.owners {
					out.Elements += len(del)
				}
			}
			if restore {
				var priors []nft.Element
				if ifaces == nil {
					priors, err = tx.Elements(f.localnetPrior)
				} else {
					var keys []nft.Element
					for _, name := range ifaces {
						keys = append(keys, nft.Element{Key: priorKey(name)})
					}
					priors, err = tx.Lookup(f.localnetPrior, keys)
				}
				if err != nil {
					return err
				}
				if out.Warning, err = localnetPlan(tx, ns, priors, users, nil, true); err != nil {
					return err
				}
			}
			if prev != nil {
				continue // a record is only written without conditional rules
			}
			rules, err := tx.Rules(f.conditional)
			if err != nil {
				return err
			}
			for _, r := range rules {
				if match(r.Comment) {
					tx.Batch().DeleteRule(f.conditional, r.Handle)
					out.Rules++
				}
			}
		}
		var err error
		out.Foreign, err = removeForeign(tx, owned)
		return err
	})
	return out, err
}

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
		s = Spec{Owner: s.Owner, AcceptChains: s.AcceptChains, Iptables: s.Iptables}
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
		rs, err := c.Rules(f.conditional)
		if err != nil {
			return nil, nil, err
		}
		for _, r := range rs {
			if owner.OwnedBy(r.Comment) {
				rules[f]++
			}
		}
	}
	return out, rules, nil
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
			cur, err := c.Elements(set)
			if err != nil {
				return err
			}
			same := nft.SameElement
			if set == f.owners {
				// A marker's record is compared by what it plans, below.
				same = func(e, w nft.Element) bool { return string(e.Key) == string(w.Key) && owner.OwnedBy(e.Comment) }
			}
			for _, w := range want[set] {
				if !slices.ContainsFunc(cur, func(e nft.Element) bool { return same(e, w) }) {
					return fmt.Errorf("missing hostport element in %s %s %s %q: %s", familyName(f), TableName, setKind(set), set.Name, describeElem(set, w))
				}
			}
			var mine []nft.Element
			for _, e := range cur {
				if !owner.OwnedBy(e.Comment) {
					continue
				}
				if !slices.ContainsFunc(want[set], func(w nft.Element) bool { return same(e, w) }) {
					return fmt.Errorf("unexpected hostport element in %s %s %s %q: %s", familyName(f), TableName, setKind(set), set.Name, describeElem(set, e))
				}
				mine = append(mine, e)
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
		rs, err := c.Rules(f.conditional)
		if err != nil {
			return err
		}
		n := 0
		for _, r := range rs {
			if owner.OwnedBy(r.Comment) {
				n++
			}
		}
		if want := rules(f); n != want {
			return fmt.Errorf("missing hostport rules in %s %s chain %q: %d of the container's rules found, %d expected", familyName(f), TableName, f.conditional.Name, n, want)
		}
	}
	return nil
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
	s += fmt.Sprintf("%s . %d", ProtoName(k[0]), binary.BigEndian.Uint16(k[4:6]))
	if len(e.Val) >= 8 {
		n := len(e.Val) - 4
		a, _ := netip.AddrFromSlice(e.Val[:n])
		s += fmt.Sprintf(" : %s . %d", a, binary.BigEndian.Uint16(e.Val[n:n+2]))
	}
	return s
}

func port(p uint16) []byte { return binary.BigEndian.AppendUint16(nil, p) }
