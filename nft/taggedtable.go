package nft

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/google/nftables"

	"github.com/nftcni/nftcni/netns"
)

// BaseChain is a base chain of ours: table's chain name hooked at hook with
// priority prio, policy accept (our chains only ever return, drop or
// rewrite what they match).
func BaseChain(table *nftables.Table, name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{Table: table, Name: name, Type: typ, Hooknum: hook, Priority: prio, Policy: &accept}
}

// Opener dials nf_tables in a namespace: Open, or a fake in golden tests.
type Opener func(ns *netns.NS) (*Conn, error)

// TaggedTable is the shape every component (masq, macspoof) keeps its state
// in: one table of ours with one base chain of static rules, and sets whose
// elements carry the owner tag of the attachment that added them. Its
// Setup, Teardown and GC are the component's; what differs per component is
// only what it wants in the sets and which foreign elements a Setup takes
// over.
//
// Besides Sets, the table holds the owners set (OwnersSet), one marker per
// owner, which lets Setup skip reading whole sets for an owner that has
// nothing in them yet.
type TaggedTable struct {
	Table *nftables.Table
	Chain *nftables.Chain
	Sets  []*nftables.Set
	// Rules builds the chain's static rules.
	Rules func() []StaticRule
	// Needs are the kernel features a Setup's batch relies on: a failed
	// batch is explained by them (Conn.Explain).
	Needs []Feature
	// TakeOverByPrefix says takeOver selects elements by part of their
	// key (macspoof: the port name, whatever the MAC), which a lookup of
	// the wanted keys cannot find: when the fast path finds anything to
	// take over, Setup redoes it on the slow path, which sees them all.
	TakeOverByPrefix bool
	// Open dials nf_tables; nil means Open. Golden tests put a fake here.
	Open Opener
}

func (t *TaggedTable) open(ns *netns.NS) (*Conn, error) {
	if t.Open != nil {
		return t.Open(ns)
	}
	return Open(ns)
}

// Setup makes sure, in ns, the table, chain, sets and rules exist and that
// each set holds want[set], owned by owner: owner's previous elements and
// those takeOver selects (another owner's elements for the same key, say)
// are replaced, and owner's marker is in the owners set (OwnersSet). It is
// one batch guarded by the generation, and idempotent. Errors read
// "<what>: <cause>".
//
// Two ways to read what is there. The slow path dumps every set (cost
// grows with the attachments on the host); it is the reference semantics
// and is taken when owner's marker is present, i.e. owner may have
// previous elements with other keys. The fast path, when the table exists
// but owner's marker does not, reads only the elements with the wanted
// keys (Tx.Lookup), which is all that take-over decisions need when owner
// has nothing else, and adds with NLM_F_EXCL (Batch.ReplaceLookedUp), so
// that an element the lookup missed fails the batch instead of being kept
// with another owner's tag. If anything on the fast path fails — a read, the plan,
// or the batch (an interval overlap an exact lookup cannot see makes the
// kernel refuse it with EEXIST or ENOTEMPTY; a kernel answering lookups in
// interval sets differently) — the whole Setup runs once more on the slow
// path, so the fast path is an optimisation that can only fall back, never
// a different result. A missing table has nothing to read at all.
func (t *TaggedTable) Setup(ns *netns.NS, owner Owner, want map[*nftables.Set][]Element,
	takeOver func(s *nftables.Set, e Element) bool, what string) error {
	c, err := t.open(ns)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer c.Close()
	owners := OwnersSet(t.Table)
	plan := func(slowOnly bool, fast *bool) func(tx *Tx) error {
		return func(tx *Tx) error {
			*fast = false
			exists, err := tx.TableExists(t.Table)
			if err != nil {
				return err
			}
			var markers []Element
			slow := true
			if exists {
				var mine bool
				if markers, mine, err = tx.OwnerMarker(t.Table, owner); err != nil {
					return err
				}
				slow = slowOnly || mine
				*fast = !slow
			}
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
			for _, s := range t.Sets {
				var cur []Element
				switch {
				case !exists:
				case slow:
					cur, err = tx.Elements(s)
				default:
					cur, err = tx.Lookup(s, want[s])
				}
				if err != nil {
					return err
				}
				drop := func(e Element) bool { return owner.OwnedBy(e.Comment) || takeOver(s, e) }
				if *fast && t.TakeOverByPrefix && slices.ContainsFunc(cur, func(e Element) bool {
					return drop(e) && !slices.ContainsFunc(want[s], func(w Element) bool { return SameElement(e, w) })
				}) {
					return errSlowPath
				}
				if *fast {
					b.ReplaceLookedUp(s, cur, want[s], drop)
				} else {
					b.ReplaceElements(s, cur, want[s], drop)
				}
			}
			// The marker's key is owner's: whoever holds it is replaced.
			// Markers are always looked up, never dumped.
			b.ReplaceLookedUp(owners, markers, []Element{owner.Marker()}, func(Element) bool { return true })
			return nil
		}
	}
	var fast bool
	err = c.Update(plan(false, &fast))
	if fast {
		paths.fast.Add(1)
	}
	if err != nil && fast {
		paths.fallback.Add(1)
		err = c.Update(plan(true, &fast))
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, c.Explain(err, t.Needs...))
	}
	return nil
}

// paths counts the Setups that ended their first Update on the fast path,
// and those of them that had to fall back to the slow one: live tests
// check with them that the kernel answers lookups as the fast path
// expects (see export_test.go).
var paths struct{ fast, fallback atomic.Int64 }

// errSlowPath stops a fast-path plan that found it cannot decide alone;
// Setup then redoes it on the slow path.
var errSlowPath = errors.New("nftables: fast path cannot decide, reading whole sets")

// Teardown removes, in ns, everything owner added. Nothing to remove is
// success, and then nothing is written (no table is created). Errors read
// "<what>: <cause>".
func (t *TaggedTable) Teardown(ns *netns.NS, owner Owner, what string) error {
	return t.remove(ns, owner.OwnedBy, what)
}

// GC removes, in ns, everything of network not owned by one of valid.
func (t *TaggedTable) GC(ns *netns.NS, network string, valid []Owner, what string) error {
	return t.remove(ns, StaleFunc(network, valid), what)
}

func (t *TaggedTable) remove(ns *netns.NS, match func(comment string) bool, what string) error {
	c, err := t.open(ns)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer c.Close()
	// The owners set is last: a marker goes with the owner's last element.
	if _, err := c.RemoveElements(t.Table, append(slices.Clip(t.Sets), OwnersSet(t.Table)), match); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
