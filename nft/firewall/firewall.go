// Package firewall is the nftables state of the firewall plugin:
// forwarded traffic of container
// addresses is accepted, an administrator's chain is consulted first, and
// bridges with an ingress policy are isolated from each other. The
// reference writes iptables chains (CNI-FORWARD, CNI-ADMIN,
// CNI-ISOLATION-STAGE-1/2); this is the same policy in a table of ours.
//
// # Data model
//
//	table inet nftcni_firewall {
//		set allow4 { type ipv4_addr; elements = { 10.1.0.5 comment "<owner tag>" } }
//		set allow6 { type ipv6_addr; … }
//		set owners4 { type ipv4_addr . ifname; elements = { 10.1.0.5 . "<attachment id>" comment "<owner tag>" } }
//		set owners6 { type ipv6_addr . ifname; … }
//		set bridges { type ifname; elements = { "br0" comment "<owner tag>" } }
//		set bridge_self { type ifname . ifname; elements = { "br0" . "br0" comment "<owner tag>" } }
//		set isolated_self { type ifname . ifname; … }
//		set bridge_owners { type ifname . ifname; elements = { "br0" . "<attachment id>" comment "<owner tag>" } }
//		set isolated_owners { type ifname . ifname; … }
//		set owners { type ifname; elements = { "<attachment hash>" comment "<owner tag> =10.1.0.5 s=br0" } }
//		map counts4 { type ipv4_addr : integer; elements = { 10.1.0.5 : 1 } }
//		map counts6 { type ipv6_addr : integer; … }
//		map bridge_counts { type ifname : integer; elements = { "br0" : 1 } }
//		map isolated_counts { type ifname : integer; … }
//		chain forward {
//			type filter hook forward priority filter; policy accept;
//			iifname @bridges oifname @bridges iifname . oifname != @bridge_self drop comment "nftcni firewall v1: same-bridge"
//			iifname . oifname @isolated_self drop comment "nftcni firewall v1: isolated"
//			jump admin-jumps comment "nftcni firewall v1: admin"
//			ip daddr @allow4 ct state established,related accept comment "nftcni firewall v1: return traffic"
//			ip saddr @allow4 accept comment "nftcni firewall v1: from container"
//			ip6 daddr @allow6 ct state established,related accept comment "nftcni firewall v1: return traffic6"
//			ip6 saddr @allow6 accept comment "nftcni firewall v1: from container6"
//		}
//		chain admin-jumps {
//			jump CNI-ADMIN comment "nftcni firewall v1: admin chain CNI-ADMIN"
//		}
//		chain CNI-ADMIN {
//			(the administrator's rules: created empty if missing, never written, flushed or deleted)
//		}
//	}
//
// The per-packet work is a fixed number of set lookups however many
// containers there are; the reference appends two rules per container
// address to CNI-FORWARD.
//
// Order is the reference's: isolation first (its jump sits at the top of
// FORWARD), then the admin chains (first in CNI-FORWARD), then the accepts.
// An admin `drop` is final. An admin `accept` ends this table's evaluation
// only: in nftables every base chain on the hook runs, and a drop in any
// of them wins, which is also why the accepts alone cannot rescue traffic
// from another table's DROP policy (see Foreign chains below). Each
// network's iptablesAdminChainName gets its own jump in admin-jumps; jumps
// and admin chains are shared, and never removed.
//
// # Ingress policy
//
// `same-bridge` drops what enters from one policed bridge and leaves
// through another: `iifname` and `oifname` both in @bridges but not the
// same one. nft cannot compare two packet fields with each other, so "not
// the same bridge" is a lookup of the pair in @bridge_self, which holds
// (b . b) for each policed bridge. `isolated` also drops what stays on the
// bridge (seen here only with bridge netfilter), through @isolated_self.
// Unlike the reference the isolation covers both address families at once.
//
// # Ownership: claims
//
// A lookup set can hold an address (or bridge) only once, but several
// attachments may need the same one: every container on a bridge polices
// that bridge, and two networks with overlapping ranges can hand out the
// same address. So the lookup sets (allow4/6, bridges, bridge_self,
// isolated_self) are derived from claim sets (owners4/6, bridge_owners,
// isolated_owners) whose keys add the attachment's id and so never clash.
// A lookup element exists while at least one claim for its key does; its
// comment names one of the claimants. DEL removes the owner's claims and
// then exactly the lookup elements no claim is left for (re-tagging those
// still claimed by others), so a shared address stays allowed until its
// last owner goes — where the reference, deduplicating identical rules,
// lets the first DEL remove it for both. Owner markers and per-key claim
// counts (bookkeeping.go) let a first Setup and a Teardown do that by
// lookups, without reading the claim sets.
//
// # Foreign chains
//
// An accept in this table does not override another table's DROP policy,
// so the attachment's addresses also get the reference's two accepts —
// its packets, and replies to it — in the chains of others that filter
// forwarded traffic (package nft/foreign): always iptables-nft's FORWARD
// chains (`ip filter FORWARD`, `ip6 filter FORWARD`), created as
// iptables-nft would create them when missing, so that a DROP policy
// Docker or kube-proxy set later keeps our accepts; and the chains the
// configuration names (Attachment.AcceptChains). In iptables-nft's
// chains they are marked: one rule there for everyone,
//
//	-A FORWARD -m mark --mark 0x1000/0x1000 -m comment --comment "<shared tag>" -j ACCEPT
//
// and the address in sets from4 and replies4 (from6, replies6) of table
// inet nftcni_accept, whose chain marks what the reference's per-address
// rules (`-s 10.1.0.5/32 -j ACCEPT`, `-d 10.1.0.5/32 -m conntrack
// --ctstate RELATED,ESTABLISHED -j ACCEPT`) would accept. In named chains
// they are native nft rules (`ip saddr 10.1.0.5 accept`, `ip daddr
// 10.1.0.5 ct state established,related accept`). Claims and rules carry
// the plain owner tag and are removed by it on DEL and GC.
//
// Every Setup, Teardown and GC is one batch guarded by the ruleset
// generation (nft.Conn.Update).
package firewall

