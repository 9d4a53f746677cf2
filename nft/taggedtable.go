package nft

import (
	"errors"
	"fmt"
	"slices"

	"github.com/google/nftables"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/ownerid"
)

// BaseChain is a base chain of ours: table's chain name hooked at hook with
// priority prio, policy accept (our chains only ever return, drop or
// rewrite what they match).
func BaseChain(table *nftables.Table, name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{Table: table, Name: name, Type: typ, Hooknum: hook, Priority: prio, Policy: &accept}
}

// TaggedTable is the shape every component (masq, macspoof) keeps its state
// in: one table of ours with one base chain of static rules, and sets whose
// elements carry the owner tag of the attachment that added them. Its
// Setup, Teardown and GC are the component's; what differs per component is
// only what it wants in the sets and which foreign elements a Setup takes
// over.
//
// Besides Sets, the table holds the owners set (OwnersSet), one marker per
// owner, which lets Setup skip reading whole sets for an owner that has
// nothing in them yet, and carries the record from which Recompute
// rebuilds what the owner has, so that Teardown looks those elements up
// instead of reading whole sets.
type TaggedTable struct {
	Table *nftables.Table
	Chain *nftables.Chain
	Sets  []*nftables.Set
	// Rules builds the chain's static rules.
	Rules func() []StaticRule
	// Chains are the regular chains the wanted elements jump to (from a
	// verdict map) with their static rules: Setup makes sure they exist
	// before it adds the elements. They are never removed, as other
	// owners' elements may jump to them.
	Chains func(want map[*nftables.Set][]Element) []ChainRules
	// Recompute rebuilds, from the record of owner's marker (the record
	// argument of Setup), the elements that Setup wanted. Nil, or an
	// error, and Teardown reads whole sets.
	Recompute Recompute
	// Legacy are the sets of an earlier layout of the table: Teardown of
	// an owner whose marker has no record and GC remove what they hold of
	// it; Setup ignores them.
	Legacy []*nftables.Set
	// Needs are the kernel features a Setup's batch relies on: a failed
	// batch is explained by them (Conn.Explain).
	Needs []Feature
	// TakeOverByPrefix says takeOver selects elements by part of their
	// key (macspoof: the port name, whatever the MAC), which a lookup of
	// the wanted keys cannot find: when the fast path finds anything to
	// take over, Setup redoes it on the slow path, which sees them all.
	TakeOverByPrefix bool
}

// ChainRules is a chain with its static rules.
type ChainRules struct {
	Chain *nftables.Chain
	Rules []StaticRule
}

