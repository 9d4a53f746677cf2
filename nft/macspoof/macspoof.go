// Package macspoof is the bridge plugin's macspoofchk filter:
// frames a container sends into the bridge
// must carry the container's own source MAC, anything else is dropped.
//
// # Data model
//
//	table bridge nftcni_macspoof {
//		set guarded {
//			type ifname
//			elements = { "veth1a2b3c4d" comment "<owner tag>" }
//		}
//		set allowed {
//			type ifname . ether_addr
//			elements = { "veth1a2b3c4d" . 02:42:0a:16:00:05 comment "<owner tag>" }
//		}
//		set owners {
//			type ifname
//			elements = { "<attachment hash>" comment "<owner tag>" }
//		}
//		chain prerouting {
//			type filter hook prerouting priority -300; policy accept;
//			iifname . ether saddr @allowed accept comment "nftcni macspoof v1: own MAC"
//			iifname @guarded drop comment "nftcni macspoof v1: spoofed MAC"
//		}
//	}
//
// A frame entering the bridge from a guarded port (the container's host
// veth) passes only when (port . source MAC) is the pair registered for it.
// The reference installs a jump rule per container in the shared PREROUTING
// chain plus two chains per container, so every frame on the bridge walks
// a rule per guarded container; here it is two set lookups however many
// there are. Frames from unguarded ports (uplinks, containers without
// macspoofchk) match neither set and are accepted by the policy, exactly as
// before.
//
// The state is the two sets' elements, each carrying the owner tag
// (ownerid.Owner.Tag), and the owner's marker in owners (nft.OwnersSet, which
// lets a first Setup look up its own keys instead of reading both sets):
// Teardown removes the owner's, GC the network's stale ones; the table,
// chain and rules are static, recognised by their comments, and never
// deleted. Like the reference (priority -300, `dstnat` in the bridge
// family), the chain runs before any other bridge filter.
//
// Interface names are recycled: a Setup for a port takes over the elements
// for that port name whoever owned them, so an element left behind by a
// missed DEL cannot lock out the next container given the same veth name.
// The same stale element can still drop traffic of a container attached
// without macspoofchk on a recycled name until GC (or a DEL) runs — as with
// the reference. Taking over is by port name whatever the MAC, which a
// lookup of the wanted (port . MAC) cannot find: when a first Setup finds
// its port taken, it reads both sets whole (nft.TaggedTable's
// TakeOverByPrefix).
package macspoof

import (
	"fmt"
	"net"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/ownerid"
)

// Names of our objects; the table name must keep the nft.TablePrefix.
const (
	TableName = "nftcni_macspoof"
	ChainName = "prerouting"
)

var (
	// store is the component: the table, chain, sets and rules below.
	// Take-over is by port name whatever the MAC, which a lookup of the
	// wanted (port . MAC) cannot find: see nft.TaggedTable.
	store = &nft.TaggedTable{Table: table, Chain: chain, Sets: sets, Rules: rules, Recompute: recompute, TakeOverByPrefix: true}

	table = &nftables.Table{Family: nftables.TableFamilyBridge, Name: TableName}

	chain = nft.BaseChain(table, ChainName, nftables.ChainTypeFilter, nftables.ChainHookPrerouting, nftables.ChainPriorityRef(-300))

	guarded = &nftables.Set{Table: table, Name: "guarded", KeyType: nftables.TypeIFName, KeyByteOrder: binaryutil.NativeEndian}
	// A plain hash set: NFT_SET_CONCAT (and the per-field description
	// that comes with it) is for interval sets, as nft sends it.
	allowed = &nftables.Set{
		Table: table, Name: "allowed",
		KeyType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeEtherAddr),
	}

	sets = []*nftables.Set{guarded, allowed}
)

// Setup drops frames entering the bridge from hostIf (the host veth) whose
// source MAC is not mac, owned by owner, in ns (nil: own namespace). It is
// idempotent; a Setup of the same owner replaces its previous port and MAC.
func Setup(ns *netns.NS, owner ownerid.Owner, hostIf string, mac net.HardwareAddr) error {
	what, want, takeOver, err := setup(owner, hostIf, mac)
	if err != nil {
		return err
	}
	return store.Setup(ns, owner, want, hostIf+" "+mac.String(), takeOver, what)
}