import (
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/foreign"
	"github.com/nftcni/nftcni/ownerid"
)

// Names of our objects; the table name must keep the nft.TablePrefix.
const (
	TableName       = "nftcni_firewall"
	ForwardChain    = "forward"
	AdminJumpsChain = "admin-jumps"
	// DefaultAdminChain is the reference's default iptablesAdminChainName.
	DefaultAdminChain = "CNI-ADMIN"
)

// Policy is an ingressPolicy.
type Policy int

// The ingressPolicy values: "open" (or empty) adds no isolation,
// "same-bridge" drops forwarding between two policed bridges, "isolated"
// also drops what stays on the bridge (see "Ingress policy" above).
const (
	PolicyOpen Policy = iota
	PolicySameBridge
	PolicyIsolated
)

// Attachment is what one attachment needs.
type Attachment struct {
	Owner ownerid.Owner
	// Addrs are the container's addresses: forwarded traffic from them,
	// and replies to them, is accepted.
	Addrs []netip.Addr
	// Bridge is the bridge Policy applies to; ignored for PolicyOpen.
	Bridge string
	Policy Policy
	// AdminChain is the administrator's chain consulted before the
	// accepts; "" means DefaultAdminChain.
	AdminChain string
	// AcceptChains are chains of others (an administrator's forward chain
	// with policy drop) that get the addresses' accepts too, besides
	// iptables-nft's FORWARD chains.
	AcceptChains []foreign.Chain
	// Iptables says when iptables-nft's FORWARD chains get the accepts
	// (the zero value: where iptables can be used, see foreign.Use).
	Iptables foreign.Use
	// iptablesReachable pins, for a test, whether an iptables program is
	// reachable (foreign.Use.Protects); nil, as every caller outside the
	// package's tests leaves it, is the machine's answer.
	iptablesReachable func() bool
}

// chains are the foreign chains a's accepts go to.
func (a Attachment) chains() []foreign.Chain {
	return append(slices.Clip(foreign.Iptables), a.AcceptChains...)
}