// Setup makes sure, in ns, the table, chain, sets and rules exist and that
// each set holds want[set], owned by owner: owner's previous elements and
// those takeOver selects (another owner's elements for the same key, say)
// are replaced, and owner's marker, carrying record (MarkerWith), is
// in the owners set (OwnersSet). It is one batch guarded by the generation,
// and idempotent. Errors read "<what>: <cause>". What it reads is an
// OwnerRead: lookups when it can, whole sets when it must (see
// setuppath.go).
func (t *TaggedTable) Setup(ns *netns.NS, owner ownerid.Owner, want map[*nftables.Set][]Element, record string,
	takeOver func(s *nftables.Set, e Element) bool, what string) error {
	c, err := Open(ns)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer c.Close()
	if err := c.Apply(t.Plan(owner, want, record, takeOver, what)); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Plan is Setup's plan, for a transaction the caller owns.
func (t *TaggedTable) Plan(owner ownerid.Owner, want map[*nftables.Set][]Element, record string,
	takeOver func(s *nftables.Set, e Element) bool, what string) Plan {
	owners := OwnersSet(t.Table)
	return Plan{What: what, Needs: t.Needs, Run: func(tx *Tx, slowOnly bool, lookups *bool) error {
		r, err := tx.ReadOwner(t.Table, owner, slowOnly, t.Recompute)
		if err != nil {
			return err
		}
		*lookups = *lookups || r.Lookups()
		b := tx.Batch()
		b.AddTable(t.Table)
		if err := tx.EnsureChain(t.Chain); err != nil {
			return err
		}
		for _, s := range t.Sets {
			b.AddSet(s)
		}
		b.AddSet(owners)
		if err := tx.EnsureRules(t.Chain, t.Rules()); err != nil {
			return err
		}
		// After the sets their rules look up, before the elements
		// jumping to them.
		if t.Chains != nil {
			for _, cr := range t.Chains(want) {
				if err := tx.EnsureChain(cr.Chain); err != nil {
					return err
				}
				if err := tx.EnsureRules(cr.Chain, cr.Rules); err != nil {
					return err
				}
			}
		}
		for _, s := range t.Sets {
			cur, err := r.Read(tx, s, want[s])
			if err != nil {
				return err
			}
			drop := func(e Element) bool { return owner.OwnedBy(e.Comment) || takeOver(s, e) }
			if r.Lookups() && t.TakeOverByPrefix && slices.ContainsFunc(cur, func(e Element) bool {
				return drop(e) && !owner.OwnedBy(e.Comment) && !slices.ContainsFunc(want[s], func(w Element) bool { return SameElement(e, w) })
			}) {
				return errSlowPath
			}
			r.Replace(b, s, cur, want[s], drop)
		}
		// The marker's key is owner's: whoever holds it is replaced.
		// Markers are always looked up, never dumped.
		b.ReplaceLookedUp(owners, r.Markers, []Element{MarkerWith(owner, record)}, func(Element) bool { return true })
		return nil
	}}
}

// errSlowPath stops a fast-path plan that found it cannot decide alone;
// Setup then redoes it on the slow path.
var errSlowPath = errors.New("nftables: fast path cannot decide, reading whole sets")

// Teardown removes, in ns, everything owner added. Nothing to remove is
// success, and then nothing is written (no table is created). Errors read
// "<what>: <cause>".
//
// It reads no whole set when it can help it: without owner's marker the
// owner has nothing here (a Setup writes the marker with its elements, a
// Teardown removes it with the last of them), and with a marker carrying
// a record it looks up exactly the elements Recompute derives from it,
// deleting those still tagged as owner's (another owner may have taken a
// key over since). A marker without a record (written before records
// existed) makes it read whole sets, legacy ones too. Known limit: state
// written before owner markers existed at all is left to GC.
func (t *TaggedTable) Teardown(ns *netns.NS, owner ownerid.Owner, what string) error {
	c, err := Open(ns)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer c.Close()
	owners := OwnersSet(t.Table)
	err = c.Update(func(tx *Tx) error {
		exists, err := tx.TableExists(t.Table)
		if err != nil || !exists {
			return err
		}
		markers, mine, err := tx.OwnerMarker(t.Table, owner)
		if err != nil || !mine {
			return err
		}
		prev := Recorded(owner, markers, t.Recompute)
		if prev == nil {
			return removeMatching(tx, t.Table, append(slices.Concat(t.Sets, t.Legacy), owners), owner.OwnedBy)
		}
		b := tx.Batch()
		for _, s := range t.Sets {
			cur, err := tx.Lookup(s, prev[s])
			if err != nil {
				return err
			}
			var del []Element
			for _, e := range UniqueElements(cur) {
				if owner.OwnedBy(e.Comment) {
					del = append(del, e)
				}
			}
			b.DeleteElements(s, del)
		}
		var del []Element
		for _, e := range markers {
			if owner.OwnedBy(e.Comment) {
				del = append(del, e)
			}
		}
		b.DeleteElements(owners, del)
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// GC removes, in ns, everything of network not owned by one of valid.
func (t *TaggedTable) GC(ns *netns.NS, network string, valid []ownerid.Owner, what string) error {
	c, err := Open(ns)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer c.Close()
	// The owners set is last: a marker goes with the owner's last element.
	if _, err := c.RemoveElements(t.Table, append(slices.Concat(t.Sets, t.Legacy), OwnersSet(t.Table)), ownerid.StaleFunc(network, valid)); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
