package nft

import (
	"fmt"

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
type TaggedTable struct {
	Table *nftables.Table
	Chain *nftables.Chain
	Sets  []*nftables.Set
	// Rules builds the chain's static rules.
	Rules func() []StaticRule
	// Needs are the kernel features a Setup's batch relies on: a failed
	// batch is explained by them (Conn.Explain).
	Needs []Feature
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
// are replaced. It is one batch guarded by the generation, and idempotent.
// Errors read "<what>: <cause>".
func (t *TaggedTable) Setup(ns *netns.NS, owner Owner, want map[*nftables.Set][]Element,
	takeOver func(s *nftables.Set, e Element) bool, what string) error {
	c, err := t.open(ns)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer c.Close()
	err = c.Update(func(tx *Tx) error {
		b := tx.Batch()
		b.AddTable(t.Table)
		if err := tx.EnsureChain(t.Chain); err != nil {
			return err
		}
		for _, s := range t.Sets {
			b.AddSet(s)
		}
		if err := tx.EnsureRules(t.Chain, t.Rules()); err != nil {
			return err
		}
		for _, s := range t.Sets {
			cur, err := tx.Elements(s)
			if err != nil {
				return err
			}
			b.ReplaceElements(s, cur, want[s], func(e Element) bool {
				return owner.OwnedBy(e.Comment) || takeOver(s, e)
			})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, c.Explain(err, t.Needs...))
	}
	return nil
}

// Teardown removes, in ns, everything owner added. Nothing to remove is
// success, and then nothing is written (no table is created). Errors read
// "<what>: <cause>".
func (t *TaggedTable) Teardown(ns *netns.NS, owner Owner, what string) error {
	return t.remove(ns, owner.OwnedBy, what)
}

// GC removes, in ns, everything of network not owned by one of valid.
func (t *TaggedTable) GC(ns *netns.NS, network string, valid []Owner, what string) error {
	return t.remove(ns, func(comment string) bool { return Stale(comment, network, valid) }, what)
}

func (t *TaggedTable) remove(ns *netns.NS, match func(comment string) bool, what string) error {
	c, err := t.open(ns)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer c.Close()
	if _, err := c.RemoveElements(t.Table, t.Sets, match); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