// accepts are the accepts of a's addresses: the reference's two rules
// each, its own packets and the replies to it.
func (a Attachment) accepts() []foreign.Accept {
	var out []foreign.Accept
	for _, ad := range a.Addrs {
		out = append(out, foreign.From(ad), foreign.RepliesTo(ad))
	}
	return out
}

// mine selects the firewall's rules among owner-tagged foreign rules
// (portmap keeps rules of the same attachments in the same chains).
func mine(match func(comment string) bool) func(comment string) bool { return foreign.Of("", match) }

var (
	table = &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}

	forward    = nft.BaseChain(table, ForwardChain, nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter)
	adminJumps = &nftables.Chain{Table: table, Name: AdminJumpsChain}

	// Addresses are big endian, interface names host-endian strings; nft
	// records that in the set's userdata, and so do we. Concatenations
	// are plain hash sets (NFT_SET_CONCAT is for interval sets).
	allow4  = &nftables.Set{Table: table, Name: "allow4", KeyType: nftables.TypeIPAddr, KeyByteOrder: binaryutil.BigEndian}
	allow6  = &nftables.Set{Table: table, Name: "allow6", KeyType: nftables.TypeIP6Addr, KeyByteOrder: binaryutil.BigEndian}
	owners4 = &nftables.Set{Table: table, Name: "owners4", KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIFName)}
	owners6 = &nftables.Set{Table: table, Name: "owners6", KeyType: nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeIFName)}

	bridges        = &nftables.Set{Table: table, Name: "bridges", KeyType: nftables.TypeIFName, KeyByteOrder: binaryutil.NativeEndian}
	bridgeSelf     = &nftables.Set{Table: table, Name: "bridge_self", KeyType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIFName)}
	isolatedSelf   = &nftables.Set{Table: table, Name: "isolated_self", KeyType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIFName)}
	bridgeOwners   = &nftables.Set{Table: table, Name: "bridge_owners", KeyType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIFName)}
	isolatedOwners = &nftables.Set{Table: table, Name: "isolated_owners", KeyType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIFName)}

	sets = []*nftables.Set{allow4, allow6, owners4, owners6, bridges, bridgeSelf, isolatedSelf, bridgeOwners, isolatedOwners}

	// claimSets: each claim set and the lookup sets derived from it.
	claimSets = []claims{
		{set: owners4, keyLen: 4, count: counts4, derived: []derived{{allow4, same}}},
		{set: owners6, keyLen: 16, count: counts6, derived: []derived{{allow6, same}}},
		{set: bridgeOwners, keyLen: nft.IfnameLen, count: bridgeCounts, derived: []derived{{bridges, same}, {bridgeSelf, double}}},
		{set: isolatedOwners, keyLen: nft.IfnameLen, count: isolatedCounts, derived: []derived{{isolatedSelf, double}}},
	}
)

// ReservedChain reports whether name is one of our own chains, which an
// admin chain must not be (a jump to itself would be a loop).
func ReservedChain(name string) bool { return name == ForwardChain || name == AdminJumpsChain }

func adminChain(name string) *nftables.Chain {
	if name == "" {
		name = DefaultAdminChain
	}
	return &nftables.Chain{Table: table, Name: name}
}

// attachmentID is the second half of a claim's key: 16 characters derived
// from the owner tag's hashes, so two attachments never claim with the
// same key. Owner identity is still the comment; the id only keeps keys
// apart.
func attachmentID(o ownerid.Owner) []byte {
	sum := sha512.Sum512([]byte(ownerid.NetworkHash(o.Network) + ":" + o.AttachmentHash()))
	return []byte(hex.EncodeToString(sum[:nft.IfnameLen/2]))
}

// addrKey is a's key in allow4/allow6 and the set it belongs to.
func addrKey(a netip.Addr) ([]byte, bool) {
	a = a.Unmap().WithZone("")
	return a.AsSlice(), a.Is4()
}

