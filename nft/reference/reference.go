// Package reference knows the on-host layout of the reference CNI plugins
// (containernetworking/plugins v1.9.1 and v1.10.0) and finds, checks and
// removes what they left for one attachment, natively through nf_tables:
// nftcni's DEL, CHECK and GC of an attachment the reference made, on a
// host where nftcni replaced it.
//
// # What the reference leaves per attachment
//
// With the iptables backend (the default) the reference runs iptables —
// iptables-nft on the hosts we support, so its rules are nf_tables rules
// in iptables-nft's tables, spelled with x_tables matches and targets:
//
//	ipMasq (bridge, ptp), `ip nat` and `ip6 nat`:
//	  chain CNI-<hash(network+ID)>: -d <subnet> -j ACCEPT; ! -d <multicast> -j MASQUERADE
//	  POSTROUTING: -s <address> -j CNI-<hash> -m comment --comment 'name: "<net>" id: "<ID>"'
//	portmap, `ip nat` and `ip6 nat`:
//	  chain CNI-DN-<hash(network+ID)>: per mapping [-s <subnet>|127.0.0.1 … -j CNI-HOSTPORT-SETMARK] -j DNAT
//	  CNI-HOSTPORT-DNAT: -p <proto> -m multiport --dports … -j CNI-DN-<hash> -m comment --comment 'dnat name: "<net>" id: "<ID>"'
//	firewall, `ip filter` and `ip6 filter`:
//	  CNI-FORWARD: -d <address> -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT; -s <address> -j ACCEPT
//
// With the nftables backends (`ipMasqBackend`/`backend` "nftables") it
// writes rules into tables of its own:
//
//	inet cni_plugins_masquerade, chain masq_checks: one rule per address,
//	  comment "<h(net)>-<h(ifname:ID)>, net: <net>, if: <ifname>, id: <ID>"
//	ip/ip6 cni_hostport, chains hostports, hostip_hostports, masquerading:
//	  rules commented with the bare container ID
//
// and bridge's macspoofchk puts chains `cni-br-iface-<ID>-<ifname>` (and
// `…-mac`) into table `bridge nat`, jumped to from its PREROUTING chain by
// a rule commented `macspoofchk-<ID>-<ifname>`.
//
// Everything else the reference makes is shared by all attachments (the
// CNI-HOSTPORT-* chains, CNI-FORWARD and CNI-ADMIN with their jumps, the
// nftables tables and their base chains): it is left where it is, as the
// reference's own DEL leaves it, and never deleted here.
//
// # How they are found
//
// By name where the reference names them: chains by their hashed names,
// the rules jumping to them by their jump target, nftables rules by their
// comments. The firewall's accepts carry no name at all: they are the
// rules of CNI-FORWARD that match exactly the attachment's address and
// accept, read from the rule's expressions (view.go), as the reference's
// own `iptables -D` finds them. Nothing is identified by a comment alone
// where a wrong guess would delete someone else's rule.
//
// A DEL of an attachment the reference never saw must not get slower: a
// lookup starts with one dump of the table list (Tables) and reads no
// chain of a table that is not there; Delete commits nothing, and opens no
// transaction, when nothing was found.
//
// # API
//
// Find and Check read; PlanDelete puts the deletion into the caller's
// transaction (nft.Conn.Update), where the caller may put its own
// creations too — taking an attachment over is one transaction; Delete is
// PlanDelete in a transaction of its own. Objects lists a network's
// objects by container for GC (PlanGC, GC). The generation guard of every
// nft.Conn.Update makes "read, then delete what was read" atomic.
package reference

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
)

// Part is one plugin's share of an attachment.
type Part uint

const (
	// Masq is bridge's and ptp's ipMasq, both backends.
	Masq Part = 1 << iota
	// Portmap is portmap's DNAT and masquerade, both backends.
	Portmap
	// Firewall is the firewall plugin's per-address accepts (its iptables
	// backend).
	Firewall
	// SpoofCheck is bridge's macspoofchk.
	SpoofCheck
)

func (p Part) String() string {
	var s []string
	for _, x := range []struct {
		p    Part
		name string
	}{{Masq, "masquerade"}, {Portmap, "portmap"}, {Firewall, "firewall"}, {SpoofCheck, "spoof check"}} {
		if p&x.p != 0 {
			s = append(s, x.name)
		}
	}
	return strings.Join(s, "+")
}

