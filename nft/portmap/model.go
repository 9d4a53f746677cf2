package portmap

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"

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
	// iptablesReachable pins, for a test, whether an iptables program is
	// reachable (foreign.Use.Protects); nil, as every caller outside the
	// package's tests leaves it, is the machine's answer.
	iptablesReachable func() bool
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
	return s.Iptables.Protects(r, s.iptablesReachable)
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