// wanted computes a's claims per claim set.
func wanted(a Attachment) (map[*nftables.Set][]nft.Element, error) {
	tag, id := a.Owner.Tag(), attachmentID(a.Owner)
	want := map[*nftables.Set][]nft.Element{}
	for _, ad := range a.Addrs {
		if !ad.IsValid() {
			return nil, fmt.Errorf("invalid address %s", ad)
		}
		k, v4 := addrKey(ad)
		s := owners6
		if v4 {
			s = owners4
		}
		want[s] = append(want[s], nft.Element{Key: nft.Concat(k, id), Comment: tag})
	}
	if a.Policy != PolicyOpen {
		if a.Bridge == "" || len(a.Bridge) >= nft.IfnameLen {
			return nil, fmt.Errorf("invalid bridge name %q", a.Bridge)
		}
		k := nft.Concat(nft.IfnameKey(a.Bridge), id)
		want[bridgeOwners] = []nft.Element{{Key: k, Comment: tag}}
		if a.Policy == PolicyIsolated {
			want[isolatedOwners] = []nft.Element{{Key: k, Comment: tag}}
		}
	}
	return want, nil
}

func describe(a Attachment) string {
	var s []string
	for _, ad := range a.Addrs {
		s = append(s, ad.String())
	}
	if len(s) == 0 {
		s = append(s, "no address")
	}
	out := strings.Join(s, ", ")
	switch a.Policy {
	case PolicySameBridge:
		out += ", bridge " + a.Bridge + " same-bridge"
	case PolicyIsolated:
		out += ", bridge " + a.Bridge + " isolated"
	}
	return out
}

// Setup makes sure, in ns (nil: the process's own namespace), that
// forwarded traffic of a's addresses is accepted (also through
// iptables-nft's FORWARD chains and a's AcceptChains), that a's admin chain is
// consulted first, and that a's bridge is policed as asked. A Setup of the
// same owner replaces what it set up before; repeating it writes nothing.
func Setup(ns *netns.NS, a Attachment) error {
	p, err := Plan(a)
	if err != nil {
		return err
	}
	c, err := nft.Open(ns)
	if err != nil {
		return fmt.Errorf("%s: %w", p.What, err)
	}
	defer c.Close()
	if err := c.Apply(p); err != nil {
		return fmt.Errorf("%s: %w", p.What, err)
	}
	return nil
}

// Plan is Setup's plan, for a transaction the caller owns (nft.Plan).
func Plan(a Attachment) (nft.Plan, error) {
	what := "adding firewall rules for " + describe(a)
	want, err := wanted(a)
	if err != nil {
		return nft.Plan{}, fmt.Errorf("%s: %w", what, err)
	}
	admin := adminChain(a.AdminChain)
	if ReservedChain(admin.Name) {
		return nft.Plan{}, fmt.Errorf("%s: admin chain name %q is one of the firewall's own chains", what, admin.Name)
	}
	tag := a.Owner.Tag()
	run := func(tx *nft.Tx, slowOnly bool, lookups *bool) error {
		// fast: the owner has no marker, so no claims; same: its marker
		// records exactly this Setup, so its claims are these
		// (bookkeeping.go).
		fast, same := false, false
		if !slowOnly {
			ok, marks, err := counted(tx, a.Owner)
			if err != nil {
				return err
			}
			fast = ok && len(marks) == 0
			if rec, has := nft.MarkerRecord(a.Owner, marks); ok && has && len(marks) == 1 && rec == record(a) {
				same = true
			}
			*lookups = *lookups || fast || same
		}
		b := tx.Batch()
		b.AddTable(table)
		// The admin chain is never flushed: an existing one keeps its rules.
		for _, ch := range []*nftables.Chain{forward, adminJumps, admin} {
			if err := tx.EnsureChain(ch); err != nil {
				return err
			}
		}
		for _, s := range slices.Concat(sets, bookkeeping) {
			b.AddSet(s)
		}
		if err := tx.EnsureRules(forward, rules()); err != nil {
			return err
		}
		if err := ensureAdminJump(tx, admin.Name); err != nil {
			return err
		}
		changed := map[*nftables.Set]bool{owners4: true, owners6: true}
		// owned: the owner has claims. Without any it has no rules in
		// other owners' chains either: they are written and removed in
		// the same batches as its claims.
		owned := false
		switch {
		case fast:
			if err := setupFast(tx, a, want); err != nil {
				return err
			}
		case same:
			if err := setupSame(tx, want); err != nil {
				return err
			}
			owned, changed[owners4], changed[owners6] = true, false, false
		default:
			left := map[*nftables.Set][]nft.Element{}
			for _, cs := range claimSets {
				ch, had, l, err := cs.plan(tx, want[cs.set], a.Owner.OwnedBy, tag)
				if err != nil {
					return err
				}
				changed[cs.set], left[cs.set] = ch, l
				owned = owned || had
			}
			if err := syncBookkeeping(tx, left); err != nil {
				return err
			}
		}
		accepts := a.accepts()
		mark := foreign.Mark{Owner: a.Owner}
		protect, err := protects(tx, a)
		if err != nil {
			return err
		}
		for _, ch := range a.chains() {
			if ch.Iptables && !protect {
				// None wanted there. An owner with claims may have
				// rules there from an ADD with another rule or
				// config: removed.
				if owned {
					if _, err := foreign.Remove(tx, ch, mark); err != nil {
						return err
					}
				}
				continue
			}
			// iptables-nft's chains, which every Teardown cleans, are
			// not read for an owner without claims (every first ADD).
			// A named chain may hold rules a Teardown with another
			// configuration left there, and is read.
			if !owned && ch.Iptables {
				if err := foreign.Insert(tx, ch, mark, accepts); err != nil {
					return err
				}
				continue
			}
			// A chain's rules are replaced when the claims of its
			// families changed.
			ch4 := ch.Table.Family != nftables.TableFamilyIPv6 && changed[owners4]
			ch6 := ch.Table.Family != nftables.TableFamilyIPv4 && changed[owners6]
			if err := foreign.Sync(tx, ch, mark, accepts, ch4 || ch6); err != nil {
				return err
			}
		}
		return nil
	}
	return nft.Plan{What: what, Run: run, Retry: fellBack}, nil
}