// Attachment is one attachment, as the reference named its objects, and
// what its CHECK needs to know.
type Attachment struct {
	Network, ContainerID, IfName string
	// Parts are the plugins whose objects are meant.
	Parts Part
	// Addrs are the attachment's addresses with their prefix lengths
	// (prevResult's). The firewall's accepts are found by them only (no
	// address, no firewall rule found); they narrow the portmap rules of
	// the nftables backend, which carry only the container ID, to those
	// for these addresses. CHECK needs them.
	Addrs []netip.Prefix

	// For CHECK of Portmap.
	//
	// Mappings are the port mappings the runtime sent; MappingsSent says
	// whether it sent any (without, CHECK looks at the structure only).
	Mappings     []Mapping
	MappingsSent bool
	// SNAT, MasqAll: portmap's snat and masqAll.
	SNAT, MasqAll bool
	// SetMarkChain is portmap's externalSetMarkChain; "" is
	// CNI-HOSTPORT-SETMARK.
	SetMarkChain string

	// AdminChain is the firewall's iptablesAdminChainName; "" is
	// CNI-ADMIN.
	AdminChain string

	// For PlanCreate (handing the attachment back): what the reference's
	// ADD would have made besides.
	//
	// MasqNFT and PortmapNFT choose the nftables backends of the
	// masquerade (ipMasqBackend) and of portmap (backend), as the
	// reference would have chosen them for this configuration.
	MasqNFT, PortmapNFT bool
	// MarkBit is portmap's markMasqBit (DefaultMarkBit unless
	// configured): the bit its shared SETMARK and MASQ chains set and
	// test.
	MarkBit int
	// IngressPolicy is the firewall's ingressPolicy ("same-bridge",
	// "isolated"; "" or "open": none), for the bridge named Bridge: its
	// isolation chains, which the reference shares between the
	// attachments of every bridge and never deletes.
	IngressPolicy, Bridge string
	// HostIf and MAC are the spoof check's host interface (the bridge
	// port) and the container interface's MAC address.
	HostIf string
	MAC    net.HardwareAddr
}

// DefaultMarkBit is portmap's markMasqBit unless configured.
const DefaultMarkBit = 13

// Mapping is one port mapping (runtimeConfig.portMappings).
type Mapping struct {
	HostIP        netip.Addr // the zero Addr: any
	HostPort      uint16
	ContainerPort uint16
	Proto         uint8
}

func (m Mapping) String() string {
	s := fmt.Sprintf("%s %d → %d", nft.ProtoName(m.Proto), m.HostPort, m.ContainerPort)
	if m.HostIP.IsValid() {
		s = fmt.Sprintf("%s %s:%d → %d", nft.ProtoName(m.Proto), m.HostIP, m.HostPort, m.ContainerPort)
	}
	return s
}

// Object is one object of the reference's: a chain (Handle 0) or a rule.
type Object struct {
	Part  Part
	Chain *nftables.Chain
	// Handle is a rule's handle; 0 for the chain itself.
	Handle uint64
	// Text says what a rule does, roughly as iptables lists it.
	Text string
	// ContainerID and IfName are whose it is, as far as the object says
	// (GC): the iptables objects name no interface, a comment cut short
	// may lose the container ID.
	ContainerID, IfName string
	// instance is the nftables masquerade's instance hash (its rules are
	// matched by it, interface included).
	instance string
}

// IsChain reports whether o is a chain rather than a rule.
func (o Object) IsChain() bool { return o.Handle == 0 }

func (o Object) String() string {
	where := nft.FamilyName(o.Chain.Table.Family) + " " + o.Chain.Table.Name + " " + o.Chain.Name
	if o.IsChain() {
		return "chain " + where
	}
	if o.Text == "" {
		return fmt.Sprintf("rule %s (handle %d)", where, o.Handle)
	}
	return fmt.Sprintf("rule %s %s (handle %d)", where, o.Text, o.Handle)
}

// Reader reads a ruleset: *nft.Tx inside an Update, *nft.Conn otherwise.
type Reader interface {
	Tables() ([]*nftables.Table, error)
	ChainExists(ch *nftables.Chain) (bool, error)
	RulesWithExprs(ch *nftables.Chain) ([]nft.RuleExprs, error)
}

