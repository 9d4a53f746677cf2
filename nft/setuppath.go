package nft

import (
	"slices"
	"sync/atomic"

	"github.com/google/nftables"

	"github.com/nftcni/nftcni/ownerid"
)

// How a Setup reads what is there, shared by TaggedTable.Setup and the
// components that keep more than one table (portmap). Three ways to read
// one table of ours for one owner. The slow path dumps every set (cost
// grows with the attachments on the host); it is the reference semantics.
// The fast path, when the table exists but owner's marker does not, reads
// only the elements with the wanted keys (Tx.Lookup), which is all that
// take-over decisions need when owner has nothing else, and adds with
// NLM_F_EXCL (Batch.ReplaceLookedUp), so that an element the lookup missed
// fails the batch instead of being kept with another owner's tag. With
// owner's marker present and carrying a record, the recorded path looks up
// the wanted keys and those the record gives — owner's previous elements —
// the same way. Without a record, the slow path. If anything on the fast
// or recorded path fails — a read, the plan, or the batch (an interval
// overlap an exact lookup cannot see makes the kernel refuse it with
// EEXIST or ENOTEMPTY; a kernel answering lookups in interval sets
// differently) — the whole Setup runs once more on the slow path
// (Conn.UpdateLookupsFirst), so those paths are optimisations that can only
// fall back, never a different result. A missing table has nothing to
// read at all.

// Recompute rebuilds, from the record of owner's marker (MarkerWith),
// the elements per set that the Setup which wrote it wanted.
type Recompute func(owner ownerid.Owner, record string) (map[*nftables.Set][]Element, error)

// Recorded is what owner's marker among markers says owner has: nil when
// it has no record, or recompute is nil or cannot read it.
func Recorded(owner ownerid.Owner, markers []Element, recompute Recompute) map[*nftables.Set][]Element {
	rec, ok := MarkerRecord(owner, markers)
	if !ok || recompute == nil {
		return nil
	}
	prev, err := recompute(owner, rec)
	if err != nil || prev == nil {
		return nil
	}
	return prev
}

// OwnerRead is how a Setup reads one table of ours for one owner, decided
// from the table's existence and owner's marker before any set is read.
type OwnerRead struct {
	// Exists says the table exists; without it there is nothing to read.
	Exists bool
	// Markers are the owners set's elements at owner's marker key, and
	// Mine says one of them is owner's.
	Markers []Element
	Mine    bool
	// Prev is what the marker's record says owner has: the recorded path.
	Prev map[*nftables.Set][]Element
	slow bool
}

// ReadOwner decides how to read table for owner: whole sets when slowOnly
// (the retry of a failed lookup path) or when owner's marker has no record
// recompute can read, lookups otherwise.
func (tx *Tx) ReadOwner(table *nftables.Table, owner ownerid.Owner, slowOnly bool, recompute Recompute) (OwnerRead, error) {
	var r OwnerRead
	var err error
	if r.Exists, err = tx.TableExists(table); err != nil || !r.Exists {
		return r, err
	}
	if r.Markers, r.Mine, err = tx.OwnerMarker(table, owner); err != nil {
		return r, err
	}
	if r.Mine && !slowOnly {
		r.Prev = Recorded(owner, r.Markers, recompute)
	}
	r.slow = slowOnly || (r.Mine && r.Prev == nil)
	return r, nil
}

// Lookups says the sets are read by lookups: the fast or recorded path.
func (r OwnerRead) Lookups() bool { return r.Exists && !r.slow }

// Whole says the sets are read whole: the slow path.
func (r OwnerRead) Whole() bool { return r.Exists && r.slow }

// Read is what s holds that the Setup needs to see: nothing without the
// table, the whole set on the slow path, and otherwise the elements at the
// keys of want, of the record and of more, each once.
func (r OwnerRead) Read(tx *Tx, s *nftables.Set, want []Element, more ...Element) ([]Element, error) {
	switch {
	case !r.Exists:
		return nil, nil
	case r.slow:
		return tx.Elements(s)
	}
	cur, err := tx.Lookup(s, slices.Concat(want, r.Prev[s], more))
	return UniqueElements(cur), err
}

// Replace makes s hold want in place of what drop selects of cur: with
// NLM_F_EXCL on a lookup path (Batch.ReplaceLookedUp), as a plain
// replacement otherwise.
func (r OwnerRead) Replace(b *Batch, s *nftables.Set, cur, want []Element, drop func(Element) bool) {
	if r.Lookups() {
		b.ReplaceLookedUp(s, cur, want, drop)
	} else {
		b.ReplaceElements(s, cur, want, drop)
	}
}

// UpdateLookupsFirst runs plan in one Update, and when that fails after
// plan read a table by lookups (it says so in *lookups, which starts each
// run false) and fallBack (nil: always) agrees, runs it once more with
// slowOnly.
func (c *Conn) UpdateLookupsFirst(plan func(tx *Tx, slowOnly bool, lookups *bool) error, fallBack func(error) bool) error {
	var lookups bool
	run := func(slowOnly bool) error {
		return c.Update(func(tx *Tx) error {
			lookups = false
			return plan(tx, slowOnly, &lookups)
		})
	}
	err := run(false)
	if lookups {
		paths.fast.Add(1)
	}
	if err != nil && lookups && (fallBack == nil || fallBack(err)) {
		paths.fallback.Add(1)
		err = run(true)
	}
	return err
}

// paths counts the Setups that ended their first Update on a lookup path
// (fast or recorded), and those of them that had to fall back to the slow
// one: live tests check with them that the kernel answers lookups as those
// paths expect (see export_test.go).
var paths struct{ fast, fallback atomic.Int64 }