// protects reports whether a's accepts go into iptables-nft's FORWARD
// chains (foreign.Use); asked only when a has accepts.
func protects(r foreign.Reader, a Attachment) (bool, error) {
	if len(a.Addrs) == 0 {
		return false, nil
	}
	return a.Iptables.Protects(r, a.iptablesReachable)
}

// fellBack counts a lookup path's failure (lookupRuns); the Update then
// runs again the old way.
func fellBack(error) bool {
	lookupRuns.fellBack.Add(1)
	return true
}

// ensureAdminJump adds the jump to admin chain name to admin-jumps unless
// it is there (recognised by its comment). Jumps are never removed: admin
// chains are shared by every network naming them.
func ensureAdminJump(tx *nft.Tx, name string) error {
	cur, err := tx.Rules(adminJumps)
	if err != nil {
		return err
	}
	r := adminJumpRule(name)
	if slices.ContainsFunc(cur, func(x nft.Rule) bool { return x.Comment == r.Comment }) {
		return nil
	}
	tx.Batch().AddRule(&nftables.Rule{Table: table, Chain: adminJumps, Exprs: r.Exprs}, r.Comment)
	return nil
}

// Teardown removes everything owner added: its claims, the lookup
// elements no one else claims, its rules in iptables-nft's FORWARD chains
// and in acceptChains. Nothing to remove is success, and then nothing is
// written (no table is created). Admin chains, jumps and static rules
// stay; an iptables-nft table Setup created goes when nothing but its
// empty FORWARD chain is left in it (foreign.Remove). With its marker's
// record, the owner's claims are found by lookups (bookkeeping.go); an
// owner without a marker has no claims, and no rules in iptables-nft's
// chains.
func Teardown(ns *netns.NS, owner ownerid.Owner, acceptChains []foreign.Chain) error {
	what := fmt.Sprintf("removing firewall rules of container %s (%s, network %s)", owner.ContainerID, owner.IfName, owner.Network)
	chains := Attachment{AcceptChains: acceptChains}.chains()
	c, err := nft.Open(ns)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer c.Close()
	err = c.UpdateLookupsFirst(func(tx *nft.Tx, slowOnly bool, lookups *bool) error {
		owned := true
		done := false
		if !slowOnly {
			ok, marks, err := counted(tx, owner)
			if err != nil {
				return err
			}
			switch {
			case !ok:
			case len(marks) == 0:
				owned, done = false, true
			default:
				*lookups = true
				if err := teardownFast(tx, owner, marks); err != nil {
					return err
				}
				done = true
			}
		}
		if !done {
			if err := removeClaims(tx, owner.OwnedBy); err != nil {
				return err
			}
		}
		for _, ch := range chains {
			if !owned && ch.Iptables {
				continue
			}
			if _, err := foreign.Remove(tx, ch, foreign.Mark{Owner: owner}); err != nil {
				return err
			}
		}
		return nil
	}, fellBack)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// GC removes everything of network not owned by one of valid, its rules
// in chains of others included, wherever they are (a chain the
// configuration no longer names, say).
func GC(ns *netns.NS, network string, valid []ownerid.Owner) error {
	what := fmt.Sprintf("collecting stale firewall rules of network %s", network)
	stale := ownerid.StaleFunc(network, valid)
	c, err := nft.Open(ns)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer c.Close()
	err = c.Update(func(tx *nft.Tx) error {
		if err := removeClaims(tx, stale); err != nil {
			return err
		}
		_, err := foreign.RemoveEverywhere(tx, mine(stale))
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// removeClaims drops the claims match selects, reading the claim sets
// whole, and brings markers and counts in line (the old way).
func removeClaims(tx *nft.Tx, match func(comment string) bool) error {
	ok, err := tx.TableExists(table)
	if err != nil || !ok {
		return err
	}
	left := map[*nftables.Set][]nft.Element{}
	for _, cs := range claimSets {
		_, _, l, err := cs.plan(tx, nil, match, "")
		if err != nil {
			return err
		}
		left[cs.set] = l
	}
	if ok, err := tx.SetExists(markers); err != nil || !ok {
		return err // a table of an earlier version: its first Setup makes them
	}
	return syncBookkeeping(tx, left)
}

// Check verifies, in ns, that what Setup(a) establishes is in place: the
// static rules, a's admin chain and its jump, a's claims with the lookup
// elements derived from them, and a's rules in the foreign chains (see
// foreign.Check). It writes nothing.
func Check(ns *netns.NS, a Attachment) error {
	want, err := wanted(a)
	if err != nil {
		return err
	}
	admin := adminChain(a.AdminChain)
	c, err := nft.Open(ns)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Update(func(tx *nft.Tx) error {
		ok, err := tx.TableExists(table)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("table inet %s not found", TableName)
		}
		cur, err := tx.Rules(forward)
		if err != nil {
			return err
		}
		var comments, wantComments []string
		for _, r := range cur {
			comments = append(comments, r.Comment)
		}
		for _, r := range rules() {
			wantComments = append(wantComments, r.Comment)
		}
		if !slices.Equal(comments, wantComments) {
			return fmt.Errorf("chain inet %s %s does not hold the firewall's rules", TableName, ForwardChain)
		}
		if ok, err := tx.ChainExists(admin); err != nil || !ok {
			if err == nil {
				err = fmt.Errorf("admin chain inet %s %s not found", TableName, admin.Name)
			}
			return err
		}
		jumps, err := tx.Rules(adminJumps)
		if err != nil {
			return err
		}
		if j := adminJumpRule(admin.Name); !slices.ContainsFunc(jumps, func(r nft.Rule) bool { return r.Comment == j.Comment }) {
			return fmt.Errorf("no jump to admin chain %s in chain inet %s %s", admin.Name, TableName, AdminJumpsChain)
		}
		for _, cs := range claimSets {
			if err := cs.check(tx, want[cs.set]); err != nil {
				return err
			}
		}
		protect, err := protects(tx, a)
		if err != nil {
			return err
		}
		for _, ch := range a.chains() {
			want := a.accepts()
			if ch.Iptables && !protect {
				want = nil
			}
			if err := foreign.Check(tx, ch, foreign.Mark{Owner: a.Owner}, want); err != nil {
				return err
			}
		}
		return nil
	})
}