// Plan is Setup's plan, for a transaction the caller owns (nft.Plan).
func Plan(owner ownerid.Owner, hostIf string, mac net.HardwareAddr) (nft.Plan, error) {
	what, want, takeOver, err := setup(owner, hostIf, mac)
	if err != nil {
		return nft.Plan{}, err
	}
	return store.Plan(owner, want, hostIf+" "+mac.String(), takeOver, what), nil
}

// setup is what Setup wants: its elements, and what it takes over besides
// the owner's own elements from before — anyone's for this port (the first
// 16 bytes of both sets' keys are the port name).
func setup(owner ownerid.Owner, hostIf string, mac net.HardwareAddr) (what string, want map[*nftables.Set][]nft.Element,
	takeOver func(*nftables.Set, nft.Element) bool, err error) {
	what = fmt.Sprintf("adding MAC spoof check for %s on %s", mac, hostIf)
	if want, err = elements(owner, hostIf, mac); err != nil {
		return "", nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	port := nft.IfnameKey(hostIf)
	return what, want, func(_ *nftables.Set, e nft.Element) bool {
		return len(e.Key) >= nft.IfnameLen && string(e.Key[:nft.IfnameLen]) == string(port)
	}, nil
}

// elements are owner's elements for hostIf and mac.
func elements(owner ownerid.Owner, hostIf string, mac net.HardwareAddr) (map[*nftables.Set][]nft.Element, error) {
	if hostIf == "" || len(hostIf) >= nft.IfnameLen {
		return nil, fmt.Errorf("invalid interface name %q", hostIf)
	}
	if len(mac) != 6 {
		return nil, fmt.Errorf("not an Ethernet address: %q", mac.String())
	}
	tag := owner.Tag()
	port := nft.IfnameKey(hostIf)
	return map[*nftables.Set][]nft.Element{
		guarded: {{Key: port, Comment: tag}},
		allowed: {{Key: nft.Concat(port, mac, []byte{0, 0}), Comment: tag}},
	}, nil
}

// recompute reads back the record Setup keeps in the owner's marker: the
// port name and the MAC.
func recompute(owner ownerid.Owner, record string) (map[*nftables.Set][]nft.Element, error) {
	hostIf, m, ok := strings.Cut(record, " ")
	if !ok {
		return nil, fmt.Errorf("malformed record %q", record)
	}
	mac, err := net.ParseMAC(m)
	if err != nil {
		return nil, err
	}
	return elements(owner, hostIf, mac)
}

// Teardown removes everything owner added. Nothing to remove is success,
// and then nothing is written (no table is created).
func Teardown(ns *netns.NS, owner ownerid.Owner) error {
	return store.Teardown(ns, owner,
		fmt.Sprintf("removing MAC spoof check of container %s (%s, network %s)", owner.ContainerID, owner.IfName, owner.Network))
}

// GC removes everything of network not owned by one of valid.
func GC(ns *netns.NS, network string, valid []ownerid.Owner) error {
	return store.GC(ns, network, valid, fmt.Sprintf("collecting stale MAC spoof checks of network %s", network))
}

// Registers as nft numbers them: the 16-byte interface name fills register
// 1, so the MAC of the concatenation goes to register 2.
const (
	reg1 = 1
	reg2 = 2
)

func rules() []nft.StaticRule {
	iifname := &expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg1}
	return []nft.StaticRule{
		{
			// iifname . ether saddr @allowed accept
			Comment: "nftcni macspoof v1: own MAC",
			Exprs: []expr.Any{
				iifname,
				&expr.Payload{DestRegister: reg2, Base: expr.PayloadBaseLLHeader, Offset: 6, Len: 6},
				&expr.Lookup{SourceRegister: reg1, SetName: allowed.Name},
				&expr.Verdict{Kind: expr.VerdictAccept},
			},
		},
		{
			// iifname @guarded drop
			Comment: "nftcni macspoof v1: spoofed MAC",
			Exprs: []expr.Any{
				iifname,
				&expr.Lookup{SourceRegister: reg1, SetName: guarded.Name},
				&expr.Verdict{Kind: expr.VerdictDrop},
			},
		},
	}
}