// host reads the ruleset for one operation: the table list once, each
// chain at most once.
type host struct {
	r      Reader
	tables map[tableKey]bool
	rules  map[chainKey][]view
	exists map[chainKey]bool
}

type tableKey struct {
	fam  nftables.TableFamily
	name string
}

type chainKey struct {
	tableKey
	chain string
}

func newHost(r Reader) (*host, error) {
	ts, err := r.Tables()
	if err != nil {
		return nil, err
	}
	h := &host{r: r, tables: map[tableKey]bool{}, rules: map[chainKey][]view{}, exists: map[chainKey]bool{}}
	for _, t := range ts {
		h.tables[tableKey{t.Family, t.Name}] = true
	}
	return h, nil
}

func (h *host) has(fam nftables.TableFamily, table string) bool {
	return h.tables[tableKey{fam, table}]
}

func chain(fam nftables.TableFamily, table, name string) *nftables.Chain {
	return &nftables.Chain{Table: &nftables.Table{Family: fam, Name: table}, Name: name}
}

func keyOf(ch *nftables.Chain) chainKey {
	return chainKey{tableKey{ch.Table.Family, ch.Table.Name}, ch.Name}
}

// chainExists asks for ch, without a request when its table is missing.
func (h *host) chainExists(ch *nftables.Chain) (bool, error) {
	if !h.has(ch.Table.Family, ch.Table.Name) {
		return false, nil
	}
	k := keyOf(ch)
	if ok, seen := h.exists[k]; seen {
		return ok, nil
	}
	ok, err := h.r.ChainExists(ch)
	if err != nil {
		return false, err
	}
	h.exists[k] = ok
	return ok, nil
}

// read reads ch's rules (none when its table is missing).
func (h *host) read(ch *nftables.Chain) ([]view, error) {
	if !h.has(ch.Table.Family, ch.Table.Name) {
		return nil, nil
	}
	k := keyOf(ch)
	if vs, ok := h.rules[k]; ok {
		return vs, nil
	}
	rs, err := h.r.RulesWithExprs(ch)
	if err != nil {
		return nil, err
	}
	vs := make([]view, len(rs))
	for i, r := range rs {
		vs[i] = readView(ch.Table.Family, r)
	}
	h.rules[k] = vs
	return vs, nil
}

// ipFamilies are the families of iptables-nft's tables (iptables and
// ip6tables).
var ipFamilies = []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6}

func famOf(a netip.Addr) nftables.TableFamily {
	if a.Unmap().Is4() {
		return nftables.TableFamilyIPv4
	}
	return nftables.TableFamilyIPv6
}

// tablesOf are the tables p's objects can be in.
func tablesOf(p Part) []tableKey {
	var out []tableKey
	if p&(Masq|Portmap) != 0 {
		out = append(out, tableKey{nftables.TableFamilyIPv4, "nat"}, tableKey{nftables.TableFamilyIPv6, "nat"})
	}
	if p&Masq != 0 {
		out = append(out, tableKey{nftables.TableFamilyINet, nftMasqTable})
	}
	if p&Portmap != 0 {
		out = append(out, tableKey{nftables.TableFamilyIPv4, nftPortmapTable}, tableKey{nftables.TableFamilyIPv6, nftPortmapTable})
	}
	if p&Firewall != 0 {
		out = append(out, tableKey{nftables.TableFamilyIPv4, "filter"}, tableKey{nftables.TableFamilyIPv6, "filter"})
	}
	if p&SpoofCheck != 0 {
		out = append(out, tableKey{nftables.TableFamilyBridge, spoofTable})
	}
	return out
}

// any reports whether one of p's tables exists.
func (h *host) any(p Part) bool {
	for _, t := range tablesOf(p) {
		if h.tables[t] {
			return true
		}
	}
	return false
}

func ruleObject(p Part, ch *nftables.Chain, v view) Object {
	return Object{Part: p, Chain: ch, Handle: v.Handle, Text: v.String()}
}

func chainObject(p Part, ch *nftables.Chain) Object { return Object{Part: p, Chain: ch} }

// Find lists a's objects, in the order they can be deleted in: rules
// first (the jumps to a chain before the chain), then chains.
func Find(r Reader, a Attachment) ([]Object, error) {
	h, err := newHost(r)
	if err != nil {
		return nil, err
	}
	return h.find(a)
}

func (h *host) find(a Attachment) ([]Object, error) {
	if !h.any(a.Parts) {
		return nil, nil
	}
	var out []Object
	for _, f := range []struct {
		p    Part
		find func(Attachment) ([]Object, error)
	}{{Masq, h.masqFind}, {Portmap, h.portmapFind}, {Firewall, h.firewallFind}, {SpoofCheck, h.spoofFind}} {
		if a.Parts&f.p == 0 {
			continue
		}
		objs, err := f.find(a)
		if err != nil {
			return nil, fmt.Errorf("reading the reference plugins' %s of container %s: %w", f.p, a.ContainerID, err)
		}
		out = append(out, objs...)
	}
	return deletionOrder(out), nil
}

// deletionOrder puts rules before chains and drops repeats.
func deletionOrder(objs []Object) []Object {
	type key struct {
		chainKey
		h uint64
	}
	seen := map[key]bool{}
	var rules, chains []Object
	for _, o := range objs {
		k := key{keyOf(o.Chain), o.Handle}
		if seen[k] {
			continue
		}
		seen[k] = true
		if o.IsChain() {
			chains = append(chains, o)
		} else {
			rules = append(rules, o)
		}
	}
	return append(rules, chains...)
}

// plan adds the deletion of objs, in deletionOrder, to tx's batch. Rules
// in a chain that is deleted too go with it.
func plan(tx *nft.Tx, objs []Object) {
	gone := map[chainKey]bool{}
	for _, o := range objs {
		if o.IsChain() {
			gone[keyOf(o.Chain)] = true
		}
	}
	b := tx.Batch()
	for _, o := range objs {
		switch {
		case o.IsChain():
			b.DeleteReferenceChain(o.Chain)
		case !gone[keyOf(o.Chain)]:
			b.DeleteForeignRule(o.Chain, o.Handle)
		}
	}
}

// PlanDelete adds to tx's batch the deletion of a's objects (Find), and
// returns them. The caller commits it (nft.Conn.Update) with whatever
// else it put in the batch: its own creations, when it takes a over.
func PlanDelete(tx *nft.Tx, a Attachment) ([]Object, error) {
	objs, err := Find(tx, a)
	if err != nil {
		return nil, err
	}
	plan(tx, objs)
	return objs, nil
}

// Delete removes a's objects in one batch and returns them. It first
// looks without a transaction: when there is nothing, which is every DEL
// of an attachment the reference never made, it writes nothing.
func Delete(ns *netns.NS, a Attachment) ([]Object, error) {
	c, err := nft.Open(ns)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	objs, err := Find(c, a)
	if err != nil || len(objs) == 0 {
		return nil, err
	}
	err = c.Update(func(tx *nft.Tx) error {
		objs, err = PlanDelete(tx, a)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("removing the reference plugins' %s of container %s: %w", a.Parts, a.ContainerID, explainBusy(err))
	}
	return objs, nil
}

// explainBusy words EBUSY, the kernel's answer to deleting a chain that a
// rule we did not read still jumps to.
func explainBusy(err error) error {
	if errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("%w (a chain of the attachment is still jumped to from a chain the reference does not jump from)", err)
	}
	return err
}

// Report is what CHECK found of an attachment's objects.
type Report struct {
	// Present are the objects of the attachment that exist.
	Present []Object
	// Missing says what a healthy attachment has and this one lacks.
	Missing []string
}

// Found reports whether anything of the attachment is there: whether it
// is the reference's at all.
func (r Report) Found() bool { return len(r.Present) > 0 }

// Err is nil for a healthy attachment, and names what is missing
// otherwise.
func (r Report) Err(p Part) error {
	if len(r.Missing) == 0 {
		return nil
	}
	return fmt.Errorf("the reference plugins' %s of this attachment is incomplete: missing %s", p, strings.Join(r.Missing, "; "))
}

// Check reports which of a's objects exist and what a healthy attachment
// of the reference's would have besides (for each part that has anything
// at all: a part with nothing is not the reference's, and reports nothing
// missing). It reads outside a transaction, as CHECK does.
func Check(ns *netns.NS, a Attachment) (Report, error) {
	c, err := nft.Open(ns)
	if err != nil {
		return Report{}, err
	}
	defer c.Close()
	return CheckWith(c, a)
}

// CheckWith is Check through r.
func CheckWith(r Reader, a Attachment) (Report, error) {
	h, err := newHost(r)
	if err != nil {
		return Report{}, err
	}
	var rep Report
	if !h.any(a.Parts) {
		return rep, nil
	}
	for _, f := range []struct {
		p     Part
		check func(Attachment, *Report) error
	}{{Masq, h.masqCheck}, {Portmap, h.portmapCheck}, {Firewall, h.firewallCheck}, {SpoofCheck, h.spoofCheck}} {
		if a.Parts&f.p == 0 {
			continue
		}
		if err := f.check(a, &rep); err != nil {
			return Report{}, fmt.Errorf("checking the reference plugins' %s of container %s: %w", f.p, a.ContainerID, err)
		}
	}
	return rep, nil
}

// expect is one part's CHECK in progress: it notes what is there and what
// is missing, and adds it to the report only when the part has anything.
type expect struct {
	present []Object
	missing []string
}

func (e *expect) have(o Object) { e.present = append(e.present, o) }
func (e *expect) lack(format string, args ...any) {
	e.missing = append(e.missing, fmt.Sprintf(format, args...))
}

func (e *expect) into(r *Report) {
	if len(e.present) == 0 {
		return
	}
	r.Present = append(r.Present, e.present...)
	r.Missing = append(r.Missing, e.missing...)
}

// find returns the first rule of vs satisfying ok.
func first(vs []view, ok func(view) bool) (view, bool) {
	i := slices.IndexFunc(vs, ok)
	if i < 0 {
		return view{}, false
	}
	return vs[i], true
}

// Key is an attachment as GC knows it (cni.dev/valid-attachments).
type Key struct{ ContainerID, IfName string }

// Objects lists the objects of network's attachments that say which
// network they belong to, each with its container (and interface where
// the object names it): the masquerade chains and rules of both backends
// and portmap's iptables chains. Portmap's nftables rules (commented with
// the container ID only), the firewall's accepts (no name at all) and the
// spoof-check chains (container and interface, no network) do not say it,
// and are not listed: GC cannot tell whose they are.
func Objects(r Reader, network string, parts Part) ([]Object, error) {
	h, err := newHost(r)
	if err != nil {
		return nil, err
	}
	return h.objects(network, parts)
}

func (h *host) objects(network string, parts Part) ([]Object, error) {
	if !h.any(parts & (Masq | Portmap)) {
		return nil, nil
	}
	var out []Object
	if parts&Masq != 0 {
		objs, err := h.masqObjects(network)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	if parts&Portmap != 0 {
		objs, err := h.portmapObjects(network)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// stale are the objects of objs that belong to no attachment of valid.
func stale(network string, objs []Object, valid []Key) []Object {
	ids, instances := map[string]bool{}, map[string]bool{}
	for _, k := range valid {
		ids[k.ContainerID] = true
		instances[nftMasqInstance(network, k.IfName, k.ContainerID)] = true
	}
	var out []Object
	for _, o := range objs {
		if o.instance != "" && !instances[o.instance] || o.instance == "" && !ids[o.ContainerID] {
			out = append(out, o)
		}
	}
	return deletionOrder(out)
}

// PlanGC adds to tx's batch the deletion of network's objects (Objects)
// that belong to none of valid, and returns them.
func PlanGC(tx *nft.Tx, network string, parts Part, valid []Key) ([]Object, error) {
	objs, err := Objects(tx, network, parts)
	if err != nil {
		return nil, err
	}
	objs = stale(network, objs, valid)
	plan(tx, objs)
	return objs, nil
}

// GC removes network's objects that belong to none of valid, in one
// batch, and returns them; like Delete, it writes nothing when there are
// none.
func GC(ns *netns.NS, network string, parts Part, valid []Key) ([]Object, error) {
	c, err := nft.Open(ns)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	objs, err := Objects(c, network, parts)
	if err != nil || len(stale(network, objs, valid)) == 0 {
		return nil, err
	}
	err = c.Update(func(tx *nft.Tx) error {
		objs, err = PlanGC(tx, network, parts, valid)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("collecting the reference plugins' stale %s of network %s: %w", parts, network, explainBusy(err))
	}
	return objs, nil
}
